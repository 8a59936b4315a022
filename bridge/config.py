"""Configuration: embedded defaults, then an optional TOML file, then command-line flags.

Every listener is a Twisted endpoint string (`tcp:25000`, `ssl:...`, `unix:...`), or a
ZeroMQ endpoint for the Malamute door. See docs/configuration.md for every key.

RULES, next to DEFAULTS, says what each key accepts (type, range, choices); `validate`
refuses anything else at start-up with the key and the value in the message.
"""
import copy
import difflib
import json
import math
import tomllib

from mqksbridge.core.limits import overflow_error

DEFAULTS = {
    "data_dir": "./var",
    "broker": {
        "sweep_interval": 1.0,       # seconds between ack-timeout/expiry sweeps
        "gc_threshold": [50_000, 20, 100],  # gc.set_threshold at start; [] keeps Python's
        "gc_young_interval": 1.0,    # seconds between young collections (0: only Python's)
        "flow_limit": 10_000,        # messages a queue with consumers holds before its
                                     # publishers stop being read (0: never; core.flow)
        "flow_max_hold": 1.0,        # seconds a publisher is held at most
        "shutdown_timeout": 10.0,    # seconds SIGTERM waits for goodbyes and flushes at most
        "queue_size_limit": "max",   # content bytes per queue, whoever creates it; or
                                     # [[pattern, bytes], ...] by name, first match wins
        "mailbox_size_limit": "max",  # the same per mailbox (Malamute addresses, Twino clients)
        "queue_length_limit": "max",  # messages a queue keeps; or [[pattern, count], ...]
        "queue_overflow": "reject",  # a put into a full queue: reject, drop-oldest,
                                     # dead-letter:QUEUE; or [[pattern, policy], ...]
        "memory_watermark": 0.4,     # resident memory past which publishers are not read:
                                     # a fraction of the machine's, bytes, or "max" (off)
        "memory_check_interval": 0.5,  # seconds between checks of the watermark
        "queue_memory_window": 16 << 20,  # content bytes of a queue's backlog kept in memory;
                                     # the rest is paged out to disk ("max": all in memory)
        "queue_memory_window_messages": 50_000,  # and messages (docs/limits.md)
        "queue_memory_total": 256 << 20,  # every queue's resident backlog together ("max": no cap)
    },
    "mqks": {
        "listen": ["tcp:25000"],
        "stream": "mqks",            # the core stream that carries MQKS events
        "max_line": 1 << 20,         # longer request lines: error reply, connection closed
        "high_water": 1024 * 1024,   # pending output bytes before a consumer is paused (see docs)
        "max_event": 1024,           # longer events are refused with an error (docs/limits.md)
        "listen_users": {},          # [mqks.listen_users] endpoint -> the user its clients are
        "auth": [],                  # endpoints whose clients log in with a first `auth` line
        "max_connections": 10_000,   # more at once: an error line and the close (0: no limit)
        "handshake_timeout": 10.0,   # seconds to finish TLS and an `auth` listener's login
    },
    "malamute": {
        "listen": ["tcp://*:9999"],  # ZeroMQ endpoints (tcp://, ipc://), repeatable
        "mechanism": "null",         # null | plain (ZMTP PLAIN logins: needs security.users)
        "timeout": 60.0,             # seconds without any frame before a session expires
        "check_interval": 1.0,       # one expiry sweep over every session this often
        "mailbox_size_warn": "max",   # log once when a mailbox holds more bytes than this
        "high_water": 10000,         # stream copies held for a peer whose socket is full
        "max_message_size": 64 << 20,  # larger ZeroMQ messages: connection closed
        "max_frames": 1024,          # more frames in one ZeroMQ message: connection closed
        "credit": True,              # honour CREDIT from clients that send it (opt-in)
        "max_subscriptions": 1000,   # stream reads + service offers per session; then ERROR 300
        "max_pattern": 255,          # bytes of a STREAM-READ/SERVICE-OFFER pattern; then ERROR 300
        "max_subject": 1024,         # subject bytes patterns (bar plain text) are tried on
        "max_connections": 10_000,   # more at once: ZMTP ERROR and the close (0: no limit)
        "handshake_timeout": 10.0,   # seconds to the ZMTP greeting and a first command
        "curve": {},                 # [malamute.curve] endpoint -> its CURVE secret key file
    },
    "twino": {
        "listen": ["tcp:22200"],     # Twisted endpoint strings
        "node": "mqksbridge",        # node name in events and the instance list
        "max_frame_size": 64 << 20,  # larger declared frames: connection closed, nothing buffered
        "high_water": 1024 * 1024,   # pending output bytes before a consumer is paused (see docs)
        "ping_interval": 120.0,      # idle seconds before the server PINGs a client
        "ping_timeout": 10.0,        # seconds a PINGed client has to show any traffic
        "handshake_timeout": 10.0,   # seconds to send protocol bytes and hello
        "max_hello": 64 * 1024,      # bytes held before a hello is in; more: connection closed
        "max_connections": 10_000,   # more at once: answered 503 and closed (0: no limit)
        "check_interval": 1.0,       # one sweep over every connection for the three above
        "token": "",                 # when set, hellos must carry this Client-Token (else 401)
        "allow_admin": True,         # false: admin operations (604-663) answer 401
        "auto_create_channels": True,
        "auto_create_queues": True,
        "producer_ack": [],          # [[pattern, policy], ...] on "channel/queue-id", first wins
        "producer_ack_default": "relay",  # received | sent | relay (the consumer's ack)
    },
    "textqueue": {
        "inbox": [],                 # directories whose *.tq files are publishes (docs/guide.md)
        "outbox_dirs": [],           # directories where a file <queue>.tq consumes that queue
        "outbox": {},                # [textqueue.outbox] queue name -> the file it fills
        "watch": "auto",             # auto (inotify where the platform has it) | inotify | poll
        "poll_interval": 0.5,        # seconds between looks at every file (with inotify too)
        "grace": 2.0,                # seconds a file's unended last record must stay unchanged
        "auto_create": True,         # an inbox record to a missing queue creates it
        "max_record": 16 << 20,      # larger inbox records are refused (flipped to !)
        "settled": "keep",           # keep | archive | delete an inbox file once all settled
        "settled_after": 60.0,       # seconds a settled inbox file stays unchanged before that
        "credit": 1000,              # unsettled records an outbox file holds at most
        "error_width": 64,           # bytes reserved for the worker in each outbox \error=
        "rotate_size": 64 << 20,     # an outbox file this large rotates once all settled
        "retain": 10,                # rotated outbox files kept (older ones are deleted)
        "match_window": 100_000,     # records remembered per file to match a replaced file
        "user": "",                  # with a users file: the user its files act as
    },                               # ("": the [anonymous] one)
    "admin": {
        "listen": ["tcp:15680:interface=127.0.0.1"],  # HTTP: JSON API, /metrics, dashboard
        "sample_interval": 1.0,      # seconds between counter samples (rates)
        "latency_sample_every": 256, # deliveries per connection per timed one (power of 2)
        "token": "",                 # set: the API needs `Authorization: Bearer TOKEN`
        "session_lifetime": 28800.0, # seconds a dashboard login lasts (docs/admin.md)
        "login_failures": 5,         # failed logins per peer within login_window, then
        "login_window": 300.0,       # 429 until the window has passed
    },
    "security": {                    # docs/security.md
        "users": "",                 # the users file (TOML); "": no users, no checks
        "max_connections": 0,        # per user, unless its entry says (0: no limit)
        "max_message_size": 0,       # bytes of one message a user may publish (0: any)
        "max_consumers": 0,          # consumers one connection of a user may hold
        "max_unacked": 0,            # unsettled deliveries one connection may hold
        "allow_remote_anonymous": False,  # without users: serve peers beyond loopback too
    },
    "log": {
        "format": "text",            # text | json (one JSON object per line)
        "warn_burst": 10,            # warnings logged per connection per warn_interval; the
        "warn_interval": 60.0,       # rest are counted and the count logged (docs/limits.md)
        "door_warn_burst": 100,      # lines about clients per door per warn_interval, all of
    },                               #   its connections together
    "durability": {                  # durable queues: TextQueue journals (docs/guide.md)
        "queues": [],                # fnmatch patterns on core queue names
        "mailboxes": [],             # fnmatch patterns on mailbox names
        "fsync": "always",           # always | interval | never
        "fsync_interval": 200,       # ms between fsyncs under "interval"
        "segment_size": 64 << 20,    # bytes; a segment rolls past this
        "compact_live": 0.25,        # compact an old segment once its live records take
                                     # at most this share of a segment's size
        "archive_retention": 604800.0,  # seconds archived segments are kept (0: removed)
        "max_deliveries": 0,         # dead-letter after this many deliveries (0: never)
        "dead_letter_suffix": ".dlq",  # a dead letter of queue Q goes to Q + this
    },
}


