"""Every configuration key in one table: its dotted name, default, check and reference text.

The loader (bridge.config: defaults, merge, validation, "did you mean"), `--check-config`
and the "File keys" reference in docs/configuration.md are all made from TABLE, so a key
is added, changed or documented in one place. A check is the key's type and range:
value -> None when fine, else what the value must be (the end of the error line). Checks
are made by the small functions below, so a row reads as a declaration.

A `Setting` is an attrs class: attrs ships with Twisted already, and its validators refuse
a malformed row when this module is imported (a check that is not callable, an empty doc).
"""
import math
from typing import Any, Callable

import attrs

from mqksbridge.core.limits import overflow_error


# -- checks -------------------------------------------------------------------------------

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


def _names_to_names(value):
    """A table whose keys and values are all non-empty strings."""
    return isinstance(value, dict) and all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in value.items())


def listen_users(value):
    if not _names_to_names(value):
        return "must be a table of endpoint = user name"
    return None


def curve_keys(value):
    """[malamute.curve]: endpoint = server key file, each file read and checked now."""
    from mqksbridge.bridge import malamute
    if not _names_to_names(value):
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
    if not _names_to_names(value):
        return "must be a table of queue name = file name"
    if len(set(value.values())) != len(value):
        return "must name a different file for each queue"
    return None


AMQP_SCHEMES = {"amqp": 5672, "amqps": 5671}


def amqp_url(url):
    """(scheme, host, port, vhost or None) of an amqp:// or amqps:// URL (ValueError)."""
    from urllib.parse import unquote, urlsplit
    parts = urlsplit(url)
    if parts.scheme not in AMQP_SCHEMES:
        raise ValueError("the scheme must be amqp:// or amqps://")
    if not parts.hostname:
        raise ValueError("no host")
    port = parts.port or AMQP_SCHEMES[parts.scheme]     # .port raises on a bad number
    if parts.fragment or "/" in parts.path[1:]:
        raise ValueError("only user:password@host:port/vhost?options")
    return parts.scheme, parts.hostname, port, unquote(parts.path[1:]) if parts.path else None


def amqp_urls(value):
    """The cluster's nodes: a list of amqp(s)://user:password@host:port/vhost URLs."""
    if not isinstance(value, list) or not all(isinstance(u, str) and u for u in value):
        return "must be a list of amqp:// or amqps:// URLs"
    for url in value:
        try:
            amqp_url(url)
        except ValueError as exc:
            return f"{without_password(url)!r} is not an AMQP URL ({exc})"
    return None


def passwords_hidden(value):
    """A list of URLs as an error message shows it."""
    return [without_password(u) if isinstance(u, str) else u for u in value] \
        if isinstance(value, list) else value


def without_password(url):
    """A URL as a message may show it: the password replaced by ***."""
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def amqp_name(pattern, what):
    """A name RabbitMQ and the fleet both read: ASCII letters, digits and `pattern`'s
    punctuation, 1 to 64 characters (AMQP names may be 255 bytes; the gateway adds its own
    suffixes to these)."""
    import re
    shape = re.compile(pattern)

    def check(value):
        if not isinstance(value, str) or not shape.fullmatch(value):
            return f"must be {what}"
        return None
    return check


def http_urls(value):
    if not isinstance(value, list) or not all(
            isinstance(u, str) and u.startswith(("http://", "https://")) for u in value):
        return "must be a list of http:// or https:// URLs"
    return None


# -- the table ----------------------------------------------------------------------------

def _dotted(instance, attribute, value):
    """A key is NAME (top level) or SECTION.NAME, as the TOML file spells it."""
    if not value or any(not part.isidentifier() for part in value.split(".")) \
            or value.count(".") > 1:
        raise ValueError(f"a setting's key is NAME or SECTION.NAME, not {value!r}")


@attrs.frozen
class Setting:
    """One key. `doc` is its comment in the reference, lines split at "\\n"; a default
    that is a table (a dict) is an open table: its keys are the user's (names), checked as
    one value."""
    key: str = attrs.field(validator=_dotted)
    default: Any
    check: Callable[[Any], "str | None"] = attrs.field(validator=attrs.validators.is_callable())
    doc: str = attrs.field(validator=attrs.validators.min_len(1))
    shown: Callable[[Any], Any] = lambda value: value      # what a message may print of it

    @property
    def section(self):
        return self.key.rpartition(".")[0]

    @property
    def name(self):
        return self.key.rpartition(".")[2]

    @property
    def open_table(self):
        return isinstance(self.default, dict)


