"""A gateway's side of `[cluster]`: its engine made from the configuration, its doors opened
only once that engine reaches the cluster, its connection closed last at shutdown.

A gateway that cannot reach any node does not listen (a client would be accepted and then
have nowhere to put a message): it logs that it waits, the engine logs each failed attempt
and tries the next node after a pause that doubles up to a few seconds, and the doors open
on the first connection. The admin endpoint listens from the start, so that /cluster and
/metrics say what the gateway is waiting for.
"""
import socket

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger

from mqksbridge.bridge.listeners import CannotListen
from mqksbridge.bridge.settings import amqp_url, without_password

log = Logger(namespace="mqksbridge.cluster")


def urls(cluster):
    """`cluster.urls` with `cluster.vhost` in every URL that names none."""
    vhost = cluster["vhost"]
    if not vhost:
        return list(cluster["urls"])
    from urllib.parse import quote
    return [url if amqp_url(url)[3] else _with_path(url, quote(vhost, safe=""))
            for url in cluster["urls"]]


def _with_path(url, path):
    base, sep, query = url.partition("?")
    return f"{base.rstrip('/')}/{path}{sep}{query}"


def node_name(cluster):
    """This gateway's name: `cluster.node`, else the host's name (its first label)."""
    return cluster["node"] or socket.gethostname().split(".")[0] or "gateway"


def build_engine(config, clock, reactor, **broker_options):
    """The RabbitMQ engine of a `[cluster] engine = "rabbitmq"` configuration; it starts
    connecting at once."""
    from mqksbridge.bridge.engine.rabbitmq import RabbitMQEngine
    cluster = config["cluster"]
    return RabbitMQEngine(clock, urls(cluster), node=node_name(cluster),
                          prefix=cluster["prefix"], replicas=cluster["replicas"],
                          prefetch=cluster["prefetch"], reactor=reactor, **broker_options)


class OpenWhenConnected(service.Service):
    """Adds the doors' services to `top` (which starts them: listeners bind then) once the
    engine is ready; until then they are not part of the tree."""

    def __init__(self, engine, top, services):
        self.engine = engine
        self.top = top
        self.services = list(services)
        self.opened = False

    def startService(self):
        super().startService()
        if self.opened:
            return
        log.info("not listening until the cluster answers: {urls}",
                 urls=", ".join(self._shown()))
        self.engine.ready().addCallback(self._open)

    def _shown(self):
        return [without_password(url) for url in self.engine.connection.urls]

    def _open(self, _):
        if not self.running or self.opened:
            return
        self.opened = True
        log.info("connected to the cluster at {url}: opening the doors",
                 url=self._shown()[self.engine.connection.urls.index(self.engine.connection.url)]
                 if self.engine.connection.url in self.engine.connection.urls else "?")
        try:
            for svc in self.services:
                svc.setServiceParent(self.top)
        except CannotListen:                   # logged by the listener: a missing door
            from twisted.internet import reactor      # must not look healthy
            reactor.stop()


class CloseLast(service.Service):
    """At shutdown (the ordered one's step 4, bridge.shutdown) waits until RabbitMQ has
    confirmed or refused every publish made, then closes the engine's connection: what
    consumers held unsettled goes back to their queues in RabbitMQ."""

    def __init__(self, engine):
        self.engine = engine

    def stopService(self):
        super().stopService()
        confirmed = defer.Deferred()
        storage = self.engine.storage
        storage.when_stored(storage.appended, lambda: confirmed.callback(None))
        confirmed.addCallback(lambda _: self.engine.stop())
        return confirmed