class ConfigError(ValueError):
    pass


def size_limit(value):
    """A byte limit as the core takes it: an int, or "max" (the original Malamute's
    spelling of unlimited) as None; a list of [pattern, limit] rules keeps its order."""
    if isinstance(value, (list, tuple)):
        return [(str(pattern), size_limit(limit)) for pattern, limit in value]
    return None if value in ("max", None) else int(value)


MOVED = {"malamute.mailbox_size_limit": "broker.mailbox_size_limit",       # limits belong to
         "malamute.service_queue_size_limit": "broker.queue_size_limit"}  # the object now
# Tables whose keys are the user's (names), checked as one value by their rule.
OPEN_TABLES = {"textqueue.outbox", "mqks.listen_users", "malamute.curve"}


def merge(base, extra, path=""):
    """Deep-merge `extra` into a copy of `base`, refusing keys the defaults do not know."""
    result = copy.deepcopy(base)
    for key, value in extra.items():
        if f"{path}{key}" in MOVED:
            raise ConfigError(f"configuration key {path}{key} = {show(value)}: now "
                              f"{MOVED[path + key]} (docs/delivery.md)")
        if f"{path}{key}" in OPEN_TABLES:
            both = isinstance(value, dict) and isinstance(result.get(key), dict)
            result[key] = {**result[key], **value} if both else value
            continue
        if key not in result:
            raise ConfigError(unknown(result, path, key, value))
        if isinstance(result[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"configuration key {path}{key} = {show(value)}: "
                                  "must be a table")
            result[key] = merge(result[key], value, f"{path}{key}.")
        else:
            result[key] = value
    return result


def unknown(known, path, key, value):
    """One line for a key (or a whole section) the defaults do not have: the name and
    value as given, and the nearest known name."""
    names = [name for name in known if isinstance(known[name], dict) == isinstance(value, dict)]
    guess = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if isinstance(value, dict):
        hint = f"did you mean [{path}{guess[0]}]?" if guess else \
            "sections: " + ", ".join(f"[{path}{n}]" for n in names)
        return f"unknown configuration section [{path}{key}]: {hint}"
    hint = f"did you mean {path}{guess[0]}?" if guess else \
        "every key is in docs/configuration.md"
    return f"unknown configuration key {path}{key} = {show(value)}: {hint}"


def load(path=None, overrides=None):
    """Defaults, then the TOML file, then `overrides`; validated (ConfigError)."""
    config = copy.deepcopy(DEFAULTS)
    if path:
        with open(path, "rb") as f:
            try:
                config = merge(config, tomllib.load(f))
            except (tomllib.TOMLDecodeError, ConfigError) as exc:
                raise ConfigError(f"{path}: {exc}") from None
    if overrides:
        config = merge(config, overrides)
    validate(config)
    return config


def parse_setting(assignment):
    """`section.key=value` (the --set flag) as an overrides dict; the value is read as
    TOML (`10`, `1.5`, `true`, `["tcp:1"]`, `"text"`), else taken as a plain string."""
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set wants section.key=value, got {assignment!r}")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    try:
        if isinstance(lookup(DEFAULTS, key), str) and not isinstance(value, str):
            value = text                 # a string key keeps `--twino-token 123` as text
    except (KeyError, TypeError):
        pass                             # unknown keys are refused when merged
    result = node = {}
    *sections, last = key.split(".")
    for section in sections:
        node = node.setdefault(section, {})
    node[last] = value
    return result


def deep_update(base, extra):
    """Merge nested override dicts (several --set flags for one section)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_update(base[key], value)
        else:
            base[key] = value
    return base


# -- validation ---------------------------------------------------------------------------
# One checker per key: value -> None when fine, else what it must be. Checkers are made by
# the small functions below, so a rule reads as a declaration.

def number(low=None, high=None, *, above=None):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            return "must be a number"
        if above is not None and not value > above:
            return f"must be greater than {above}"
        if low is not None and value < low or high is not None and value > high:
            return f"must be between {low} and {high}"
        return None
    return check


def integer(low=None, high=None):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if low is not None and value < low or high is not None and value > high:
            return f"must be between {low} and {high}" if high is not None \
                else f"must be at least {low}"
        return None
    return check


def power_of_two(low, high):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if not low <= value <= high or value & (value - 1):
            return f"must be a power of two between {low} and {high}"
        return None
    return check


def boolean(value):
    return None if isinstance(value, bool) else "must be true or false"


def string(*choices, nonempty=False):
    def check(value):
        if not isinstance(value, str):
            return "must be a string"
        if choices and value not in choices:
            return "must be one of " + ", ".join(repr(c) for c in choices)
        if nonempty and not value:
            return "must not be empty"
        return None
    return check


def byte_limit(value):
    """Sizes: a byte count, or "max" (the original Malamute's spelling of unlimited)."""
    if value == "max":
        return None
    return integer(0)(value) and 'must be a byte count or "max"'


def size_limits(value):
    """A byte limit for every object of a kind, or [[pattern, limit], ...] rules by name."""
    if isinstance(value, list):
        if any(not isinstance(rule, list) or len(rule) != 2 or not isinstance(rule[0], str)
               or byte_limit(rule[1]) for rule in value):
            return 'must be a byte count, "max", or a list of [pattern, bytes or "max"] pairs'
        return None
    return byte_limit(value) and 'must be a byte count, "max", or a list of [pattern, bytes]'


def overflow_policies(value):
    """One overflow policy (core.limits) for every queue, or [[pattern, policy], ...]."""
    if isinstance(value, list):
        for rule in value:
            if not isinstance(rule, list) or len(rule) != 2 or not isinstance(rule[0], str):
                return "must be a policy or a list of [pattern, policy] pairs"
            if overflow_error(rule[1]):
                return overflow_error(rule[1])
        return None
    return overflow_error(value)


def memory_watermark(value):
    """A fraction of the machine's memory (0 < x <= 1), bytes (at least 1 MiB), or "max"."""
    if value == "max" or (type(value) is float and 0 < value <= 1):
        return None
    if type(value) is int and 1 << 20 <= value <= 1 << 50:
        return None
    return 'must be a fraction of the machine\'s memory (0 < x <= 1.0), bytes, or "max"'


def endpoints(parse):
    """A list of endpoint strings, each accepted by `parse` (raises ValueError)."""
    def check(value):
        if not isinstance(value, list) or not all(isinstance(e, str) and e for e in value):
            return "must be a list of endpoint strings"
        for endpoint in value:
            try:
                parse(endpoint)
            except Exception as exc:          # the parsers raise ValueError, KeyError...
                return f"{endpoint!r} is not a valid endpoint ({exc})"
        return None
    return check


def twisted_endpoint(description):
    """Build (not bind) the endpoint, as twistd will: unknown types, bad arguments and
    missing certificate files fail here; TCP ports must fit in 16 bits."""
    from twisted.internet.endpoints import serverFromString

    from mqksbridge.bridge.listeners import PORT_KINDS
    serverFromString(None, description)
    kind, _, rest = description.partition(":")
    if kind.strip().lower() in PORT_KINDS:
        first = rest.split(":", 1)[0]
        port = first.partition("=")[2] if first.startswith("port=") else first
        if not port.isdigit() or int(port) > 65535:
            raise ValueError(f"port {port!r} out of range")


def zmq_endpoint(description):
    from mqksbridge.bridge import malamute
    twisted_endpoint(malamute.to_twisted(description))


def listen_users(value):
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in value.items()):
        return "must be a table of endpoint = user name"
    return None


def curve_keys(value):
    """[malamute.curve]: endpoint = server key file, each file read and checked now."""
    from mqksbridge.bridge import malamute
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in value.items()):
        return "must be a table of endpoint = CURVE secret key file"
    for path in value.values():
        try:
            malamute.load_curve_key(path)
        except malamute.CurveKeyError as exc:
            return str(exc)
    return None


