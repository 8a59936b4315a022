"""The admin endpoint: JSON API, Prometheus /metrics and the live dashboard (docs/admin.md).

`build` is the entry point, called by bridge.service once the doors exist.
"""
from mqksbridge.bridge.admin.auth import AdminAuth
from mqksbridge.bridge.admin.metrics import Metrics
from mqksbridge.bridge.admin.sampler import Sampler
from mqksbridge.bridge.admin.view import AdminView
from mqksbridge.bridge.admin.web import site
from mqksbridge.bridge.clock import periodic
from mqksbridge.bridge.listeners import ListenerService


class Admin:
    """What build made: the view (JSON), the sampler (rates) and the metrics registry
    (`metrics.fsync` is the histogram durable journals observe)."""

    def __init__(self, view, sampler, metrics, factory):
        self.view, self.sampler, self.metrics, self.factory = view, sampler, metrics, factory


def build(config, broker, doors, listeners, reactor, clock=None, security=None):
    """(Admin, services): the sampler (on `clock`, the reactor by default) and one HTTP
    listener per `admin.listen` endpoint."""
    settings = config["admin"]
    clock = clock or reactor
    sampler = Sampler(broker, doors, clock)
    view = AdminView(broker, doors, listeners, sampler, clock,
                     interval=settings["sample_interval"], node=config["twino"]["node"])
    metrics = Metrics(view, settings["latency_sample_every"])
    auth = AdminAuth(security, settings["token"], clock, settings["session_lifetime"],
                     settings["login_failures"], settings["login_window"])
    if config["cluster"]["engine"] == "rabbitmq":
        from mqksbridge.bridge.cluster.status import ClusterStatus
        view.cluster_status = ClusterStatus(config, broker, doors, reactor)
    factory = site(view, metrics, auth)
    services = [periodic(settings["sample_interval"], sampler.sample, clock, "admin sampler",
                         phase=0.25)]
    services += [ListenerService(reactor, endpoint, factory) for endpoint in settings["listen"]]
    return Admin(view, sampler, metrics, factory), services
