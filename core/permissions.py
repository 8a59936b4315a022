"""Who may do what: a principal (an authenticated user, or the anonymous one) and its
rules, checked by the core wherever a message can reach a client or leave one.

Rules follow RabbitMQ's configure/write/read model with our three verbs: `publish` (put,
send, publish: RabbitMQ's write), `consume` (read a queue, a stream or a mailbox, bind a
queue to stream subjects: its read) and `manage` (create, change, delete, list: its
configure). Each rule is a name pattern of one kind:

    queue:GLOB              queues (a Twino queue (C, N) is `C/N`, queue 0 is `C`)
    stream:GLOB             every subject of the streams GLOB matches
    stream:GLOB:SUBJECTS    only those subjects (MQKS events on stream `mqks`, ...)
    mailbox:GLOB            mailboxes (Malamute addresses, Twino client ids)
    broker                  server-wide management (lists, _eval, the admin API)
    *                       everything

GLOB is fnmatch's: `*` any run of characters (dots and slashes too), `?` one, `[...]` a
set; the whole name must match, case-sensitively. A client without a principal (no
users file) may do everything: that is the broker as it was, for trusted networks only.

Checks happen when something is set up (a consumer, a reader, a binding, a mailbox
claimed), so deliveries cost nothing; puts and publishes are checked per message only on
a guarded broker (core.guarded), with each decision remembered per principal. Rules do
not change while a broker runs (docs/security.md).
"""
import fnmatch
import re

from mqksbridge.core.cache import bounded

PUBLISH, CONSUME, MANAGE = "publish", "consume", "manage"
VERBS = (PUBLISH, CONSUME, MANAGE)
QUEUE, STREAM, MAILBOX, BROKER = "queue", "stream", "mailbox", "broker"
KINDS = (QUEUE, STREAM, MAILBOX, BROKER)
ALL = True                       # Principal.subjects: every subject of that stream
MEMO = 4096                      # decisions remembered per principal (then forgotten)


class RuleError(ValueError):
    """A rule that is not `kind:glob` (users file)."""


class Denied(Exception):
    """A principal may not do this; the door answers with its protocol's refusal."""

    def __init__(self, user, verb, kind, name, subject=None):
        what = f"{kind}:{name}" + (f":{subject}" if subject is not None else "")
        super().__init__(f"{user} may not {verb} {what}")
        self.user, self.verb, self.kind, self.name, self.subject = user, verb, kind, name, subject


class OverLimit(Denied):
    """A per-user resource limit (docs/security.md): `limit` is its name."""

    def __init__(self, user, limit, value):
        Exception.__init__(self, f"{user}: {limit} ({value}) reached")
        self.user, self.limit, self.value = user, limit, value
        self.verb = self.kind = self.name = self.subject = None


class Taken(Exception):
    """A mailbox a live client of another door (or another user) owns."""

    def __init__(self, name, owner):
        super().__init__(f"mailbox {name!r} is owned by a live {owner.door} client")
        self.name, self.owner = name, owner


def _glob(pattern):
    return fnmatch.translate(pattern)


def _combined(globs):
    """One compiled full match for several globs (None for no glob)."""
    if not globs:
        return None
    return re.compile("|".join(f"(?:{_glob(g)})" for g in globs), re.DOTALL).match


class Rules:
    """The rules of one user, compiled: per verb and kind one regular expression; streams
    keep (stream glob, subject glob) pairs, since a subject test depends on the stream."""

    def __init__(self, publish=(), consume=(), manage=()):
        self.text = {PUBLISH: list(publish), CONSUME: list(consume), MANAGE: list(manage)}
        self._names = {}             # (verb, kind) -> match function or None
        self._streams = {}           # verb -> [(stream match, subject glob or None)]
        for verb, rules in self.text.items():
            globs = {kind: [] for kind in KINDS}
            streams = []
            for rule in rules:
                kind, name, subject = parse_rule(rule)
                if kind == "*":
                    for k in (QUEUE, MAILBOX):
                        globs[k].append("*")
                    globs[BROKER].append("*")
                    streams.append((_combined(["*"]), None))
                elif kind == STREAM:
                    streams.append((_combined([name]), subject))
                elif kind == BROKER:
                    globs[BROKER].append("*")
                else:
                    globs[kind].append(name)
            for kind in (QUEUE, MAILBOX, BROKER):
                self._names[verb, kind] = _combined(globs[kind])
            self._streams[verb] = streams

    def allows(self, verb, kind, name):
        """Whether `verb` is allowed on `name` (for a stream: on some subject of it)."""
        if kind == STREAM:
            return any(match(name) for match, _ in self._streams[verb])
        match = self._names[verb, kind]
        return match is not None and match(name or "") is not None

    def subjects(self, verb, stream):
        """What subjects of `stream` the verb covers: None (none), ALL, or a match function."""
        globs = [subject for match, subject in self._streams[verb] if match(stream)]
        if not globs:
            return None
        if any(g is None or g == "*" for g in globs):
            return ALL
        return _combined(globs)