def gc_threshold(value):
    if value == []:
        return None
    if (not isinstance(value, list) or not 1 <= len(value) <= 3
            or any(integer(0)(v) for v in value)):
        return "must be [] or a list of one to three integers >= 0"
    return None


def patterns(value):
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        return "must be a list of non-empty pattern strings"
    return None


def producer_ack(value):
    if not isinstance(value, list) or any(
            not isinstance(rule, list) or len(rule) != 2 or not isinstance(rule[0], str)
            or rule[1] not in POLICIES for rule in value):
        return "must be a list of [pattern, policy] pairs, policy one of " + ", ".join(POLICIES)
    return None


def directories(value):
    if not isinstance(value, list) or not all(isinstance(d, str) and d for d in value):
        return "must be a list of directory names"
    return None


def outbox_files(value):
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in value.items()):
        return "must be a table of queue name = file name"
    if len(set(value.values())) != len(value):
        return "must name a different file for each queue"
    return None


POLICIES = ("received", "saved", "sent", "relay")
SECONDS = number(above=0, high=86400.0)
BYTES = integer(1, 1 << 40)

RULES = {
    "data_dir": string(nonempty=True),
    "broker.sweep_interval": number(0.001, 3600.0),
    "broker.gc_threshold": gc_threshold,
    "broker.gc_young_interval": number(0.0, 3600.0),
    "broker.flow_limit": integer(0, 1 << 31),
    "broker.flow_max_hold": SECONDS,
    "broker.shutdown_timeout": number(0.1, 3600.0),
    "broker.queue_size_limit": size_limits,
    "broker.mailbox_size_limit": size_limits,
    "broker.queue_length_limit": size_limits,
    "broker.queue_overflow": overflow_policies,
    "broker.memory_watermark": memory_watermark,
    "broker.memory_check_interval": number(0.01, 60.0),
    "broker.queue_memory_window": byte_limit,
    "broker.queue_memory_window_messages": integer(1, 1 << 31),
    "broker.queue_memory_total": byte_limit,
    "mqks.listen": endpoints(twisted_endpoint),
    "mqks.stream": string(nonempty=True),
    "mqks.max_line": integer(64, 1 << 30),
    "mqks.high_water": BYTES,
    "mqks.max_event": integer(1, 1 << 20),
    "mqks.listen_users": listen_users,
    "mqks.auth": endpoints(twisted_endpoint),
    "mqks.max_connections": integer(0, 1 << 24),
    "mqks.handshake_timeout": SECONDS,
    "malamute.listen": endpoints(zmq_endpoint),
    "malamute.mechanism": string("null", "plain"),
    "malamute.timeout": SECONDS,
    "malamute.check_interval": number(0.001, 3600.0),
    "malamute.mailbox_size_warn": byte_limit,
    "malamute.high_water": integer(1, 1 << 31),
    "malamute.max_message_size": integer(1024, 1 << 40),
    "malamute.max_frames": integer(2, 1 << 20),
    "malamute.credit": boolean,
    "malamute.max_subscriptions": integer(1, 1 << 20),
    "malamute.max_pattern": integer(1, 255),
    "malamute.max_subject": integer(255, 1 << 20),
    "malamute.max_connections": integer(0, 1 << 24),
    "malamute.handshake_timeout": SECONDS,
    "malamute.curve": curve_keys,
    "twino.listen": endpoints(twisted_endpoint),
    "twino.node": string(nonempty=True),
    "twino.max_frame_size": integer(64, 1 << 40),
    "twino.high_water": BYTES,
    "twino.ping_interval": SECONDS,
    "twino.ping_timeout": SECONDS,
    "twino.handshake_timeout": SECONDS,
    "twino.max_hello": integer(256, 1 << 24),
    "twino.max_connections": integer(0, 1 << 24),
    "twino.check_interval": number(0.001, 3600.0),
    "twino.token": string(),
    "twino.allow_admin": boolean,
    "twino.auto_create_channels": boolean,
    "twino.auto_create_queues": boolean,
    "twino.producer_ack": producer_ack,
    "twino.producer_ack_default": string(*POLICIES),
    "textqueue.inbox": directories,
    "textqueue.outbox_dirs": directories,
    "textqueue.outbox": outbox_files,
    "textqueue.watch": string("auto", "inotify", "poll"),
    "textqueue.poll_interval": number(0.01, 60.0),
    "textqueue.grace": number(0.0, 3600.0),
    "textqueue.auto_create": boolean,
    "textqueue.max_record": integer(64, 1 << 30),
    "textqueue.settled": string("keep", "archive", "delete"),
    "textqueue.settled_after": number(0.0, 86400.0 * 365),
    "textqueue.credit": integer(1, 1 << 20),
    "textqueue.error_width": integer(8, 4096),
    "textqueue.rotate_size": integer(4096, 1 << 40),
    "textqueue.retain": integer(0, 1 << 20),
    "textqueue.match_window": integer(0, 1 << 24),
    "textqueue.user": string(),
    "admin.listen": endpoints(twisted_endpoint),
    "admin.sample_interval": number(0.05, 3600.0),
    "admin.latency_sample_every": power_of_two(1, 1 << 20),
    "admin.token": string(),
    "admin.session_lifetime": number(1.0, 86400.0 * 366),
    "admin.login_failures": integer(1, 1 << 20),
    "admin.login_window": number(1.0, 86400.0),
    "security.users": string(),
    "security.max_connections": integer(0, 1 << 31),
    "security.max_message_size": integer(0, 1 << 40),
    "security.max_consumers": integer(0, 1 << 31),
    "security.max_unacked": integer(0, 1 << 31),
    "security.allow_remote_anonymous": boolean,
    "log.format": string("text", "json"),
    "log.warn_burst": integer(1, 1 << 20),
    "log.warn_interval": SECONDS,
    "log.door_warn_burst": integer(1, 1 << 20),
    "durability.queues": patterns,
    "durability.mailboxes": patterns,
    "durability.fsync": string("always", "interval", "never"),
    "durability.fsync_interval": integer(1, 3_600_000),
    "durability.segment_size": integer(1024, 1 << 40),
    "durability.compact_live": number(0.0, 1.0),
    "durability.archive_retention": number(0.0, 10 * 365 * 86400.0),
    "durability.max_deliveries": integer(0, 999),
    "durability.dead_letter_suffix": string(nonempty=True),
}


