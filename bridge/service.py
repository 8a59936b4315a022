"""`twistd mqksbridge`: options and the service tree (broker + each door's listeners,
the admin endpoint), stopped in order by bridge.shutdown.BridgeService.

Each door module exposes `build(config, broker, scheduler, reactor, clock) -> (door,
services)`, where `broker` is the engine (bridge.engine.IEngine: the embedded one, the
core in this process, or with `[cluster] engine = "rabbitmq"` the cluster engine, this
process a gateway: bridge.cluster.gateway); adding a door means adding it to DOORS, its keys to
bridge.settings.TABLE and a flag here. `reactor` is for I/O (listeners, the per-turn
flush), `clock` for time.
"""
import difflib
import gc
import importlib
import signal
import sys

from twisted.application import service
from twisted.logger import Logger
from twisted.python import usage

from mqksbridge.bridge import admin as admin_endpoint
from mqksbridge.bridge import config as configuration
from mqksbridge.bridge import journal
from mqksbridge.bridge.clock import ReactorClock, periodic
from mqksbridge.bridge.cluster import gateway
from mqksbridge.bridge.descriptors import DescriptorLimit
from mqksbridge.bridge.engine import EmbeddedEngine
from mqksbridge.bridge.listeners import quiet_cannot_listen
from mqksbridge.bridge.logs import json_observer, log_file
from mqksbridge.bridge.memory import MemoryWatermark, watermark_bytes
from mqksbridge.bridge.outbox import FlushScheduler
from mqksbridge.bridge import security as security_module
from mqksbridge.bridge import spill as spill_module
from mqksbridge.bridge.shutdown import BridgeService

DOORS = ["mqks", "malamute", "twino", "textqueue"]
log = Logger(namespace="mqksbridge.service")

# Flags for common keys: flag -> dotted configuration key (value parsed by --set's rules).
KEY_FLAGS = {
    "mqks-max-line": ("mqks.max_line", "longest MQKS request line in bytes"),
    "mqks-stream": ("mqks.stream", "core stream that carries MQKS events"),
    "flow-limit": ("broker.flow_limit", "messages a consumed queue holds before its "
                   "publishers stop being read (0: never)"),
    "shutdown-timeout": ("broker.shutdown_timeout", "seconds SIGTERM waits for goodbyes"),
    "malamute-timeout": ("malamute.timeout", "seconds of silence before a Malamute "
                         "session expires"),
    "twino-node": ("twino.node", "Twino node name"),
    "twino-token": ("twino.token", "Client-Token every Twino hello must carry"),
    "admin-sample-interval": ("admin.sample_interval", "seconds between admin rate samples"),
    "log-format": ("log.format", "text or json (one JSON object per line)"),
}


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = ("One broker, four doors: MQKS, Malamute, Twino TMQP/2.0 and TextQueue. "
                "Starts on embedded defaults; --config FILE (TOML), then --set and the "
                "other flags override them. Every key: docs/configuration.md.")
    optFlags = [
        ["check-config", None, "validate the configuration, print it (or the error) and "
                               "exit 0 (or 1) without starting"],
    ]
    optParameters = [
        ["config", "c", None, "TOML configuration file"],
        ["data", "d", None, "data directory (default ./var)"],
    ] + [[flag, None, None, f"{help} ({key})"] for flag, (key, help) in KEY_FLAGS.items()]

    def __init__(self):
        super().__init__()
        self.listeners = {}
        self.settings = {}

    def parseOptions(self, options=None):
        """A bad option is reported in one line, with the nearest option, before anything
        else: twistd would print the whole usage first and the error last, where it
        scrolls out of sight."""
        try:
            super().parseOptions(options)
        except usage.UsageError as exc:
            print(f"twistd mqksbridge: {exc}{self._guess(str(exc))}; every option: "
                  "twistd mqksbridge --help", file=sys.stderr)
            raise SystemExit(1)

    def _guess(self, message):
        words = [w for w in message.replace("'", " ").split() if w.startswith("-")]
        if "not recognized" not in message or not words:
            return ""
        known = [f"--{name}" for name in (*self.longOpt, *self.synonyms)]
        guess = difflib.get_close_matches(words[0].split("=")[0], known, n=1, cutoff=0.6)
        return f" (did you mean {guess[0].rstrip('=')}?)" if guess else ""

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

    def opt_inbox(self, directory):
        """TextQueue inbox directory: its *.tq files are publishes (repeatable;
        textqueue.inbox)"""
        self.settings.setdefault("textqueue", {}).setdefault("inbox", []).append(directory)

    def opt_outbox(self, assignment):
        """TextQueue outbox: QUEUE=FILE, the broker consumes QUEUE into FILE (repeatable;
        [textqueue.outbox])"""
        queue, sep, path = assignment.partition("=")
        if not sep or not queue or not path:
            raise usage.UsageError(f"--outbox wants QUEUE=FILE, got {assignment!r}")
        self.settings.setdefault("textqueue", {}).setdefault("outbox", {})[queue] = path

    def opt_admin(self, endpoint):
        """admin HTTP endpoint (JSON API, /metrics, dashboard), default
        tcp:15680:interface=127.0.0.1 (repeatable; 'none' disables it)"""
        self._listen("admin", endpoint)

    def opt_set(self, assignment):
        """set any configuration key: --set section.key=value, value as in TOML
        (repeatable), e.g. --set twino.ping_interval=30"""
        try:
            configuration.deep_update(self.settings, configuration.parse_setting(assignment))
        except configuration.ConfigError as exc:
            raise usage.UsageError(str(exc))

    def overrides(self):
        result = configuration.deep_update({}, self.settings)
        for flag, (key, _) in KEY_FLAGS.items():
            if self[flag] is not None:
                configuration.deep_update(
                    result, configuration.parse_setting(f"{key}={self[flag]}"))
        for door, eps in self.listeners.items():
            result.setdefault(door, {})["listen"] = eps
        if self["data"]:
            result["data_dir"] = self["data"]
        return result


