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

The interface every door uses: put (put_message, put), take (pull; pushing modes hand
out on their own), settle (settled), release (returned, remove_consumer), tick, and
describe (len, lengths, stored_entries, the counters). What a mode decides lives in its
family's module (core.queues: round_robin, push, base), the stored entries in a Backlog,
limits in a Capacity, ack deadlines and the when-unused timer in core.queues.timers; the
queue holds them together and keeps the hand-over accounting every mode shares (hand,
track). Attributes without an underscore that are not in the interface (dispatching,
turn, filtered, outstanding) are the mode families' view of the queue.

A queue with a journal (attach_journal) is durable: it tells the journal every entry it
takes, requeues and settles (core.storage), takes no fast path that would skip that, and
with `max_deliveries` set moves an entry handed back unsettled that many times to its
`dead_letter` queue instead of requeueing it.

Time-based work (ack timeouts, message expiry) happens in tick(), which the broker calls
from one periodic sweep: no timer per message.
"""
from mqksbridge.core.limits import REJECT
from mqksbridge.core.message import Entry
from mqksbridge.core.permissions import CONSUME, QUEUE, check
from mqksbridge.core.queues.backlog import Backlog
from mqksbridge.core.queues.base import (BROADCAST, CACHE, MODES, PAUSED, PULL, PUSH_ALL,
                                         ROUND_ROBIN, STOPPED, Cache, Paused, Pull, Stopped)
from mqksbridge.core.queues.capacity import Capacity
from mqksbridge.core.queues.pull import take
from mqksbridge.core.queues.push import Broadcast, PushAll
from mqksbridge.core.queues.round_robin import RoundRobin
from mqksbridge.core.queues.timers import AckDeadlines, UnusedTimer

__all__ = ("BROADCAST", "CACHE", "MODES", "PAUSED", "PULL", "PUSH_ALL", "ROUND_ROBIN",
           "STOPPED", "Queue", "QueueError")

DELIVERY = {ROUND_ROBIN: RoundRobin(), PUSH_ALL: PushAll(), BROADCAST: Broadcast(),
            PULL: Pull(), CACHE: Cache(), PAUSED: Paused(), STOPPED: Stopped()}
_OPTIONS = ("ack_timeout", "max_messages", "max_bytes", "max_message_size", "wait_for_ack",
            "only_first", "when_unused", "overflow", "max_deliveries", "dead_letter")


class QueueError(Exception):
    """A put the queue refuses; `reason` is one of 'stopped', 'full', 'too-large'."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def _limit(name):
    """A Capacity setting, read and set on the queue (configure sets them by name)."""
    def get(queue):
        return getattr(queue.capacity, name)

    def set(queue, value):
        setattr(queue.capacity, name, value)
    return property(get, set)