def parse_rule(rule):
    """(kind, name glob, subject glob or None) of a rule; RuleError when malformed."""
    if not isinstance(rule, str) or not rule:
        raise RuleError(f"a rule must be a non-empty string, not {rule!r}")
    if rule == "*":
        return "*", "*", None
    if rule == BROKER:
        return BROKER, "*", None
    kind, sep, rest = rule.partition(":")
    if kind not in (QUEUE, STREAM, MAILBOX) or not sep or not rest:
        raise RuleError(f"rule {rule!r} is not queue:GLOB, stream:GLOB[:SUBJECTS], "
                        "mailbox:GLOB, broker or *")
    if kind == STREAM:
        name, sep, subject = rest.partition(":")
        if not name or (sep and not subject):
            raise RuleError(f"rule {rule!r}: stream:GLOB or stream:GLOB:SUBJECTS")
        return STREAM, name, subject if sep else None
    return kind, rest, None


class Principal:
    """Who a client acts as: a user name, its rules and its limits (per-user resource
    limits, bridge.security). Decisions are remembered (MEMO of them), so a check on a
    name seen before is one dict lookup."""

    __slots__ = ("user", "rules", "limits", "anonymous", "max_message_size", "max_consumers",
                 "max_unacked", "_memo", "_remember", "_subjects", "_remember_subjects")

    def __init__(self, user, rules, limits=None, anonymous=False):
        self.user = user
        self.rules = rules
        self.limits = limits = limits or {}
        self.anonymous = anonymous
        self.max_message_size = limits.get("max_message_size") or None     # None: no limit
        self.max_consumers = limits.get("max_consumers") or None
        self.max_unacked = limits.get("max_unacked") or None
        self._memo, self._remember = bounded(MEMO)
        self._subjects, self._remember_subjects = bounded(MEMO)

    def allows(self, verb, kind, name):
        key = (verb, kind, name)
        found = self._memo.get(key)
        if found is None:
            found = self._remember(key, self.rules.allows(verb, kind, name))
        return found

    def check(self, verb, kind, name):
        if not self.allows(verb, kind, name):
            raise Denied(self.user, verb, kind, name)

    def subjects(self, verb, stream):
        """None, ALL or a match function: what subjects of `stream` the verb covers."""
        key = (verb, stream)
        try:
            return self._subjects[key]
        except KeyError:
            return self._remember_subjects(key, self.rules.subjects(verb, stream))

    def allows_subject(self, verb, stream, subject):
        key = (verb, stream, subject)
        found = self._memo.get(key)
        if found is None:
            rule = self.subjects(verb, stream)
            found = self._remember(
                key, rule is ALL or (rule is not None and rule(subject) is not None))
        return found

    def check_subject(self, verb, stream, subject):
        if not self.allows_subject(verb, stream, subject):
            raise Denied(self.user, verb, STREAM, stream, subject)

    def check_size(self, message):
        """OverLimit when a message is over this user's max_message_size."""
        limit = self.max_message_size
        if limit is not None and message.size > limit:
            raise OverLimit(self.user, "max_message_size", limit)

    def check_consumer(self, client, queue_name, adding=1):
        """Denied unless the client may consume the queue; OverLimit when `adding` more
        consumers would pass max_consumers (its consumers counted as they are now)."""
        self.check(CONSUME, QUEUE, queue_name)
        limit = self.max_consumers
        if limit is not None and len(client.consumers) + adding > limit:
            raise OverLimit(self.user, "max_consumers", limit)

    def same_user(self, other):
        """Whether two principals are one named user (anonymous clients never are)."""
        return (other is not None and not self.anonymous and not other.anonymous
                and other.user == self.user)

    def __repr__(self):
        return f"Principal({self.user!r})"


def permits(client, verb, kind, name):
    """Whether `client` may: a client without a principal may do everything."""
    principal = client.principal
    return principal is None or principal.allows(verb, kind, name)


def check(client, verb, kind, name):
    """Denied unless `client` may (a client without a principal always may)."""
    principal = client.principal
    if principal is not None:
        principal.check(verb, kind, name)


class SubjectFilter:
    """A reader's matcher limited to the subjects its principal may read: what
    Stream.add_reader puts in place of the matcher of a restricted reader."""

    __slots__ = ("matcher", "allowed", "key")

    def __init__(self, matcher, allowed):
        self.matcher, self.allowed = matcher, allowed
        inner = getattr(matcher, "key", None)
        self.key = None if inner is None else (type(matcher), inner, allowed)

    def search(self, subject):
        return self.allowed(subject) is not None and self.matcher.search(subject)