# Producer-ack policies (twino.producer_ack; a Twino queue's delivery handler names them too).
POLICIES = ("received", "saved", "sent", "relay")
SECONDS = number(above=0, high=86400.0)
BYTES = integer(1, 1 << 40)

# Each section's comment in the reference ("": none); TABLE gives their order.
SECTIONS = {
    "broker": "",
    "mqks": "",
    "malamute": "",
    "twino": "",
    "textqueue": "the TextQueue door (docs/guide.md, specs/textqueue.md section 7)",
    "admin": "",
    "security": "docs/security.md",
    "log": "",
    "durability": "durable queues: TextQueue journals under data_dir (guide.md)",
    "cluster": "gateways over a RabbitMQ cluster (docs/cluster.md)",
}

TABLE = (
    Setting("data_dir", "./var", string(nonempty=True), "where durable state lives"),
    # [broker]
    Setting("broker.sweep_interval", 1.0, number(0.001, 3600.0),
            "seconds between sweeps for ack timeouts and expiry"),
    Setting("broker.gc_threshold", [50_000, 20, 100], gc_threshold,
            "Python's gc.set_threshold at start-up; [] keeps the default"),
    Setting("broker.gc_young_interval", 1.0, number(0.0, 3600.0),
            "seconds between young collections (docs/limits.md); 0: only Python's"),
    Setting("broker.flow_limit", 10_000, integer(0, 1 << 31),
            "messages a queue with consumers holds before the client filling\n"
            "it stops being read until it is back to half (0: never)"),
    Setting("broker.flow_max_hold", 1.0, SECONDS,
            "longest hold; a queue that delivered nothing meanwhile stops holding"),
    Setting("broker.shutdown_timeout", 10.0, number(0.1, 3600.0),
            "SIGTERM: seconds for the ordered shutdown (see below) at most"),
    Setting("broker.queue_size_limit", "max", size_limits,
            "content bytes a queue keeps, whichever door creates it; or\n"
            '[["pattern", bytes or "max"], ...] by queue name, first match wins'),
    Setting("broker.mailbox_size_limit", "max", size_limits,
            "the same for mailboxes (Malamute addresses, Twino client ids)"),
    Setting("broker.queue_length_limit", "max", size_limits,
            "messages a queue keeps, whichever door creates it; or\n"
            '[["pattern", count or "max"], ...] by queue name, first match wins'),
    Setting("broker.queue_overflow", "reject", overflow_policies,
            'a put into a full queue: "reject", "drop-oldest" (stored messages,\n'
            'oldest first, until it fits) or "dead-letter:QUEUE" (moved there);\n'
            'or [["pattern", policy], ...] by name (docs/delivery.md, "Limits")'),
    Setting("broker.memory_watermark", 0.4, memory_watermark,
            "resident memory past which no publisher is read on any door\n"
            "until it is back under 90% of it: a fraction of the machine's\n"
            'memory, bytes, or "max" (off); docs/limits.md'),
    Setting("broker.memory_check_interval", 0.5, number(0.01, 60.0),
            "seconds between checks of the watermark"),
    Setting("broker.queue_memory_window", 16 << 20, byte_limit,
            "content bytes of each queue's backlog kept in memory; the rest\n"
            "is paged out to disk (its journal, or <data_dir>/spill/) and read\n"
            'back in order; "max": every backlog in memory (docs/limits.md)'),
    Setting("broker.queue_memory_window_messages", 50_000, integer(1, 1 << 31),
            "and messages, whichever bound comes first"),
    Setting("broker.queue_memory_total", 256 << 20, byte_limit,
            "every queue's resident backlog together: past it each queue\n"
            "keeps 16 messages resident; pages waiting for the disk past it\n"
            'hold publishers; "max": no cap'),
    # [mqks]
    Setting("mqks.listen", ["tcp:25000"], endpoints(twisted_endpoint),
            "Twisted endpoint strings (TLS: ssl:/mtls:, docs/security.md)"),
    Setting("mqks.stream", "mqks", string(nonempty=True), "core stream carrying MQKS events"),
    Setting("mqks.max_line", 1 << 20, integer(64, 1 << 30),
            "longest request line; longer: error reply + close"),
    Setting("mqks.high_water", 1024 * 1024, BYTES,
            "pending output bytes before a consumer is paused"),
    Setting("mqks.max_event", 1024, integer(1, 1 << 20),
            "longer events: the publish gets an error reply (docs/limits.md)"),
    Setting("mqks.listen_users", {}, listen_users,
            'with users: { "ENDPOINT" = "USER" }, whom a listener\'s clients act as'),
    Setting("mqks.auth", [], endpoints(twisted_endpoint),
            "with users: endpoints whose clients log in with a first `auth` line"),
    Setting("mqks.max_connections", 10_000, integer(0, 1 << 24),
            "more at once: `None error <eid>` and the close (0: no limit)"),
    Setting("mqks.tcp_nodelay", True, boolean,
            "TCP_NODELAY on every connection: true (the default) for low\n"
            "  latency, each write a packet; false: Nagle on, fewer packets for\n  floods of small messages (docs/limits.md, \"TCP_NODELAY\")"),
    Setting("mqks.handshake_timeout", 10.0, SECONDS,
            "seconds a client has to finish TLS (ssl:/mtls:) and its `auth`\n"
            "  login; then the close (docs/security.md)"),
    # [malamute]
    Setting("malamute.listen", ["tcp://*:9999"], endpoints(zmq_endpoint),
            "ZeroMQ endpoints (tcp://, ipc://, ipc://@abstract), one ROUTER"),
    Setting("malamute.mechanism", "null", string("null", "plain"),
            "null | plain: ZMTP PLAIN logins (needs security.users; docs/security.md)"),
    Setting("malamute.timeout", 60.0, SECONDS,
            "seconds without any frame before a session expires (and its connection closes)"),
    Setting("malamute.check_interval", 1.0, number(0.001, 3600.0),
            "one expiry sweep over all sessions this often"),
    Setting("malamute.mailbox_size_warn", "max", byte_limit,
            "log once when a mailbox holds more; re-armed below half of it"),
    Setting("malamute.high_water", 10000, integer(1, 1 << 31),
            "stream messages held for a peer whose socket is full; more are dropped"),
    Setting("malamute.max_message_size", 64 << 20, integer(1024, 1 << 40),
            "a larger ZeroMQ message closes that connection before buffering\n"
            "(each frame counts its body plus 64 bytes, specs/zmtp.md)"),
    Setting("malamute.max_frames", 1024, integer(2, 1 << 20),
            "a ZeroMQ message with more frames closes that connection"),
    Setting("malamute.credit", True, boolean,
            "a client that sends CREDIT gets credit-limited service deliveries"),
    Setting("malamute.max_subscriptions", 1000, integer(1, 1 << 20),
            "stream reads + service offers per session; more: ERROR 300, session ends"),
    Setting("malamute.max_pattern", 255, integer(1, 255),
            "bytes of a STREAM-READ/SERVICE-OFFER pattern; more: ERROR 300"),
    Setting("malamute.max_subject", 1024, integer(255, 1 << 20),
            "subject bytes a pattern other than plain text is tried on (docs/limits.md)"),
    Setting("malamute.max_connections", 10_000, integer(0, 1 << 24),
            "more at once: ZMTP greeting + ERROR, then the close (0: no limit)"),
    Setting("malamute.tcp_nodelay", True, boolean,
            "TCP_NODELAY on every connection, as libzmq sets it: true for low\n"
            "  latency, each write a packet; false: Nagle on, fewer packets for\n  floods of small messages (docs/limits.md, \"TCP_NODELAY\")"),
    Setting("malamute.handshake_timeout", 10.0, SECONDS,
            "seconds a connection has for the ZMTP greeting and a first command"),
    Setting("malamute.curve", {}, curve_keys,
            'CURVE endpoints: { "ENDPOINT" = "server.key_secret" } (docs/security.md)'),
    # [twino]
    Setting("twino.listen", ["tcp:22200"], endpoints(twisted_endpoint),
            "Twisted endpoint strings"),
    Setting("twino.node", "mqksbridge", string(nonempty=True),
            "node name in events and the instance list (621)"),
    Setting("twino.max_frame_size", 64 << 20, integer(64, 1 << 40),
            "larger declared frames close that connection before buffering"),
    Setting("twino.high_water", 1024 * 1024, BYTES,
            "pending output bytes before a consumer is paused; 8 x this unread\n"
            "(push-all copies to a consumer that never reads) aborts it"),
    Setting("twino.ping_interval", 120.0, SECONDS,
            "idle seconds before the broker PINGs a client"),
    Setting("twino.ping_timeout", 10.0, SECONDS,
            "a PINGed client that sends nothing for this long is closed"),
    Setting("twino.tcp_nodelay", True, boolean,
            "TCP_NODELAY on every connection: true (the default) for low\n"
            "  latency, each write a packet; false: Nagle on, fewer packets for\n  floods of small messages (docs/limits.md, \"TCP_NODELAY\")"),
    Setting("twino.handshake_timeout", 10.0, SECONDS,
            "seconds to send the protocol bytes and the hello"),
    Setting("twino.max_hello", 64 * 1024, integer(256, 1 << 24),
            "bytes held for a client before its hello is in; more: closed"),
    Setting("twino.max_connections", 10_000, integer(0, 1 << 24),
            "more at once: the hello answer 503, then the close (0: no limit)"),
    Setting("twino.check_interval", 1.0, number(0.001, 3600.0),
            "one sweep over all connections for the three timers above"),
    Setting("twino.token", "", string(),
            "when set, a hello must carry this Client-Token (else 401)"),
    Setting("twino.allow_admin", True, boolean,
            "false: admin operations (604-607, 611-631, 651-663) answer 401"),
    Setting("twino.auto_create_channels", True, boolean,
            "join/push/pull on an unknown channel creates it"),
    Setting("twino.auto_create_queues", True, boolean,
            "push/pull on an unknown queue id creates it (Push, acks on)"),
    Setting("twino.producer_ack", [], producer_ack,
            '[["pattern", "policy"], ...] matched on "channel/queue-id"'),
    Setting("twino.producer_ack_default", "relay", string(*POLICIES),
            "received | sent | relay: when a producer's ack is sent"),
    # [textqueue]
    Setting("textqueue.inbox", [], directories,
            'directories whose *.tq files are publishes, e.g. ["./var/inbox"]'),
    Setting("textqueue.outbox_dirs", [], directories,
            "directories where a worker's file NAME.tq consumes queue NAME"),
    Setting("textqueue.outbox", {}, outbox_files,
            "queue name = the file the broker fills with that queue's messages:\n"
            '{ jobs = "./var/outbox/jobs.tq" }, or a [textqueue.outbox] table'),
    Setting("textqueue.watch", "auto", string("auto", "inotify", "poll"),
            "auto (inotify where the platform has it) | inotify | poll"),
    Setting("textqueue.poll_interval", 0.5, number(0.01, 60.0),
            "seconds between looks at every file (with inotify too: a safety net)"),
    Setting("textqueue.grace", 2.0, number(0.0, 3600.0),
            "seconds a file's last record must stay unchanged before it is taken\n"
            "(unless a later record, a blank line or the writer closing it ends it)"),
    Setting("textqueue.auto_create", True, boolean,
            "an inbox record to a queue nobody made creates it (false: refused)"),
    Setting("textqueue.max_record", 16 << 20, integer(64, 1 << 30),
            "larger inbox records are refused (flipped to !)"),
    Setting("textqueue.settled", "keep", string("keep", "archive", "delete"),
            "keep | archive (to DIR/archive/) | delete an inbox file all settled"),
    Setting("textqueue.settled_after", 60.0, number(0.0, 86400.0 * 365),
            "... once it stayed unchanged this many seconds"),
    Setting("textqueue.credit", 1000, integer(1, 1 << 20),
            "unsettled records an outbox file holds at most (the consumer's credit)"),
    Setting("textqueue.error_width", 64, integer(8, 4096),
            "bytes reserved in each outbox record's \\error= for the worker's reason"),
    Setting("textqueue.rotate_size", 64 << 20, integer(4096, 1 << 40),
            "an outbox file this large is renamed FILE.000001 (next number) once\n"
            "every record in it is settled, and a new one begins"),
    Setting("textqueue.retain", 10, integer(0, 1 << 20),
            "renamed outbox files kept (older ones are deleted; 0: none kept)"),
    Setting("textqueue.match_window", 100_000, integer(0, 1 << 24),
            "records remembered per file to match a file an editor replaced"),
    Setting("textqueue.user", "", string(),
            'with users: the user the files act as ("": trusted, unchecked)'),
    # [admin]
    Setting("admin.listen", ["tcp:15680:interface=127.0.0.1"], endpoints(twisted_endpoint),
            "HTTP: JSON API, /metrics, dashboard (docs/admin.md)"),
    Setting("admin.sample_interval", 1.0, number(0.05, 3600.0),
            "seconds between counter samples: the rates are per-second deltas,\n"
            "  and door counters in the overview and /metrics are as of the last"),
    Setting("admin.latency_sample_every", 256, power_of_two(1, 1 << 20),
            "one delivery in this many (per connection and origin door) is timed\n"
            "for mqksbridge_publish_to_deliver_seconds; a power of two (1: all)"),
    Setting("admin.token", "", string(),
            "set: every request but the dashboard's files needs it (docs/security.md)"),
    Setting("admin.session_lifetime", 28800.0, number(1.0, 86400.0 * 366),
            "seconds a dashboard login (session cookie) lasts (docs/admin.md)"),
    Setting("admin.login_failures", 5, integer(1, 1 << 20),
            "failed admin logins per peer within login_window, then 429"),
    Setting("admin.login_window", 300.0, number(1.0, 86400.0),
            "... until the window has passed"),
    # [security]
    Setting("security.users", "", string(),
            'the users file (TOML); "": no users, no checks (trusted network only)'),
    Setting("security.max_connections", 0, integer(0, 1 << 31),
            "per user (MQKS connections), unless its entry says (0: no limit)"),
    Setting("security.max_message_size", 0, integer(0, 1 << 40),
            "bytes of one message a user may publish (0: any)"),
    Setting("security.max_consumers", 0, integer(0, 1 << 31),
            "consumers one connection of a user may hold (0: any)"),
    Setting("security.max_unacked", 0, integer(0, 1 << 31),
            "unsettled deliveries one connection of a user may hold (0: any)"),
    Setting("security.allow_remote_anonymous", False, boolean,
            "without users: true serves peers beyond loopback too (every\n"
            "  door refuses them otherwise, and logs this key; docs/security.md)"),
    # [log]
    Setting("log.format", "text", string("text", "json"),
            "text (Twisted's lines) | json (one JSON object per line)"),
    Setting("log.warn_burst", 10, integer(1, 1 << 20),
            "warnings logged per connection per warn_interval; the rest"),
    Setting("log.warn_interval", 60.0, SECONDS,
            "  are counted, and the count logged (docs/limits.md)"),
    Setting("log.door_warn_burst", 100, integer(1, 1 << 20),
            "lines about clients per door per warn_interval, all its\n"
            "  connections together (reconnecting gets no fresh budget)"),
    # [durability]
    Setting("durability.queues", [], patterns,
            "shell-style patterns on core queue names: MQKS queues,\n"
            'Malamute services, Twino "C/N" and "C", e.g. ["jobs", "orders.*"]'),
    Setting("durability.mailboxes", [], patterns,
            "patterns on mailbox names (Malamute addresses, Twino client ids)"),
    Setting("durability.fsync", "always", string("always", "interval", "never"),
            "always | interval | never: when a write counts as stored"),
    Setting("durability.fsync_interval", 200, integer(1, 3_600_000),
            'ms between fsyncs under "interval"'),
    Setting("durability.segment_size", 64 << 20, integer(1024, 1 << 40),
            "bytes; a queue's journal rolls to a new segment past this"),
    Setting("durability.compact_live", 0.25, number(0.0, 1.0),
            "an old segment whose live records fill at most this share of\n"
            "a segment is compacted (live records copied forward)"),
    Setting("durability.archive_retention", 604800.0, number(0.0, 10 * 365 * 86400.0),
            "seconds an archived segment is kept (0: removed at once)"),
    Setting("durability.max_deliveries", 0, integer(0, 999),
            "a message handed back unsettled this many times goes to the\n"
            "dead-letter queue instead (0: never; at most 999)"),
    Setting("durability.dead_letter_suffix", ".dlq", string(nonempty=True),
            "the dead-letter queue of Q is Q + this (durable too)"),
    # [cluster]
    Setting("cluster.engine", "embedded", string("embedded", "rabbitmq"),
            'embedded: the core in this process (durability above); "rabbitmq":\n'
            "this process is a gateway, every queue lives in the cluster"),
    Setting("cluster.urls", [], amqp_urls,
            '["amqp://user:password@host:5672/vhost", ...]: the nodes, tried in\n'
            "turn; the gateway fails over to the next when one goes",
            shown=passwords_hidden),
    Setting("cluster.node", "", amqp_name(r"(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,63})?",
                                          "empty or 1 to 64 letters, digits, '_', '.' "
                                          "or '-', the first a letter or digit"),
            'this gateway\'s name, unique in the fleet ("": the host name)'),
    Setting("cluster.vhost", "", string(),
            '"": as each URL says; set: every URL must name this vhost or none'),
    Setting("cluster.prefix", "mqksbridge.", amqp_name(r"[A-Za-z0-9_.:-]{1,64}",
                                                       "1 to 64 letters, digits or _.:-"),
            "start of every exchange and queue name the fleet makes in RabbitMQ"),
    Setting("cluster.replicas", 3, integer(1, 255),
            "each quorum queue's initial group size (x-quorum-initial-group-size)"),
    Setting("cluster.prefetch", 256, integer(1, 65535),
            "deliveries in flight per consumer that sets no credit (basic.qos)"),
    Setting("cluster.management", [], http_urls,
            "RabbitMQ's HTTP API, for node status (admin /cluster, `mqksbridge\n"
            'cluster status`); []: http://HOST:15672/ of each URL\'s host'),
)

SETTINGS = {setting.key: setting for setting in TABLE}