def keys(tree=DEFAULTS, prefix=""):
    """Every dotted key of a configuration tree, tables walked into."""
    for key, value in tree.items():
        if isinstance(value, dict) and prefix + key not in OPEN_TABLES:
            yield from keys(value, f"{prefix}{key}.")
        else:
            yield prefix + key


def lookup(config, dotted):
    for part in dotted.split("."):
        config = config[part]
    return config


def validate(config):
    """Check every key against RULES; the first bad one raises ConfigError naming the
    key and the value."""
    for key in keys():
        value = lookup(config, key)
        problem = RULES[key](value)
        if problem:
            raise ConfigError(f"configuration key {key} = {show(value)}: {problem}")
    for endpoint in config["mqks"]["listen_users"]:
        if endpoint not in config["mqks"]["listen"]:
            raise ConfigError(f"configuration key mqks.listen_users: {show(endpoint)} is not "
                              "one of mqks.listen")
    for endpoint in config["malamute"]["curve"]:
        if endpoint not in config["malamute"]["listen"]:
            raise ConfigError(f"configuration key malamute.curve: {show(endpoint)} is not "
                              "one of malamute.listen")
    for endpoint in config["mqks"]["auth"]:
        if endpoint not in config["mqks"]["listen"]:
            raise ConfigError(f"configuration key mqks.auth: {show(endpoint)} is not one of "
                              "mqks.listen")
    if config["mqks"]["auth"] and not config["security"]["users"]:
        raise ConfigError("configuration key mqks.auth: logins are checked against users: "
                          "set security.users")
    if config["malamute"]["mechanism"] == "plain" and not config["security"]["users"]:
        raise ConfigError("configuration key malamute.mechanism = \"plain\": PLAIN logins "
                          "are checked against users: set security.users")
    if config["security"]["users"] and config["twino"]["token"]:
        raise ConfigError("configuration keys twino.token and security.users: with a users "
                          "file, Twino clients log in as users (Client-Token USER:PASSWORD); "
                          "leave twino.token empty")


def show(value):
    """A value as it is written in TOML, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)     # a valid TOML basic string
    return repr(value)


def dump(config):
    """The configuration as TOML (what --check-config prints; loadable with --config)."""
    def value(v):
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):          # an open table, inline: { "key" = value, ... }
            return "{" + ", ".join(f"{show(k)} = {value(x)}" for k, x in v.items()) + "}"
        return show(v)
    top = [f"{k} = {value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    lines = top + [""] if top else []
    for section, table in config.items():
        if isinstance(table, dict):
            lines.append(f"[{section}]")
            lines += [f"{k} = {value(v)}" for k, v in table.items()]
            lines.append("")
    return "\n".join(lines)
