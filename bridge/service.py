"""`twistd mqksbridge`: options and the service tree (broker + each door's listeners).

Each door module exposes `build(config, broker, scheduler, reactor) -> (door, services)`;
adding a door means adding it to DOORS, a section to config.DEFAULTS and a flag here.
"""
import gc
import importlib

from twisted.application import service
from twisted.python import usage

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.clock import ReactorClock
from mqksbridge.bridge.outbox import FlushScheduler
from mqksbridge.core import Broker

DOORS = ["mqks", "malamute", "twino"]


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = ("One broker, four doors: MQKS, Malamute, Twino TMQP/2.0 and TextQueue. "
                "Starts on embedded defaults; --config FILE (TOML) and flags override them.")
    optParameters = [
        ["config", "c", None, "TOML configuration file"],
        ["data", "d", None, "data directory (default ./var)"],
        ["mqks-max-line", None, None, "longest MQKS request line in bytes", int],
    ]

    def __init__(self):
        super().__init__()
        self.listeners = {}

    def _listen(self, door, endpoint):
        self.listeners.setdefault(door, [])
        if endpoint != "none":
            self.listeners[door].append(endpoint)

    def opt_mqks(self, endpoint):
        """MQKS listener endpoint (repeatable; 'none' disables the door)"""
        self._listen("mqks", endpoint)

    def opt_malamute(self, endpoint):
        """Malamute ZeroMQ endpoint, e.g. tcp://*:9999 (repeatable; 'none' disables)"""
        self._listen("malamute", endpoint)

    def opt_twino(self, endpoint):
        """Twino TMQP/2.0 listener endpoint (repeatable; 'none' disables the door)"""
        self._listen("twino", endpoint)

    def overrides(self):
        result = {door: {"listen": eps} for door, eps in self.listeners.items()}
        if self["data"]:
            result["data_dir"] = self["data"]
        if self["mqks-max-line"]:
            result.setdefault("mqks", {})["max_line"] = self["mqks-max-line"]
        return result


class BrokerService(service.Service):
    """Runs the broker's periodic sweep while the application runs, and tunes the cyclic
    garbage collector for a broker's heap: at Python's default (a young collection every
    700 allocations) the collector rescans queued messages thousands of times a second,
    a quarter of a busy broker's time."""

    def __init__(self, broker, gc_threshold=None):
        self.broker = broker
        self.gc_threshold = gc_threshold

    def startService(self):
        super().startService()
        if self.gc_threshold:
            gc.set_threshold(*self.gc_threshold)
        self.broker.start()

    def stopService(self):
        self.broker.stop()
        return super().stopService()


def build(config, reactor=None):
    """The service tree for a configuration; returns (MultiService, broker, doors, listeners).

    `listeners` maps a door name to its listener services (each has `.ready`/`.port`).
    """
    if reactor is None:
        from twisted.internet import reactor
    top = service.MultiService()
    settings = config["broker"]
    broker = Broker(ReactorClock(reactor), sweep_interval=settings["sweep_interval"],
                    flow_limit=settings["flow_limit"] or None,
                    flow_max_hold=settings["flow_max_hold"])
    BrokerService(broker, config["broker"]["gc_threshold"]).setServiceParent(top)
    scheduler = FlushScheduler(reactor)
    doors, listeners = {}, {}
    for name in DOORS:
        module = importlib.import_module(f"mqksbridge.bridge.{name}")
        doors[name], listeners[name] = module.build(config, broker, scheduler, reactor)
        for svc in listeners[name]:
            svc.setServiceParent(top)
    return top, broker, doors, listeners


def makeService(options):
    try:
        config = configuration.load(options["config"], options.overrides())
    except (OSError, configuration.ConfigError) as exc:
        raise usage.UsageError(str(exc))
    return build(config)[0]