class GcTuning(service.Service):
    """Tunes the cyclic garbage collector for a broker's heap when the application starts:
    at Python's default (a young collection every 700 allocations) the collector rescans
    queued messages thousands of times a second, a quarter of a busy broker's time."""

    def __init__(self, gc_threshold=None):
        self.gc_threshold = gc_threshold

    def startService(self):
        super().startService()
        if self.gc_threshold:
            gc.set_threshold(*self.gc_threshold)


def collect_young():
    """One young collection, run every `broker.gc_young_interval` seconds.

    Python counts allocations *minus deallocations* towards its young collection, and a
    queue in a steady state frees an old message for each new one: the count stays low
    while every new message (and the cyclic garbage of closed connections) piles up in
    the young generation. In the soak (a queue that drops its oldest, 30 connections
    closed a second) a young collection then came once a minute over several hundred
    thousand objects and held the reactor 190-280 ms each time. Collected every second
    the young generation holds one second of allocations, a few milliseconds' work."""
    gc.collect(0)


def build(config, reactor=None, clock=None):
    """The service tree for a configuration; returns (MultiService, broker, doors, listeners).

    `listeners` maps a door name to its services, listeners first (each has
    `.ready`/`.port`). `clock` (an IReactorTime, default the reactor) is the time of the
    broker and every door: tests pass a task.Clock.
    """
    if reactor is None:
        from twisted.internet import reactor
    if clock is None:
        clock = reactor
    top = BridgeService(clock, config["broker"]["shutdown_timeout"])
    settings = config["broker"]
    security = security_module.build(config)
    broker = build_engine(config, reactor, clock, guarded=security.enabled)
    security.counters = broker.counters          # refusals beside the broker's other counts
    clustered = config["cluster"]["engine"] != "embedded"
    spill, spill_service = (None, None) if clustered else \
        spill_module.build(config, broker, reactor, clock)   # before any queue
    if spill is not None:
        spill_service.setServiceParent(top)
        periodic(settings["sweep_interval"], spill.check, clock, "spill budget",
                 phase=0.7).setServiceParent(top)
    GcTuning(settings["gc_threshold"]).setServiceParent(top)
    if settings["gc_young_interval"]:
        periodic(settings["gc_young_interval"], collect_young, clock,
                 "young collection", phase=0.5).setServiceParent(top)
    DescriptorLimit().setServiceParent(top)     # before the listeners start
    # Periodic work has one form: bridge/ owns it as services on the injected clock
    # (bridge.clock.periodic; a step that fails is logged and runs again next time; each
    # 1 s timer has its own phase, so that they do not all run in one turn). The
    # core only offers tick(now) methods, and keeps its clock's call_later for rare
    # one-off timers (delete-when-unused). The doors' sweeps come with their services.
    periodic(settings["sweep_interval"], broker.tick, clock, "broker sweep").setServiceParent(top)
    if clustered:                 # the cluster keeps the queues: no journal, no definitions
        durability = None
        gateway.CloseLast(broker).setServiceParent(top)
    else:
        durability, journal_service = journal.build(
            config, broker, reactor, clock, fsync_observer=lambda s: _observe_fsync(top, s))
        journal_service.setServiceParent(top)
    scheduler = FlushScheduler(reactor)
    doors, listeners = {}, {}
    broker.memory = MemoryWatermark(watermark_bytes(settings["memory_watermark"]), doors,
                                    spill=spill)
    if spill is not None:
        spill.memory = broker.memory
    periodic(settings["memory_check_interval"], broker.memory.check, clock,
             "memory watermark", phase=0.3).setServiceParent(top)
    for name in DOORS:
        module = importlib.import_module(f"mqksbridge.bridge.{name}")
        doors[name], listeners[name] = module.build(config, broker, scheduler, reactor, clock,
                                                    security=security)
    door_services = [svc for name in DOORS for svc in listeners[name]]
    if clustered:                 # the doors open once the engine reaches the cluster
        gateway.OpenWhenConnected(broker, top, door_services).setServiceParent(top)
    else:
        for svc in door_services:
            svc.setServiceParent(top)
    top.doors, top.scheduler, top.broker, top.security = doors, scheduler, broker, security
    top.durability = durability
    top.spill = spill
    if durability is not None:
        durability.recover()    # before any listener accepts
    top.admin, services = admin_endpoint.build(config, broker, doors, listeners, reactor,
                                               clock, security=security)
    listeners["admin"] = [svc for svc in services if hasattr(svc, "ready")]
    for svc in services:
        svc.setServiceParent(top)
    return top, broker, doors, listeners


