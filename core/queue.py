"""Named FIFO with a priority lane and competing consumers.

One class serves every door; its delivery mode says what a put does:

round-robin  each message to one ready consumer, strictly rotating (MQKS, Malamute
             services, Twino RoundRobin); stored while nobody is ready
push-all     each message to every consumer; stored while there are none (Twino Push)
broadcast    to every current consumer at once, never stored (Twino Broadcast)
pull         stored; handed out only by pull() (Twino Pull)
cache        keeps only the latest message; never pushed (Twino Cache)
paused       stored, not delivered until the mode changes
stopped      refuses puts; entering it clears the queue

The queue, not the door a consumer came through, decides what becomes of a message a
consumer hands back unsettled: it rejects it, misses its ack timeout or goes away.
An entry handed to one consumer (round-robin, pull, only-first) goes back with retry + 1
to the next one, so nothing is lost before someone settles it (a settlement is an ack,
positive or negative). An entry handed to every consumer at
once (push-all, broadcast) is `shared`: all of them had it, so the copy handed back is
settled for that consumer alone and never sent to the others again. docs/delivery.md
has the whole table; tests/core/test_core_delivery_rules.py checks it as a state machine.

A queue with a journal (attach_journal) is durable: it tells the journal every entry it
takes, requeues and settles (core.journal), takes no fast path that would skip that, and
with `max_deliveries` set moves an entry handed back unsettled that many times to its
`dead_letter` queue instead of requeueing it.

Time-based work (ack timeouts, message expiry) happens in tick(), which the broker calls
from one periodic sweep: no timer per message.
"""
from collections import deque
from operator import attrgetter

from mqksbridge.core.limits import REJECT, dead_letter_queue
from mqksbridge.core.message import Entry
from mqksbridge.core.permissions import CONSUME, QUEUE, check
from mqksbridge.core.window import PRIORITY, REGULAR

ROUND_ROBIN, PUSH_ALL, BROADCAST, PULL, CACHE, PAUSED, STOPPED = (
    "round-robin", "push-all", "broadcast", "pull", "cache", "paused", "stopped")
MODES = (ROUND_ROBIN, PUSH_ALL, BROADCAST, PULL, CACHE, PAUSED, STOPPED)
_MESSAGE, _SIZE, _PRIORITY = attrgetter("message"), attrgetter("size"), attrgetter("priority")
_OPTIONS = ("ack_timeout", "max_messages", "max_bytes", "max_message_size", "wait_for_ack",
            "only_first", "when_unused", "overflow", "max_deliveries", "dead_letter")


