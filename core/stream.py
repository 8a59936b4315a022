"""Named pub/sub exchange.

A stream hands a message to every subscription whose matcher accepts the subject.
Subscriptions are *bindings* (deliver into a named queue; the queue is looked up at
publish time, so bindings may exist before the queue does, as MQKS rebind allows),
*router bindings* (queues that take every subject, chosen by the stream's route method:
Twino routers, even over a stream another door publishes to) or *readers* (deliver straight
to a client callback; Malamute STREAM-READ). Exact bindings always distribute, so a route
method never changes what exact subscribers get. Exact subjects are a dict lookup: that is
the hot path.
"""

DISTRIBUTE, ROUND_ROBIN, ONLY_FIRST = "distribute", "round-robin", "only-first"


class Reader:
    """A client's direct subscription: deliver(stream_name, message)."""

    __slots__ = ("client", "key", "matcher", "deliver")

    def __init__(self, client, key, matcher, deliver):
        self.client, self.key, self.matcher, self.deliver = client, key, matcher, deliver


class Stream:
    def __init__(self, name, queues, route=DISTRIBUTE):
        self.name = name
        self.route = route
        self._queues = queues          # the broker's name -> Queue dict
        self.exact = {}                # subject -> {queue_name: None}
        self.bindings = {}             # queue_name -> set(subjects)
        self.readers = []              # [Reader] with a matcher
        self.routed = ()               # queue names bound to every subject, in order
        self._routes = {}              # subject -> tuple of live Queues (a cache)
        self._rr = 0
        self.published = 0
        self.unrouted = 0

    # -- bindings (stream -> queue) --------------------------------------------------
    def set_bindings(self, queue_name, subjects):
        """Make `queue_name` bound to exactly `subjects`; returns True if anything changed."""
        old = self.bindings.get(queue_name, set())
        new = set(subjects)
        if old == new:
            return False
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
    def add_reader(self, client, key, matcher, deliver):
        """Subscribe a client; the same (client, key) twice is idempotent."""
        for reader in self.readers:
            if reader.client is client and reader.key == key:
                return reader
        reader = Reader(client, key, matcher, deliver)
        self.readers.append(reader)
        return reader

    def remove_readers(self, client):
        self.readers = [r for r in self.readers if r.client is not client]

    # -- publishing -------------------------------------------------------------------
    def publish(self, message, exclude=None):
        """Route one message; returns how many copies were handed on.

        `exclude` is a client that must not get its own message back (Malamute writers).
        """
        self.published += 1
        delivered = 0
        targets = self._routes.get(message.subject)
        if targets is None:
            targets = self._resolve(message.subject)
        if targets:
            for queue in targets:
                if queue.put_message(message, None):
                    delivered += 1
        if self.routed:
            delivered += self._route(message)
        if self.readers:
            subject = message.subject
            for reader in self.readers:
                if reader.client is not exclude and reader.matcher.search(subject):
                    reader.deliver(self.name, message)
                    delivered += 1
        if not delivered:
            self.unrouted += 1
        return delivered

    def _resolve(self, subject):
        names = self.exact.get(subject, ())
        queues = self._queues
        targets = tuple(queues[n] for n in names if n in queues)
        if len(self._routes) > 100_000:      # many one-off subjects: keep the cache small
            self._routes.clear()
        self._routes[subject] = targets
        return targets

    def _route(self, message):
        """Router bindings: all of them, or round-robin / only-first (Twino route methods)."""
        live = [q for q in map(self._queues.get, self.routed) if q is not None]
        if not live:
            return 0
        if self.route == DISTRIBUTE:
            return sum(1 for queue in live if queue.put_message(message, None))
        if self.route == ROUND_ROBIN:
            self._rr = (self._rr + 1) % len(live)
            live = live[self._rr:] + live[:self._rr]
        for queue in live:
            if queue.put_message(message):
                return 1
        return 0
