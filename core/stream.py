"""Named pub/sub exchange.

A stream hands a message to every subscription whose matcher accepts the subject.
Subscriptions are *bindings* (deliver into a named queue; the queue is looked up at
publish time, so bindings may exist before the queue does, as MQKS rebind allows),
*router bindings* (queues that take every subject, chosen by the stream's route method:
Twino routers, even over a stream another door publishes to) or *readers* (deliver straight
to a client callback; Malamute STREAM-READ). Exact bindings always distribute, so a route
method never changes what exact subscribers get. Exact subjects are a dict lookup: that is
the hot path.

Readers cost a publish one test per distinct matcher, not per reader, so that many clients
(or one client many times) reading with the same pattern cost no more than one. A matcher
has `search(subject)`; it may also have `key` (matchers of one type with equal keys answer
alike) and `literal`, `(kind, text)` when its answer is a plain text test of the subject
cut at its first NUL: "exact" (equal), "prefix", "suffix" or "contains" ("" meaning any
non-empty subject). Literal matchers are answered from dicts without being called: exact
texts by one lookup, prefixes and suffixes by one lookup per distinct length, and each
distinct contained text by one substring test (a stream whose readers all share one
matcher, the usual case, just calls it). A message reaches its readers in the order they
registered, whatever matched them.

Which readers a subject reaches is remembered per subject (a bounded memo, emptied
whenever a reader comes or goes), so the subjects a stream sees over and over cost one
dict lookup, not a match: a matcher's answer must depend on the subject alone.
"""
from itertools import chain
from operator import attrgetter

from mqksbridge.core.cache import bounded
from mqksbridge.core.permissions import ALL, CONSUME, QUEUE, STREAM, Denied, SubjectFilter

DISTRIBUTE, ROUND_ROBIN, ONLY_FIRST = "distribute", "round-robin", "only-first"
_LITERAL_KINDS = ("exact", "prefix", "suffix", "contains")


class Reader:
    """A client's direct subscription: deliver(stream_name, message)."""

    __slots__ = ("client", "key", "matcher", "deliver", "seq", "group")

    def __init__(self, client, key, matcher, deliver, seq=0, group=None):
        self.client, self.key, self.matcher, self.deliver = client, key, matcher, deliver
        self.seq, self.group = seq, group


_SEQ = attrgetter("seq")


class _Group:
    """The readers whose matchers answer alike: matched once per message."""

    __slots__ = ("key", "matcher", "search", "literal", "readers", "snapshot")

    def __init__(self, key, matcher, literal):
        self.key, self.matcher, self.literal = key, matcher, literal
        self.search = matcher.search
        self.readers = {}              # Reader -> None, in registration order
        self.snapshot = None           # tuple(readers) for delivery, until they change

    def freeze(self):
        """The readers as a tuple, kept until they change: a delivery may end a reader's
        session, which must not change what this message is iterating over."""
        self.snapshot = tuple(self.readers)
        return self.snapshot


def _group_key(matcher):
    """(key, literal): what the readers of `matcher` are grouped and filed by."""
    literal = getattr(matcher, "literal", None)
    if literal is not None:
        kind, text = literal
        if kind in _LITERAL_KINDS and (text or kind != "suffix"):
            return ("literal", kind, text), literal
    key = getattr(matcher, "key", None)
    if key is not None:
        return (type(matcher), key), None
    return ("matcher", id(matcher)), None          # the group holds the matcher alive


def _apart(queues):
    """Whether none of `queues` may refuse a put and no client consumes from two of them."""
    seen = set()
    for queue in queues:
        if queue.limited:
            return False
        clients = {c.client for c in queue.consumers}
        if not seen.isdisjoint(clients):
            return False
        seen |= clients
    return True