class QueueError(Exception):
    """A put the queue refuses; `reason` is one of 'stopped', 'full', 'too-large'."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class Queue:
    def __init__(self, broker, name, mode=ROUND_ROBIN, *, ack_timeout=None, max_messages=None,
                 max_bytes=None, max_message_size=None, wait_for_ack=False, only_first=False,
                 when_unused=None, overflow=REJECT, max_deliveries=None, dead_letter=None,
                 attrs=None, shortcuts=True):
        self.broker = broker
        self.name = name
        self.channel = None            # the Channel that groups it (Broker claims it by name)
        self.entries = deque()
        self.priority = deque()
        self.bytes = 0
        self.consumers = []
        self.attrs = attrs if attrs is not None else {}   # door-private settings
        self.deleted = False
        self.held = False              # publishers are held for this queue (core.flow)
        self.delivered_at_hold = self.stalled_at = None
        self._flow_limit = broker.flow.limit
        self._next = 0
        self._filtered = 0
        self._dispatching = False
        self._outstanding = 0          # manual-ack deliveries not yet settled
        self._ack_deadlines = deque()  # (deadline, consumer, entry, retry), in delivery order
        self._unused_timer = None
        self.received = self.delivered = self.acked = self.requeued = 0
        self.dropped = self.expired = self.dead_lettered = 0
        self.journal = None            # core.journal: set once the queue is durable
        self.window = None             # core.window: the backlog beyond it is paged out
        self.mode = mode
        self.ack_timeout = ack_timeout
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_message_size = max_message_size
        self.wait_for_ack = wait_for_ack
        self.only_first = only_first
        self.when_unused = when_unused
        self.shortcuts = shortcuts     # False: every put and dispatch takes the plain path
        self.overflow = overflow       # what a put into a full queue does (core.limits)
        self.max_deliveries = max_deliveries   # handed back unsettled this often: dead letter
        self.dead_letter = dead_letter         # the queue dead letters go to
        self._direct = self._fanout = self._first_match = False
        self._refresh()
        if broker.windows is not None:
            self.window = broker.windows(self)

    def configure(self, **options):
        """Change options live (limits, timeouts, wait-for-ack...); re-dispatches."""
        for key, value in options.items():
            if key not in _OPTIONS:
                raise ValueError(f"unknown queue option {key!r}")
            setattr(self, key, value)
        self._refresh()
        self.dispatch()

    def _refresh(self):
        """Whether put_message may skip every check and hand over directly, and whether
        any put may be refused (`limited`: doors skip `refusal` otherwise). The shortcuts
        must give exactly what the plain path gives; tests hold them equal by running
        the same operations on a queue made with shortcuts=False."""
        self.limited = (self.max_messages is not None or self.max_bytes is not None
                        or self.max_message_size is not None or self.mode == STOPPED)
        unlimited = (self.shortcuts and not self.only_first and not self.wait_for_ack
                     and self.max_messages is None and self.max_bytes is None
                     and self.max_message_size is None)
        plain = unlimited and not self._filtered
        # a durable queue keeps the direct hand-over (it journals the entry first); the
        # other shortcuts skip what its journal must hear
        memory = self.journal is None
        self._direct = plain and self.mode == ROUND_ROBIN
        self._fanout = plain and self.mode == PUSH_ALL and memory
        self._first_match = unlimited and self._filtered and self.mode == ROUND_ROBIN and memory

    def attach_journal(self, journal):
        """Make the queue durable: `journal` (core.journal) records what it holds now and
        everything it takes from here on. Of the fast paths only the direct hand-over
        stays on, and it tells the journal as put() does."""
        window = self.window
        if window is not None:             # its paged entries go to the journal too
            self._page_all_in()
            window.close()
        self.journal = journal
        self._refresh()
        for entry in self.live_entries():
            if entry.record is None:
                journal.put(entry)
        if window is not None:
            self.window = self.broker.windows(self)
            self.window.trim(self)

    def restore(self, entries):
        """Entries read back from the journal, in order, at the back of their lanes (a
        broker starting up: they are recorded already, and nobody consumes yet). A
        million may come back before the doors listen: without priority ones, a few
        passes in C, no Python code per entry."""
        messages = list(map(_MESSAGE, entries))
        self.bytes += sum(map(_SIZE, messages))
        if any(map(_PRIORITY, messages)):
            for entry, message in zip(entries, messages):
                (self.priority if message.priority else self.entries).append(entry)
        else:
            self.entries.extend(entries)
        if self.window is not None:
            self.window.trim(self)
        self.dispatch()

    def live_entries(self):
        """Every entry the queue is responsible for: stored (resident: paged-out entries
        are the pager's), or held unacked by one of its consumers (each once)."""
        yield from self.priority
        yield from self.entries
        seen = set()
        for consumer in self.consumers:
            for entry in consumer.unacked.values():
                if id(entry) not in seen:
                    seen.add(id(entry))
                    yield entry

    def _settle(self, entry, reason, door=None):
        """The journal lets go of an entry the queue is done with (`door`: that of the
        consumer that settled it, when one did)."""
        if entry.record is not None:
            self.journal.settle(entry, reason, door)

    def _held_elsewhere(self, entry):
        """Whether a shared entry is still held unacked by some consumer."""
        mid = entry.message.id
        return any(c.unacked.get(mid) is entry for c in self.consumers)

    # -- configuration ----------------------------------------------------------------
    def set_mode(self, mode):
        """Change the delivery mode live; stopped clears, others re-dispatch."""
        if mode not in MODES:
            raise ValueError(f"unknown queue mode {mode!r}")
        self.mode = mode
        self._refresh()
        if mode == STOPPED:
            self.clear()
        elif mode == CACHE:
            self._keep_latest()
        self.dispatch()

    def __len__(self):
        window = self.window
        return len(self.entries) + len(self.priority) + (window.paged if window else 0)

    def lengths(self):
        """(priority, regular) stored entries, paged-out ones included."""
        window = self.window
        paged = window.lanes if window is not None else (0, 0)
        return len(self.priority) + paged[PRIORITY], len(self.entries) + paged[REGULAR]

    def take_stored(self):
        """Take every stored entry, in order, priority lane first (paged-out ones a batch
        at a time): a backlog moved elsewhere (admin)."""
        window = self.window
        for index, lane in _lanes(self, "all"):
            while True:
                while lane:
                    entry = lane.popleft()
                    self.bytes -= entry.message.size
                    yield entry
                if window is None or not window.lanes[index]:
                    break
                lane.extend(window.take(index, window.messages))
        if not len(self):
            self.bytes = 0

    def stored_entries(self):
        """Every stored entry in delivery order, lane by lane, paged-out ones read back
        without taking them (admin views and tests: it reads the pager's files)."""
        window = self.window
        yield from self.priority
        if window is not None and window.lanes[PRIORITY]:
            yield from window.peek(PRIORITY)
        yield from self.entries
        if window is not None and window.lanes[REGULAR]:
            yield from window.peek(REGULAR)

    def refusal(self, message):
        """Why a put of `message` would be refused, or None."""
        if self.mode == STOPPED:
            return "stopped"
        if self.max_message_size is not None and message.size > self.max_message_size:
            return "too-large"
        if self.max_messages is not None and len(self) >= self.max_messages:
            return "full"
        if self.max_bytes is not None and self.bytes + message.size > self.max_bytes:
            return "full"
        return None

    # -- putting ----------------------------------------------------------------------
    def put_message(self, message, observer=None, publisher=None):
        """Stream entry point: False (and counted) when refused, never raises.

        `publisher` is the Client whose input brought the message: the one flow control
        holds when this put congests the queue (core.flow). The common cases (plain
        round-robin with the next consumer ready, filtered round-robin with a matching
        consumer ready, plain push-all with every consumer ready, no backlog) hand the
        message straight over without touching the deque.
        """
        entry = Entry(message, 0, observer)
        if self._direct and not self.entries and not self.priority and not self._dispatching:
            consumers = self.consumers
            if consumers:
                i = self._next
                if i >= len(consumers):
                    i = 0
                c = consumers[i]
                if c.active and not c.client.paused and c.credit is None:
                    self._next = i + 1
                    self.received += 1
                    journal = self.journal
                    if journal is not None:     # what put() and _dispatch would do
                        journal.put(entry)
                        self._hand(c, entry)
                    elif c.manual_ack or observer is not None:
                        self._hand(c, entry)
                    else:
                        c.delivered += 1
                        self.delivered += 1
                        entry.deliveries = 1
                        c.deliver(c, entry)
                    return True
        elif self._first_match and not self.entries and not self.priority and not self._dispatching:
            subject = message.subject           # what _dispatch_filtered does, minus the deque
            consumers = self.consumers
            for i, c in enumerate(consumers):
                if (c.active and not c.client.paused and (c.credit is None or c.credit > 0)
                        and (c.filter is None or c.filter.search(subject))):
                    if i < len(consumers) - 1:
                        consumers.append(consumers.pop(i))
                    self.received += 1
                    if c.manual_ack or c.credit is not None or observer is not None:
                        self._hand(c, entry)
                    else:                       # _hand, for an auto-ack consumer
                        c.delivered += 1
                        self.delivered += 1
                        entry.deliveries = 1
                        c.deliver(c, entry)
                    return True
        elif self._fanout and not self.entries and not self.priority and not self._dispatching:
            consumers = self.consumers
            for c in consumers:
                if not c.active or c.client.paused or c.credit is not None:
                    break
            else:
                if consumers:
                    self.received += 1
                    entry.shared = True
                    for c in consumers:
                        self._hand(c, entry)
                    return True
        return self.put(entry, False, publisher)

    # What a stream hands on: its publisher's permission was checked at the stream, so
    # this put is never checked again (a guarded queue checks put_message: core.guarded).
    put_routed = put_message

    def put(self, entry, strict=False, publisher=None, forward=True):
        """Add an entry; with strict=True a refusal raises QueueError instead of dropping.
        `forward=False`: the entry is another queue's dead letter, so a full queue here drops
        its oldest rather than dead-letter them on (no ping-pong between two queues)."""
        message = entry.message
        if self.limited:
            reason = self.refusal(message)
            if reason == "full" and self.overflow != REJECT and not strict:
                reason = self._make_room(message, forward)
            if reason is not None:
                if strict:
                    raise QueueError(reason)
                self.dropped += 1
                entry.notify("dropped", None, reason)
                if reason == "full" and publisher is not None:
                    self.broker.flow.congested(self, publisher)    # core.flow: rejected
                return False
        self.received += 1
        if self.journal is not None:
            self.journal.put(entry)
        mode = self.mode
        if mode == BROADCAST:
            self._broadcast(entry)
            return True
        if mode == CACHE:
            self.clear()
        self._store(entry)
        if not self._dispatching:
            for c in self.consumers:        # all paused (a burst): resume() dispatches
                if not c.client.paused:
                    self.dispatch()
                    break
        if (self._flow_limit is not None and self.consumers
                and len(self.entries) + _paged(self) >= self._flow_limit
                and (mode == ROUND_ROBIN or mode == PUSH_ALL)):
            # judged on what is left once the consumers took theirs (as the shortcuts do);
            # a publisher this queue holds already is nothing new (most puts to a backlog)
            if publisher is not None and self not in publisher.held:
                self.broker.flow.congested(self, publisher)
        return True

    def _store(self, entry):
        """At the back of its lane: resident while the window admits it, else paged out
        (core.window)."""
        message = entry.message
        self.bytes += message.size
        lane = self.priority if message.priority else self.entries
        window = self.window
        if window is None or window.admits(self, lane, message):
            lane.append(entry)
        else:
            window.page_out(self, lane, (entry,))

    def _refill(self):
        """Keep a lane with paged-out entries resident at its front (core.window)."""
        window = self.window
        if window is not None and window.paged:
            window.refill(self)

    def _page_all_in(self, lanes="all"):
        """Every paged-out entry of `lanes` back at the end of its lane (a clear, a cache
        keeping the latest, a queue turning durable: rare, and their cost is the backlog's)."""
        window = self.window
        if window is None:
            return
        for index, lane in _lanes(self, lanes):
            while window.lanes[index]:
                lane.extend(window.take(index, window.messages))

    def _make_room(self, message, forward):
        """A full queue whose overflow policy is not REJECT: the oldest stored messages
        (regular lane first) are dropped, or dead-lettered when `forward`, until `message`
        fits. Messages handed to consumers and not yet acked are theirs, never taken.
        Returns the refusal left (None: it fits now)."""
        target = dead_letter_queue(self.overflow) if forward else None
        if target == self.name:
            target = None                         # its own dead letters: drop them
        while self.refusal(message) == "full" and len(self):
            if not self.entries:
                self._refill()
            entry = self.entries.popleft() if self.entries else self.priority.popleft()
            self.bytes -= entry.message.size
            if target is not None:
                self.dead_lettered += 1
                entry.notify("dropped", None, "dead-lettered")
                self._settle(entry, "dead-lettered")
                self.broker.queue(target).put(Entry(entry.message), False, None, False)
            else:
                self.dropped += 1
                entry.notify("dropped", None, "overflow")
                self._settle(entry, "removed")
        self._refill()
        return self.refusal(message)

    # -- what consumers hand back ---------------------------------------------------------
    def returned(self, consumer, entry):
        """`consumer` hands `entry` back unsettled (it rejected it, missed its ack timeout,
        or could not take it): a shared entry is settled for it alone, any other goes to
        the back of the queue with retry + 1."""
        if consumer.manual_ack:
            self._outstanding -= 1
        if entry.shared:
            if entry.record is not None and not self._held_elsewhere(entry):
                self._settle(entry, "removed")
            if self.wait_for_ack:
                self.dispatch()
        else:
            self._requeue(entry, consumer.client.door)

    def _departed(self, consumer, entry):
        """What `consumer`, gone, held unacked. A shared entry waits for no verdict of it:
        its observer hears 'dropped' only when no remaining consumer holds it either."""
        self._outstanding -= 1
        if not entry.shared:
            self._requeue(entry, consumer.client.door)
            return
        if (entry.observer is not None or entry.record is not None) \
                and not self._held_elsewhere(entry):
            entry.notify("dropped", consumer, "consumer-gone")
            self._settle(entry, "removed")
        if self.wait_for_ack:
            self.dispatch()

    def _requeue(self, entry, door=None):
        """Back of the queue with retry + 1, as a put in the current mode would go: a
        broadcast queue hands it to its consumers now (or drops it), a cache keeps it only
        when it holds nothing newer, a stopped or deleted queue drops it."""
        if self.deleted or self.mode == STOPPED:
            self.dropped += 1
            entry.notify("dropped", None, "deleted" if self.deleted else "stopped")
            self._settle(entry, "removed")
            return
        if self.max_deliveries is not None and entry.retry + 1 >= self.max_deliveries:
            self._dead(entry, door)
            return
        entry.retry += 1
        self.requeued += 1
        if entry.record is not None:
            self.journal.requeued(entry)
        mode = self.mode
        if mode == BROADCAST:
            self._broadcast(entry)
            return
        if mode == CACHE and len(self):
            self.dropped += 1
            entry.notify("dropped", None, "replaced")
            self._settle(entry, "removed")
            return
        self._store(entry)
        self.dispatch()

    def _dead(self, entry, door=None):
        """Handed out `max_deliveries` times and back again: to the dead-letter queue (a
        new entry there, its retry count kept), settled here. This hand-back counts: the
        journal and the copy say how often the message was really handed back."""
        entry.retry += 1
        if entry.record is not None:
            self.journal.requeued(entry)
        self.dead_lettered += 1
        entry.notify("nack", None, "dead-lettered")
        self._settle(entry, "dead-lettered", door)
        target = self.dead_letter or self.name + ".dlq"
        if target != self.name:
            self.broker.queue(target).put(Entry(entry.message, entry.retry))

    def settled(self, consumer, entry, positive=True):
        """A consumer acked (or nacked) an entry for good."""
        self.acked += 1
        self._outstanding -= 1
        if entry.record is not None and not (entry.shared and self._held_elsewhere(entry)):
            self._settle(entry, "acked" if positive else "nacked", consumer.client.door)
        if self.wait_for_ack:
            self.dispatch()

    def clear(self, lanes="all"):
        """Drop stored entries: 'all' (or True), 'priority' or 'regular' lane only."""
        window = self.window
        for index, lane in _lanes(self, lanes):
            while True:
                while lane:
                    entry = lane.popleft()
                    self.bytes -= entry.message.size
                    entry.notify("dropped", None, "cleared")
                    self._settle(entry, "removed")
                if window is None or not window.lanes[index]:
                    break
                lane.extend(window.take(index, window.messages))    # a batch at a time
        if not len(self):
            self.bytes = 0

    def _keep_latest(self):
        window = self.window
        paged = window.lanes if window is not None else (0, 0)
        if paged[REGULAR]:
            latest = window.take_last(REGULAR, 1)[-1]
        elif self.entries:
            latest = self.entries[-1]
        elif paged[PRIORITY]:
            latest = window.take_last(PRIORITY, 1)[-1]
        else:
            latest = self.priority[-1] if self.priority else None
        for index, lane in _lanes(self, "all"):
            while True:
                for entry in lane:
                    if entry is not latest:
                        self._settle(entry, "removed")
                lane.clear()
                if window is None or not window.lanes[index]:
                    break
                lane.extend(window.take(index, window.messages))    # a batch at a time
        self.bytes = 0
        if latest is not None:
            self.entries.append(latest)
            self.bytes = latest.message.size

    # -- consumers --------------------------------------------------------------------
    def add_consumer(self, consumer):
        """Denied (before anything changes) unless its client may consume this queue: every
        delivery, redelivery and pull of this queue goes to consumers added here."""
        principal = consumer.client.principal
        if principal is not None:
            registered = consumer.client.consumers.get(consumer.id) is consumer
            principal.check_consumer(consumer.client, self.name, 0 if registered else 1)
        if self._unused_timer is not None:
            if self._unused_timer.active():
                self._unused_timer.cancel()
            self._unused_timer = None
        consumer.queue = self
        self.consumers.append(consumer)
        if consumer.filter is not None:
            self._filtered += 1
            self._refresh()
        self.dispatch()

    def remove_consumer(self, consumer):
        """Take a consumer away; what it held unacked is handed back (module docstring)."""
        unacked = self._detach(consumer)
        if unacked is None:
            return
        for entry in unacked:
            self._departed(consumer, entry)
        if not self.consumers and not self.deleted:
            self._maybe_delete_unused()
        self.dispatch()

    def _detach(self, consumer):
        """Unlink a consumer; returns the entries it held unacked (None if not ours)."""
        if consumer.queue is not self:
            return None
        index = self.consumers.index(consumer)
        del self.consumers[index]
        if index < self._next:
            self._next -= 1
        if consumer.filter is not None:
            self._filtered -= 1
            self._refresh()
        consumer.active = False
        consumer.queue = None
        unacked, consumer.unacked = consumer.unacked, {}
        return list(unacked.values())

    def _maybe_delete_unused(self):
        setting = self.when_unused
        if setting is None or setting is False:
            return
        if setting is True:
            self.broker.delete_queue(self.name)
        elif setting < float("inf"):                   # inf: never (doors refuse nan, < 0)
            self._unused_timer = self.broker.clock.call_later(float(setting), self._unused_expired)

    def _unused_expired(self):
        self._unused_timer = None
        if not self.consumers and not self.deleted:
            self.broker.delete_queue(self.name)

    # -- dispatching --------------------------------------------------------------------
    def dispatch(self):
        """Hand stored messages to consumers as the mode allows. Re-entrant safe."""
        self._dispatch()
        window = self.window
        if window is not None and window.paged:
            self._dispatch_paged(window)
        if self.held and (not self.consumers or self._relieved()):
            self.broker.flow.relieved(self)

    def _dispatch_paged(self, window):
        """Page the backlog back in as consumers take it. When what is resident suits no
        ready consumer (their filters, a push-all round nobody ready takes), one more
        batch comes in past the window, until one does or the backlog is all in: a
        matching message never waits on disk behind ones nobody takes."""
        while window.paged:
            if not window.refill(self):
                if (self._dispatching or self.deleted or self._blocked()
                        or self.mode not in (ROUND_ROBIN, PUSH_ALL)
                        or not any(c.ready() for c in self.consumers)):
                    return
                window.refill(self, more=True)
            self._dispatch()

    def _relieved(self):
        """Whether the publishers held for this queue may go on: it is back under the
        flow's low mark and under half of its own limits (core.flow)."""
        n = len(self.entries) + _paged(self)
        low = self.broker.flow.low
        return ((low is None or n <= low)
                and (self.max_messages is None or n <= self.max_messages // 2)
                and (self.max_bytes is None or self.bytes <= self.max_bytes // 2))

    def _dispatch(self):
        if self._dispatching or not self.consumers or self.deleted:
            return
        mode = self.mode
        if mode == ROUND_ROBIN and not self.only_first:
            if not (self.entries or self.priority):
                return
            self._dispatching = True
            try:
                if self._filtered:
                    self._dispatch_filtered()
                else:
                    self._dispatch_rotating()
            finally:
                self._dispatching = False
        elif mode == PUSH_ALL or (mode == ROUND_ROBIN and self.only_first):
            self._dispatching = True
            try:
                self._dispatch_all()
            finally:
                self._dispatching = False

    def _blocked(self):
        return self.wait_for_ack and self._outstanding > 0

    def _dispatch_rotating(self):
        consumers, priority, entries = self.consumers, self.priority, self.entries
        if (len(consumers) == 1 and not priority and not self.wait_for_ack and self.shortcuts
                and self.journal is None):
            self._drain(consumers[0])
        wait = self.wait_for_ack
        while priority or entries:
            if wait and self._outstanding > 0:
                return
            n = len(consumers)
            if not n:
                return
            start = self._next % n
            for k in range(n):
                c = consumers[(start + k) % n]
                if c.active and not c.client.paused and (c.credit is None or c.credit > 0):
                    self._next = (start + k) % n + 1     # the one after it, as put_message
                    break
            else:
                return
            entry = priority.popleft() if priority else entries.popleft()
            self.bytes -= entry.message.size
            self._hand(c, entry)

    def _dispatch_filtered(self):
        """Malamute-style: the first ready consumer whose filter matches takes it and
        moves to the end of the list; unmatched messages wait in FIFO order. Dispatch
        stops when no consumer is ready (one pass over the consumers tells both)."""
        consumers, wait = self.consumers, self.wait_for_ack
        if (len(consumers) == 1 and not self.priority and not wait and self.shortcuts
                and self.journal is None):
            self._drain_matching(consumers[0])
        for lane in (self.priority, self.entries):
            kept = []
            while lane:
                if wait and self._outstanding > 0:
                    break
                entry = lane.popleft()
                subject = entry.message.subject
                ready = False
                for i, c in enumerate(consumers):
                    if c.active and not c.client.paused and (c.credit is None or c.credit > 0):
                        ready = True
                        if c.filter is None or c.filter.search(subject):
                            consumers.append(consumers.pop(i))
                            self.bytes -= entry.message.size
                            self._hand(c, entry)
                            break
                else:
                    if not ready:
                        lane.appendleft(entry)
                        break
                    kept.append(entry)
            lane.extendleft(reversed(kept))

    def _dispatch_all(self):
        """Push-all (and only-first), once a consumer that takes the message is ready: to
        every consumer that takes it, paused or not (each one present gets it), or to the
        first ready one. A consumer takes a message its filter matches while its credit
        lasts; a message nobody takes waits, in order."""
        consumers, only_first = self.consumers, self.only_first
        for lane in (self.priority, self.entries):
            kept = []
            while lane:
                if self._blocked() or not any(c.ready() for c in consumers):
                    break
                entry = lane.popleft()
                takers = self._takers(entry.message.subject)
                ready = [c for c in takers if not c.client.paused]
                if not ready:
                    kept.append(entry)
                    continue
                self.bytes -= entry.message.size
                if only_first:
                    self._hand(ready[0], entry)
                else:
                    entry.shared = True
                    for c in takers:
                        self._hand(c, entry)
                    if entry.record is not None and not self._held_elsewhere(entry):
                        self._settle(entry, "acked")
            lane.extendleft(reversed(kept))

    def _takers(self, subject):
        """Consumers that would take a message with this subject now, paused or not."""
        return [c for c in self.consumers if c.active and (c.credit is None or c.credit > 0)
                and (c.filter is None or c.filter.search(subject))]

    def _broadcast(self, entry):
        receivers = self._takers(entry.message.subject)
        if not receivers:
            self.dropped += 1
            entry.notify("dropped", None, "no-consumers")
            self._settle(entry, "removed")
            return
        if self.only_first:
            receivers = [next((c for c in receivers if c.ready()), receivers[0])]
        else:
            entry.shared = True
        for c in receivers:
            self._hand(c, entry)
        if entry.shared and entry.record is not None and not self._held_elsewhere(entry):
            self._settle(entry, "acked")

    def _drain(self, c):
        """The backlog to a lone auto-ack consumer without credit (a paused consumer
        catching up, the commonest dispatch): what _hand does, minus the per-entry
        rotation and calls. Stops when the consumer pauses or goes."""
        if c.manual_ack or c.credit is not None:
            return
        entries, client, deliver = self.entries, c.client, c.deliver
        if entries and c.active and not client.paused:
            self._next = 1                   # it takes a turn (see _dispatch_rotating)
        while entries and c.active and not client.paused:
            entry = entries.popleft()
            self.bytes -= entry.message.size
            c.delivered += 1
            self.delivered += 1
            entry.deliveries += 1
            deliver(c, entry)
            observer = entry.observer
            if observer is not None:
                observer("sent", entry, c, None, None)
                entry.notify("ack", c)

    def _drain_matching(self, c):
        """The backlog to a lone filtered consumer (one Malamute worker behind pipelining
        clients): the run of waiting entries its filter matches, in order, without the
        per-entry rotation and calls; stops at the first it does not match (the plain
        loop goes on from there) or when the consumer pauses, goes or runs out of credit."""
        if c.manual_ack:
            return
        entries, client, deliver, search = self.entries, c.client, c.deliver, None
        if c.filter is not None:
            search = c.filter.search
        while entries and c.active and not client.paused and (c.credit is None or c.credit > 0):
            entry = entries[0]
            if search is not None and not search(entry.message.subject):
                return
            entries.popleft()
            self.bytes -= entry.message.size
            if c.credit is not None:
                c.credit -= 1
            c.delivered += 1
            self.delivered += 1
            entry.deliveries += 1
            deliver(c, entry)
            observer = entry.observer
            if observer is not None:
                observer("sent", entry, c, None, None)
                entry.notify("ack", c)

    def _hand(self, c, entry):
        """One push delivery: what _track does (inline: every push passes here), then the
        consumer's deliver and the observer's 'sent' (and 'ack' for an auto-ack one)."""
        if c.credit is not None:
            c.credit -= 1
        c.delivered += 1
        self.delivered += 1
        entry.deliveries += 1
        if c.manual_ack:
            c.unacked[entry.message.id] = entry
            self._outstanding += 1
            if self.ack_timeout:
                self._ack_deadlines.append((self.broker.clock.now() + self.ack_timeout, c, entry,
                                            entry.retry))
        elif entry.record is not None and not entry.shared:
            self.journal.settle(entry, "acked", c.client.door)
        c.deliver(c, entry)
        observer = entry.observer
        if observer is not None:
            observer("sent", entry, c, None, None)     # Entry.notify, minus a call: no verdict
            if not c.manual_ack:
                entry.notify("ack", c)

    # -- pull ---------------------------------------------------------------------------
    def pull(self, consumer, count, lifo=False, clear=False, left=None):
        """Take up to `count` entries for one requester (Twino Pull); priority first.

        `clear` (True/'all', 'priority', 'regular') empties those lanes once the last
        requested entry is taken. `left`, a list, receives (priority, regular) lengths
        after each taken entry (Twino's pull Info headers).
        """
        check(consumer.client, CONSUME, QUEUE, self.name)
        taken = []
        now = self.broker.clock.now()
        window = self.window
        paged = window.lanes if window is not None else (0, 0)
        for index, lane in _lanes(self, "all"):
            while len(taken) < count:
                if paged[index] and (lifo or not lane):    # its back is paged out
                    lane.extend(window.take_last(index, 1) if lifo
                                else window.take(index, window.messages))
                elif not lane:
                    break
                entry = lane.pop() if lifo else lane.popleft()
                self.bytes -= entry.message.size
                expires = entry.message.expires_at
                if expires is not None and expires <= now:
                    self.expired += 1
                    entry.notify("dropped", None, "expired")
                    self._settle(entry, "expired")
                    continue
                taken.append(entry)
                if clear and len(taken) == count:
                    self.clear(clear)
                if left is not None:
                    left.append((len(self.priority) + paged[PRIORITY],
                                 len(self.entries) + paged[REGULAR]))
        if clear and len(taken) < count:
            self.clear(clear)
        self._refill()
        for entry in taken:
            self._track(consumer, entry)
            if entry.record is not None and not consumer.manual_ack:
                self.journal.settle(entry, "acked", consumer.client.door)
        return taken

    def _track(self, c, entry):
        """Count a hand-over; a manual-ack consumer holds the entry until it settles."""
        c.delivered += 1
        self.delivered += 1
        entry.deliveries += 1
        if c.manual_ack:
            c.unacked[entry.message.id] = entry
            self._outstanding += 1
            if self.ack_timeout:
                self._ack_deadlines.append((self.broker.clock.now() + self.ack_timeout, c, entry,
                                            entry.retry))

    # -- periodic ----------------------------------------------------------------------
    def tick(self, now):
        """Ack timeouts and message expiry; called about once a second."""
        deadlines = self._ack_deadlines
        while deadlines and deadlines[0][0] <= now:
            _, consumer, entry, retry = deadlines.popleft()
            if entry.retry == retry and consumer.unacked.get(entry.message.id) is entry:
                del consumer.unacked[entry.message.id]       # this delivery, not a later one
                entry.notify("nack", consumer, "timeout")
                self.returned(consumer, entry)
        window = self.window
        for index, lane in _lanes(self, "all"):
            while True:
                while lane:
                    expires = lane[0].message.expires_at
                    if expires is None or expires > now:
                        break
                    entry = lane.popleft()
                    self.bytes -= entry.message.size
                    self.expired += 1
                    entry.notify("dropped", None, "expired")
                    self._settle(entry, "expired")
                if lane or window is None or not window.lanes[index]:
                    break
                window.refill(self)

    # -- deletion -------------------------------------------------------------------------
    def close(self):
        """Called by the broker when the queue is deleted: consumers are cancelled, what
        they held and what is stored is dropped."""
        self.deleted = True
        if self._unused_timer is not None and self._unused_timer.active():
            self._unused_timer.cancel()
        self._unused_timer = None
        for consumer in list(self.consumers):
            for entry in self._detach(consumer):
                self._outstanding -= 1
                self.dropped += 1
                entry.notify("dropped", consumer, "deleted")
                self._settle(entry, "removed")
            if consumer.on_cancel is not None:
                consumer.on_cancel(consumer)
        self.clear()
        if self.window is not None:
            self.window.close()

    def __repr__(self):
        return f"Queue({self.name!r}, mode={self.mode}, len={len(self)}, consumers={len(self.consumers)})"


def _paged(queue):
    """The regular lane's paged-out entries: flow control counts the whole backlog."""
    window = queue.window
    return window.lanes[REGULAR] if window is not None else 0


def _lanes(queue, lanes):
    """(pager lane, deque) of 'all' (or True: priority first), 'priority' or 'regular'."""
    if lanes == "priority":
        return ((PRIORITY, queue.priority),)
    if lanes == "regular":
        return ((REGULAR, queue.entries),)
    return ((PRIORITY, queue.priority), (REGULAR, queue.entries))