def build_engine(config, reactor, clock, guarded=False):
    """The engine `[cluster] engine` names: the core in this process (embedded), or this
    process a gateway to a RabbitMQ cluster (bridge.cluster.gateway); same model options."""
    settings = config["broker"]
    options = dict(
        flow_limit=settings["flow_limit"] or None, flow_max_hold=settings["flow_max_hold"],
        queue_size_limit=configuration.size_limit(settings["queue_size_limit"]),
        mailbox_size_limit=configuration.size_limit(settings["mailbox_size_limit"]),
        queue_length_limit=configuration.size_limit(settings["queue_length_limit"]),
        queue_overflow=settings["queue_overflow"], guarded=guarded)
    if config["cluster"]["engine"] == "rabbitmq":
        return gateway.build_engine(config, ReactorClock(clock), reactor, **options)
    return EmbeddedEngine(ReactorClock(clock), **options)


def _observe_fsync(top, seconds):
    """The admin histogram of fsync times (the journal's worker thread calls this)."""
    if top.admin is not None:
        top.admin.metrics.fsync.observe(seconds)


def makeService(options):
    """twistd's entry: a bad configuration is refused here, naming the key and the value
    (exit 1); --check-config stops here too (exit 0 with the effective configuration)."""
    try:
        config = configuration.load(options["config"], options.overrides())
        if options["check-config"]:
            security_module.build(config)        # the users file is checked too
            print(configuration.dump(config), end="")
            raise SystemExit(0)
        top = build(config)[0]
    except (OSError, configuration.ConfigError, security_module.users_file.UsersError) as exc:
        print(f"mqksbridge: {exc}", file=sys.stderr)
        raise SystemExit(1)
    if config["log"]["format"] == "json":
        top.log_observer = json_observer(log_file(getattr(options, "parent", None)))
    from twisted.internet import reactor
    reactor.callWhenRunning(stop_on_sigterm, reactor)
    sys.excepthook = quiet_cannot_listen
    return top


def stop_on_sigterm(reactor):
    """SIGTERM is how supervisors ask for a stop: run the ordered shutdown and exit 0.
    (Twisted's own handler re-raises the signal after shutdown, so the process would end
    'killed by SIGTERM' even when everything went well.)"""
    def stop(signum, frame):
        log.info("SIGTERM: shutting down")
        reactor.callFromThread(reactor.stop)
    signal.signal(signal.SIGTERM, stop)