class Stream:
    def __init__(self, name, queues, route=DISTRIBUTE):
        self.name = name
        self.route = route
        self._queues = queues          # the broker's name -> Queue dict
        self.exact = {}                # subject -> {queue_name: None}
        self.bindings = {}             # queue_name -> set(subjects)
        self._readers = {}             # (client, key) -> Reader, in registration order
        self._by_client = {}           # client -> [Reader]
        self._groups = {}              # group key -> _Group (see _group_key)
        self._exact = {}               # text -> _Group of literal matchers, by kind
        self._prefixes = {}            # length -> {text: _Group}
        self._suffixes = {}            # length -> {text: _Group}
        self._contains = {}            # text -> _Group
        self._searched = {}            # group key -> _Group whose matcher must be called
        self._literals = 0             # groups filed in the four literal tables
        self._only = None              # the one _Group when there is exactly one
        self._seq = 0
        self.routed = ()               # queue names bound to every subject, in order
        # subject -> tuple of live Queues; many one-off subjects only cost misses
        self._routes, self._remember_route = bounded(100_000)
        # subject -> the readers it reaches, in order (match_readers), until readers change
        self._matched, self._remember_match = bounded(10_000)
        self._rr = 0
        self.published = 0
        self.unrouted = 0
        self.refused = 0               # copies a bound queue refused (full, stopped, too large)
        self.refused_by = None         # the last queue that refused one (for the door's log)

    # -- bindings (stream -> queue) --------------------------------------------------
    def set_bindings(self, queue_name, subjects, client=None):
        """Make `queue_name` bound to exactly `subjects`; returns True if anything changed.

        A `client` that binds (MQKS consume, rebind) must be allowed to consume the queue
        and every subject it adds (Denied, before anything changes): binding is reading."""
        old = self.bindings.get(queue_name, set())
        new = set(subjects)
        if old == new:
            return False
        principal = client.principal if client is not None else None
        if principal is not None:
            principal.check(CONSUME, QUEUE, queue_name)
            for subject in new - old:
                principal.check_subject(CONSUME, self.name, subject)
        for subject in old - new:
            targets = self.exact[subject]
            del targets[queue_name]
            if not targets:
                del self.exact[subject]
        for subject in new - old:
            self.exact.setdefault(subject, {})[queue_name] = None
        if new:
            self.bindings[queue_name] = new
        else:
            self.bindings.pop(queue_name, None)
        self._routes.clear()
        return True

    def set_routed(self, queue_names):
        """Router bindings: these queues take every subject, by the route method."""
        self.routed = tuple(queue_names)

    def queues_changed(self):
        """The broker created or deleted a queue: resolved routes may be stale."""
        self._routes.clear()

    def bound_subjects(self, queue_name):
        return self.bindings.get(queue_name, frozenset())

    # -- readers (stream -> client) --------------------------------------------------
    @property
    def readers(self):
        """Every reader, in registration order."""
        return list(self._readers.values())

    def add_reader(self, client, key, matcher, deliver):
        """Subscribe a client; the same (client, key) twice is idempotent. O(1).

        Denied unless the client may consume some subject of this stream; one restricted
        to some subjects reads only those (its matcher is wrapped: core.permissions)."""
        reader = self._readers.get((client, key))
        if reader is not None:
            return reader
        principal = client.principal
        if principal is not None:
            allowed = principal.subjects(CONSUME, self.name)
            if allowed is None:
                raise Denied(principal.user, CONSUME, STREAM, self.name)
            if allowed is not ALL:
                matcher = SubjectFilter(matcher, allowed)
        group_key, literal = _group_key(matcher)
        group = self._groups.get(group_key)
        if group is None:
            group = self._groups[group_key] = _Group(group_key, matcher, literal)
            self._file(group)
            self._only = group if len(self._groups) == 1 else None
        self._seq += 1
        reader = self._readers[client, key] = Reader(client, key, matcher, deliver,
                                                     self._seq, group)
        group.readers[reader] = None
        group.snapshot = None
        self._matched.clear()
        self._by_client.setdefault(client, []).append(reader)
        return reader

    def remove_readers(self, client):
        """Unsubscribe every reader of `client`: O(its readers)."""
        readers = self._by_client.pop(client, ())
        if readers:
            self._matched.clear()
        for reader in readers:
            del self._readers[client, reader.key]
            group = reader.group
            del group.readers[reader]
            group.snapshot = None
            if not group.readers:
                del self._groups[group.key]
                self._unfile(group)
                self._only = next(iter(self._groups.values())) if len(self._groups) == 1 \
                    else None

    def reader_count(self, client):
        return len(self._by_client.get(client, ()))

    def _file(self, group):
        if group.literal is None:
            self._searched[group.key] = group
            return
        self._literals += 1
        kind, text = group.literal
        if kind == "exact":
            self._exact[text] = group
        elif kind == "contains":
            self._contains[text] = group
        else:
            table = self._prefixes if kind == "prefix" else self._suffixes
            table.setdefault(len(text), {})[text] = group

    def _unfile(self, group):
        if group.literal is None:
            del self._searched[group.key]
            return
        self._literals -= 1
        kind, text = group.literal
        if kind == "exact":
            del self._exact[text]
        elif kind == "contains":
            del self._contains[text]
        else:
            table = self._prefixes if kind == "prefix" else self._suffixes
            del table[len(text)][text]
            if not table[len(text)]:
                del table[len(text)]

    def _literal_groups(self, subject):
        """The groups of literal matchers that accept `subject` (cut at its first NUL)."""
        found = []
        nul = subject.find("\0")
        text = subject if nul < 0 else subject[:nul]
        if self._exact:
            group = self._exact.get(text)
            if group is not None:
                found.append(group)
        for length, table in self._prefixes.items():    # a shorter text is no key here
            group = table.get(text[:length])
            if group is not None:
                found.append(group)
        for length, table in self._suffixes.items():     # lengths are > 0
            group = table.get(text[-length:])
            if group is not None:
                found.append(group)
        for contained, group in self._contains.items():
            if (contained in text) if contained else text:
                found.append(group)
        return found

    # -- publishing -------------------------------------------------------------------
    def publish(self, message, publisher=None):
        """Route one message; returns how many copies were handed on.

        `publisher` is the Client whose input brought it: flow control holds it if a queue
        congests (core.flow), and it never reads its own message back (Malamute writers).
        """
        self.published += 1
        delivered = 0
        targets = self._routes.get(message.subject)
        if targets is None:
            targets = self._resolve(message.subject)
        if targets:
            for queue in targets:
                if queue.put_routed(message, None, publisher):
                    delivered += 1
                else:                        # a door that can tell its publisher looks here
                    self.refused += 1
                    self.refused_by = queue
        if self.routed:
            delivered += self._route(message, publisher)
        if self._readers:                    # inline: this is every stream message's path
            readers = self._matched.get(message.subject)
            if readers is None:
                readers = self.match_readers(message.subject)
            if readers:
                name = self.name
                for reader in readers:
                    if reader.client is not publisher:
                        reader.deliver(name, message)
                        delivered += 1
        if not delivered:
            self.unrouted += 1
        return delivered

    def match_readers(self, subject):
        """The readers `subject` reaches, in registration order, as a tuple: a delivery may
        end a reader's session, which must not change what a message is iterating over.
        Remembered for the next message with this subject (publish looks there first)."""
        only = self._only
        if only is not None:                 # one pattern (one reader, or all alike)
            readers = (only.snapshot or only.freeze()) if only.search(subject) else ()
        else:
            found = self._literal_groups(subject) if self._literals else []
            for group in self._searched.values():
                if group.search(subject):
                    found.append(group)
            if len(found) == 1:
                readers = found[0].snapshot or found[0].freeze()
            else:                            # registration order across groups
                readers = tuple(sorted(chain.from_iterable(g.readers for g in found),
                                       key=_SEQ))
        return self._remember_match(subject, readers)

    def _resolve(self, subject):
        names = self.exact.get(subject, ())
        queues = self._queues
        return self._remember_route(subject, tuple(queues[n] for n in names if n in queues))

    def publish_run(self, messages, publisher=None):
        """publish() for each of `messages`, which share one subject, in order; returns how
        many copies were handed on. With only exact bindings (no readers, no router
        bindings) the route is looked up once, and a run bound to one queue is put as one
        (Queue.put_run), as is a run bound to several queues that cannot refuse and share no
        consuming client: what one queue does then cannot change what another does, so
        queue by queue ends as message by message. Tests hold it equal to publish() one
        by one."""
        if self.routed or self._readers:
            publish = self.publish
            return sum([publish(message, publisher) for message in messages])
        n = len(messages)
        self.published += n
        subject = messages[0].subject
        targets = self._routes.get(subject)
        if targets is None:
            targets = self._resolve(subject)
        if len(targets) == 1:
            queue = targets[0]
            delivered = queue.put_run(messages, publisher)
            if delivered < n:
                self.refused += n - delivered
                self.refused_by = queue
                self.unrouted += n - delivered
            return delivered
        if targets and _apart(targets):
            return sum([queue.put_run(messages, publisher) for queue in targets])
        delivered = 0
        for message in messages:
            copies = 0
            for queue in targets:
                if queue.put_routed(message, None, publisher):
                    copies += 1
                else:
                    self.refused += 1
                    self.refused_by = queue
            if not copies:
                self.unrouted += 1
            delivered += copies
        return delivered

    def _route(self, message, publisher):
        """Router bindings: all of them, or round-robin / only-first (Twino route methods)."""
        live = [q for q in map(self._queues.get, self.routed) if q is not None]
        if not live:
            return 0
        if self.route == DISTRIBUTE:
            return sum(1 for queue in live if queue.put_routed(message, None, publisher))
        if self.route == ROUND_ROBIN:
            self._rr = (self._rr + 1) % len(live)
            live = live[self._rr:] + live[:self._rr]
        for queue in live:
            if queue.put_routed(message, None, publisher):
                return 1
        return 0