class Queue:
    max_messages = _limit("max_messages")
    max_bytes = _limit("max_bytes")
    max_message_size = _limit("max_message_size")
    overflow = _limit("overflow")          # what a put into a full queue does (core.limits)

    def __init__(self, broker, name, mode=ROUND_ROBIN, *, ack_timeout=None, max_messages=None,
                 max_bytes=None, max_message_size=None, wait_for_ack=False, only_first=False,
                 when_unused=None, overflow=REJECT, max_deliveries=None, dead_letter=None,
                 attrs=None, shortcuts=True):
        self.broker = broker
        self.name = name
        self.channel = None            # the Channel that groups it (Broker claims it by name)
        self.backlog = Backlog()
        self.entries, self.priority = self.backlog.entries, self.backlog.priority
        self.capacity = Capacity(max_messages, max_bytes, max_message_size, overflow)
        self.deadlines = AckDeadlines()
        self.unused = UnusedTimer(broker.clock)
        self.consumers = []
        self.attrs = attrs if attrs is not None else {}   # door-private settings
        self.deleted = False
        self.held = False              # publishers are held for this queue (core.flow)
        self.delivered_at_hold = self.stalled_at = None
        self.flow_limit = broker.flow.limit
        self.turn = 0                  # the consumer whose turn it is (round-robin)
        self.filtered = 0              # consumers with a filter
        self.dispatching = False
        self.outstanding = 0           # manual-ack deliveries not yet settled
        self.holds = None              # told (consumer, +n/-n) of manual-ack holds (core.guarded)
        self.received = self.delivered = self.acked = self.requeued = 0
        self.dropped = self.expired = self.dead_lettered = 0
        self.journal = None            # core.storage: set once the queue is durable
        self.mode = mode
        self.delivery = DELIVERY[mode]
        self.ack_timeout = ack_timeout
        self.wait_for_ack = wait_for_ack
        self.only_first = only_first
        self.when_unused = when_unused
        self.shortcuts = shortcuts     # False: every put and dispatch takes the plain path
        self.max_deliveries = max_deliveries   # handed back unsettled this often: dead letter
        self.dead_letter = dead_letter         # the queue dead letters go to
        self._shortcut = self._run_shortcut = None
        self._refresh()
        if broker.windows is not None:
            self.backlog.window = broker.windows(self)

    @property
    def bytes(self):
        """Content bytes stored, paged-out ones included."""
        return self.backlog.bytes

    @property
    def window(self):
        """The storage window (core.window), or None: everything stored is resident."""
        return self.backlog.window

    def configure(self, **options):
        """Change options live (limits, timeouts, wait-for-ack...); re-dispatches."""
        for key, value in options.items():
            if key not in _OPTIONS:
                raise ValueError(f"unknown queue option {key!r}")
            setattr(self, key, value)
        self._refresh()
        self.dispatch()

    def _refresh(self):
        """Which shortcut put_message may take (the mode's, for the queue as configured),
        and whether any put may be refused (`limited`: doors skip `refusal` otherwise).
        The shortcuts must give exactly what the plain path gives; tests hold them equal
        by running the same operations on a queue made with shortcuts=False."""
        bounded = self.capacity.bounded
        self.limited = bounded or self.delivery.refuses is not None
        unlimited = (self.shortcuts and not self.only_first and not self.wait_for_ack
                     and not bounded)
        self._shortcut = self.delivery.shortcut(self, unlimited)
        self._run_shortcut = self.delivery.run_shortcut(self, unlimited)

    def attach_journal(self, journal):
        """Make the queue durable: `journal` (core.storage) records what it holds now and
        everything it takes from here on. Of the fast paths only the direct hand-over
        stays on, and it tells the journal as put() does."""
        backlog = self.backlog
        window = backlog.window
        if window is not None:             # its paged entries go to the journal too
            backlog.page_all_in()
            window.close()
        self.journal = journal
        self._refresh()
        for entry in self.live_entries():
            if entry.record is None:
                journal.put(entry)
        if window is not None:
            backlog.set_window(self.broker.windows(self))

    def restore(self, entries):
        """Entries read back from the journal, in order, at the back of their lanes (a
        broker starting up: they are recorded already, and nobody consumes yet)."""
        self.backlog.restore(entries)
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

    def settle_record(self, entry, reason, door=None):
        """The journal lets go of an entry the queue is done with (`door`: that of the
        consumer that settled it, when one did)."""
        if entry.record is not None:
            self.journal.settle(entry, reason, door)

    def held_elsewhere(self, entry):
        """Whether a shared entry is still held unacked by some consumer."""
        mid = entry.message.id
        return any(c.unacked.get(mid) is entry for c in self.consumers)

    # -- configuration ----------------------------------------------------------------
    def set_mode(self, mode):
        """Change the delivery mode live; stopped clears, cache keeps the latest, the
        others re-dispatch."""
        if mode not in MODES:
            raise ValueError(f"unknown queue mode {mode!r}")
        self.mode = mode
        self.delivery = DELIVERY[mode]
        self._refresh()
        self.delivery.enter(self)
        self.dispatch()

    # -- describing ---------------------------------------------------------------------
    def __len__(self):
        return len(self.backlog)

    def lengths(self):
        """(priority, regular) stored entries, paged-out ones included."""
        return self.backlog.lengths()

    def take_stored(self):
        """Take every stored entry, in order, priority lane first (paged-out ones a batch
        at a time): a backlog moved elsewhere (admin)."""
        return self.backlog.take_all()

    def stored_entries(self):
        """Every stored entry in delivery order, lane by lane, paged-out ones read back
        without taking them (admin views and tests: it reads the pager's files)."""
        return self.backlog.stored()

    def refusal(self, message):
        """Why a put of `message` would be refused, or None."""
        refuses = self.delivery.refuses
        if refuses is not None:
            return refuses
        return self.capacity.refusal(message, self.backlog)

    # -- putting ----------------------------------------------------------------------
    def put_message(self, message, observer=None, publisher=None):
        """Stream entry point: False (and counted) when refused, never raises.

        `publisher` is the Client whose input brought the message: the one flow control
        holds when this put congests the queue (core.flow). The common cases (plain
        round-robin with the next consumer ready, filtered round-robin with a matching
        consumer ready, plain push-all with every consumer ready, no backlog) hand the
        message straight over without touching the deque: the mode's shortcut.
        """
        entry = Entry(message, 0, observer)
        shortcut = self._shortcut
        if (shortcut is not None and not self.entries and not self.priority
                and not self.dispatching and shortcut(self, entry, observer)):
            return True
        return self.put(entry, False, publisher)

    def put_run(self, messages, publisher=None):
        """put_message for each of `messages` in order, without observers; returns how many
        the queue took. The mode's run shortcut may hand them over at once (a lone consumer
        that takes runs); tests hold it equal to the puts one by one."""
        if self.hand_run(messages):
            return len(messages)
        put = self.put_message
        return sum([put(message, None, publisher) for message in messages])

    def hand_run(self, messages):
        """put_run's shortcut alone: all of `messages` handed over at once (their count), or
        0 with nothing changed. Never raises: a door that must know which put of a run
        failed (a guarded queue's Denied) tries this, then puts one by one."""
        run = self._run_shortcut
        if (run is not None and not self.entries and not self.priority
                and not self.dispatching and run(self, messages)):
            return len(messages)
        return 0

    # What a stream hands on: its publisher's permission was checked at the stream, so
    # this put is never checked again (a guarded queue checks put_message: core.guarded).
    put_routed = put_message

    def put(self, entry, strict=False, publisher=None, forward=True):
        """Add an entry; with strict=True a refusal raises QueueError instead of dropping.
        `forward=False`: the entry is another queue's dead letter, so a full queue here drops
        its oldest rather than dead-letter them on (no ping-pong between two queues)."""
        if self.limited:
            message = entry.message
            reason = self.refusal(message)
            if reason == "full" and self.capacity.overflow != REJECT and not strict:
                reason = self.capacity.make_room(self, message, forward)
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
        self.delivery.accept(self, entry, publisher)
        return True

    # -- what consumers hand back ---------------------------------------------------------
    def returned(self, consumer, entry):
        """`consumer` hands `entry` back unsettled (it rejected it, missed its ack timeout,
        or could not take it): a shared entry is settled for it alone, any other goes to
        the back of the queue with retry + 1."""
        if consumer.manual_ack:
            if self.holds is not None:
                self.holds(consumer, -1)
            self.outstanding -= 1
        if entry.shared:
            if entry.record is not None and not self.held_elsewhere(entry):
                self.settle_record(entry, "removed")
            if self.wait_for_ack:
                self.dispatch()
        else:
            self._requeue(entry, consumer.client.door)

    def _departed(self, consumer, entry):
        """What `consumer`, gone, held unacked. A shared entry waits for no verdict of it:
        its observer hears 'dropped' only when no remaining consumer holds it either."""
        self.outstanding -= 1
        if not entry.shared:
            self._requeue(entry, consumer.client.door)
            return
        if (entry.observer is not None or entry.record is not None) \
                and not self.held_elsewhere(entry):
            entry.notify("dropped", consumer, "consumer-gone")
            self.settle_record(entry, "removed")
        if self.wait_for_ack:
            self.dispatch()

    def _requeue(self, entry, door=None):
        """Back of the queue with retry + 1, as a put in the current mode would go (the
        mode's requeue); a stopped or deleted queue drops it."""
        if self.deleted or self.mode == STOPPED:
            self.dropped += 1
            entry.notify("dropped", None, "deleted" if self.deleted else "stopped")
            self.settle_record(entry, "removed")
            return
        if self.max_deliveries is not None and entry.retry + 1 >= self.max_deliveries:
            self._dead(entry, door)
            return
        entry.retry += 1
        self.requeued += 1
        if entry.record is not None:
            self.journal.requeued(entry)
        self.delivery.requeue(self, entry)

    def _dead(self, entry, door=None):
        """Handed out `max_deliveries` times and back again: to the dead-letter queue (a
        new entry there, its retry count kept), settled here. This hand-back counts: the
        journal and the copy say how often the message was really handed back."""
        entry.retry += 1
        if entry.record is not None:
            self.journal.requeued(entry)
        self.dead_lettered += 1
        entry.notify("nack", None, "dead-lettered")
        self.settle_record(entry, "dead-lettered", door)
        target = self.dead_letter or self.name + ".dlq"
        if target != self.name:
            self.broker.queue(target).put(Entry(entry.message, entry.retry))

    def settled(self, consumer, entry, positive=True):
        """A consumer acked (or nacked) an entry for good."""
        self.acked += 1
        self.outstanding -= 1
        if entry.record is not None and not (entry.shared and self.held_elsewhere(entry)):
            self.settle_record(entry, "acked" if positive else "nacked", consumer.client.door)
        if self.wait_for_ack:
            self.dispatch()
        if self.holds is not None and consumer.manual_ack:
            self.holds(consumer, -1)

    def clear(self, lanes="all"):
        """Drop stored entries: 'all' (or True), 'priority' or 'regular' lane only."""
        self.backlog.clear(lanes, self._cleared)

    def _cleared(self, entry):
        entry.notify("dropped", None, "cleared")
        self.settle_record(entry, "removed")

    # -- consumers --------------------------------------------------------------------
    def add_consumer(self, consumer):
        """Denied (before anything changes) unless its client may consume this queue: every
        delivery, redelivery and pull of this queue goes to consumers added here."""
        principal = consumer.client.principal
        if principal is not None:
            registered = consumer.client.consumers.get(consumer.id) is consumer
            principal.check_consumer(consumer.client, self.name, 0 if registered else 1)
        self.unused.cancel()
        consumer.queue = self
        self.consumers.append(consumer)
        if consumer.filter is not None:
            self.filtered += 1
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
            self.unused.start(self.when_unused, self._delete_unused)
        self.dispatch()

    def _detach(self, consumer):
        """Unlink a consumer; returns the entries it held unacked (None if not ours)."""
        if consumer.queue is not self:
            return None
        index = self.consumers.index(consumer)
        del self.consumers[index]
        if index < self.turn:
            self.turn -= 1
        if consumer.filter is not None:
            self.filtered -= 1
            self._refresh()
        consumer.active = False
        consumer.queue = None
        unacked, consumer.unacked = consumer.unacked, {}
        unacked = list(unacked.values())
        if unacked and consumer.manual_ack and self.holds is not None:
            self.holds(consumer, -len(unacked))
        return unacked

    def _delete_unused(self):
        if not self.consumers and not self.deleted:
            self.broker.delete_queue(self.name)

    # -- dispatching --------------------------------------------------------------------
    def dispatch(self):
        """Hand stored messages to consumers as the mode allows. Re-entrant safe."""
        if not self.dispatching and self.consumers and not self.deleted:
            self.delivery.dispatch(self)
        window = self.backlog.window
        if window is not None and window.paged:
            self._dispatch_paged(window)
        if self.held and (not self.consumers
                          or self.capacity.relieved(self.backlog, self.broker.flow.low)):
            self.broker.flow.relieved(self)

    def _dispatch_paged(self, window):
        """Page the backlog back in as consumers take it. When what is resident suits no
        ready consumer (their filters, a push-all round nobody ready takes), one more
        batch comes in past the window, until one does or the backlog is all in: a
        matching message never waits on disk behind ones nobody takes."""
        backlog = self.backlog
        while window.paged:
            if not window.refill(backlog):
                if (self.dispatching or self.deleted or self.blocked()
                        or not self.delivery.pushes
                        or not any(c.ready() for c in self.consumers)):
                    return
                window.refill(backlog, more=True)
            if not self.dispatching and self.consumers and not self.deleted:
                self.delivery.dispatch(self)

    def blocked(self):
        """Wait-for-ack holds the next message: one is unacked."""
        return self.wait_for_ack and self.outstanding > 0

    def hand(self, c, entry):
        """One push delivery: what track() does (inline: every push passes here), then the
        consumer's deliver and the observer's 'sent' (and 'ack' for an auto-ack one)."""
        if c.credit is not None:
            c.credit -= 1
        c.delivered += 1
        self.delivered += 1
        entry.deliveries += 1
        if c.manual_ack:
            c.unacked[entry.message.id] = entry
            self.outstanding += 1
            if self.ack_timeout:
                self.deadlines.start(self.broker.clock.now() + self.ack_timeout, c, entry)
        elif entry.record is not None and not entry.shared:
            self.journal.settle(entry, "acked", c.client.door)
        c.deliver(c, entry)
        observer = entry.observer
        if observer is not None:
            observer("sent", entry, c, None, None)     # Entry.notify, minus a call: no verdict
            if not c.manual_ack:
                entry.notify("ack", c)
        if self.holds is not None and c.manual_ack:
            self.holds(c, 1)

    # -- pull ---------------------------------------------------------------------------
    def pull(self, consumer, count, lifo=False, clear=False, left=None):
        """Take up to `count` entries for one requester (Twino Pull); priority first.

        `clear` (True/'all', 'priority', 'regular') empties those lanes once the last
        requested entry is taken. `left`, a list, receives (priority, regular) lengths
        after each taken entry (Twino's pull Info headers).
        """
        check(consumer.client, CONSUME, QUEUE, self.name)
        return take(self, consumer, count, lifo, clear, left)

    def track(self, c, entry):
        """Count a hand-over; a manual-ack consumer holds the entry until it settles."""
        c.delivered += 1
        self.delivered += 1
        entry.deliveries += 1
        if c.manual_ack:
            c.unacked[entry.message.id] = entry
            self.outstanding += 1
            if self.ack_timeout:
                self.deadlines.start(self.broker.clock.now() + self.ack_timeout, c, entry)
            if self.holds is not None:
                self.holds(c, 1)

    # -- periodic ----------------------------------------------------------------------
    def tick(self, now):
        """Ack timeouts and message expiry; called about once a second."""
        for consumer, entry in self.deadlines.missed(now):
            del consumer.unacked[entry.message.id]       # this delivery, not a later one
            entry.notify("nack", consumer, "timeout")
            self.returned(consumer, entry)
        self.backlog.expire(now, self.expired_one)

    def expired_one(self, entry):
        """A stored entry whose message expired, taken from its lane."""
        self.expired += 1
        entry.notify("dropped", None, "expired")
        self.settle_record(entry, "expired")

    # -- deletion -------------------------------------------------------------------------
    def close(self):
        """Called by the broker when the queue is deleted: consumers are cancelled, what
        they held and what is stored is dropped."""
        self.deleted = True
        self.unused.cancel()
        for consumer in list(self.consumers):
            for entry in self._detach(consumer):
                self.outstanding -= 1
                self.dropped += 1
                entry.notify("dropped", consumer, "deleted")
                self.settle_record(entry, "removed")
            if consumer.on_cancel is not None:
                consumer.on_cancel(consumer)
        self.clear()
        self.backlog.close()

    def __repr__(self):
        return f"Queue({self.name!r}, mode={self.mode}, len={len(self)}, consumers={len(self.consumers)})"
