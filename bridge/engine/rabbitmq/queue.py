"""A queue of the cluster, as the doors see a core queue.

RemoteQueue stands for one quorum queue: a door calls the public methods it calls on a
core queue (`put_message`, `hand_run`, `refusal`, `len`, `lengths`, `mode`, `consumers`,
`attrs`), and core consumers attach to it as they do to a core queue. What it holds lives in
RabbitMQ; its length is the ready count RabbitMQ last reported (`RabbitMQEngine.refresh`:
a periodic sweep, and on demand). Each consumer is a basic.consume on a channel of its own
(Subscription), so one consumer's channel error never stops another's deliveries and
closing that channel hands back whatever it held. What each mode does in RabbitMQ (which
queue a consumer consumes, where a publish goes) is bridge.engine.rabbitmq.modes; the
fleet agrees on each queue's mode through its mode log.
"""
from twisted.internet import defer
from twisted.logger import Logger

from mqksbridge.bridge.engine.rabbitmq import envelope, modes
from mqksbridge.core.guarded import check_put
from mqksbridge.core.message import Entry, Message
from mqksbridge.core.queue import MODES, PUSH_ALL, ROUND_ROBIN, STOPPED

log = Logger(namespace="mqksbridge.cluster")

_OPTIONS = ("ack_timeout", "max_messages", "max_bytes", "max_message_size", "wait_for_ack",
            "only_first", "when_unused", "overflow", "max_deliveries", "dead_letter")


class Delivery(Entry):
    """An entry RabbitMQ handed to one consumer: its delivery tag, the consumer tag it
    came under, and when (the gateway's ack timeout)."""

    __slots__ = ("tag", "ctag", "at")


class RemoteQueue:
    def __init__(self, broker, name, mode=ROUND_ROBIN, *, attrs=None, **options):
        unknown = set(options) - set(_OPTIONS)
        if unknown:
            raise ValueError(f"unknown queue option {sorted(unknown)[0]!r}")
        self.broker = broker
        self.name = name
        self.amqp_name = broker.names.queue(name)
        self.mode = broker.modes.mode_of(name, mode)   # the fleet's, if it has one
        self.options = {key: value for key, value in options.items() if value is not None}
        self.attrs = attrs if attrs is not None else {}
        self.channel = None            # the core Channel that groups it (by name)
        self.consumers = []
        self.deleted = False
        self.held = False              # core.flow: the gateway never holds publishers
        self.count = 0                 # ready messages, as RabbitMQ last said
        self.received = self.delivered = self.acked = self.requeued = self.dropped = 0
        self.expired = self.dead_lettered = 0   # RabbitMQ's own (not seen by the gateway)
        self.journal = None            # durability is the cluster's: no journal here
        self.outstanding = 0           # manual-ack deliveries not yet settled
        self.subscriptions = {}        # consumer -> Subscription
        self.mover = None              # push-all: moves stored messages to the consumers
        self.binding = []              # consumers' own queues being bound: publishes wait
        self.declared = defer.Deferred()   # fires once RabbitMQ has the queue

    def __getattr__(self, name):
        if name in _OPTIONS:
            return self.options.get(name)
        raise AttributeError(name)

    # -- describing -----------------------------------------------------------------------
    def __len__(self):
        return self.count

    def lengths(self):
        """(priority, regular): a quorum queue has one lane."""
        return (0, self.count)

    @property
    def limited(self):
        return self.mode == STOPPED or self.options.get("max_message_size") is not None

    def refusal(self, message):
        """What the gateway refuses before RabbitMQ sees the message (a full queue's
        refusal is RabbitMQ's: the publish is nacked)."""
        if self.mode == STOPPED:
            return STOPPED
        limit = self.options.get("max_message_size")
        if limit is not None and message.size > limit:
            return "too-large"
        return None

    def when_declared(self):
        """A Deferred of its own fired once RabbitMQ has the queue (`declared` passes the
        queue on to the publishes chained on it; waiting on it directly would not)."""
        waiting = defer.Deferred()

        def fire(queue):
            waiting.callback(queue)
            return queue
        self.declared.addCallback(fire)
        return waiting

    def arguments(self):
        return self.broker.arguments_of(self)

    # -- configuration --------------------------------------------------------------------
    def configure(self, **options):
        for key, value in options.items():
            if key not in _OPTIONS:
                raise ValueError(f"unknown queue option {key!r}")
            self.options[key] = value
        self.dispatch()

    def set_mode(self, mode):
        """A door's mode change: this gateway's queue at once, every other gateway's
        through the mode log."""
        if mode not in MODES:
            raise ValueError(f"unknown queue mode {mode!r}")
        self.apply_mode(mode)
        if mode == STOPPED:
            self.broker.purge(self)
        self.broker.modes.record(self.name, mode)

    def apply_mode(self, mode):
        """The fleet's mode for this queue (what entering it clears, the gateway that set
        it cleared in RabbitMQ)."""
        self.mode = mode
        self.dispatch()

    def clear(self, lanes="all"):
        """Drop what is stored (one lane: both lanes are the one)."""
        self.broker.purge(self)

    def pull(self, consumer, count, lifo=False, clear=False, left=None):
        """A Deferred of up to `count` entries for `consumer` (basic.get on its channel:
        RabbitMQ answers later, where the core answers in the call). A quorum queue hands
        out oldest first only: `lifo` is not kept; `clear` purges what is left; `left`
        gets (0, ready) after each entry, from RabbitMQ's get-ok."""
        return self.subscriptions[consumer].take(count, clear, left)

    # -- putting --------------------------------------------------------------------------
    def put_message(self, message, observer=None, publisher=None):
        """False (and counted) when refused here; otherwise on its way to RabbitMQ. On a
        gateway with users, Denied first unless the publisher may put it here (as
        core.guarded checks)."""
        if self.broker.guarded:
            check_put(self.name, message, publisher)
        return self.broker.publish(self, message, publisher, observer)

    def hand_run(self, messages):
        """A run goes one put at a time here (the core's run shortcut: none)."""
        return 0

    def put_routed(self, message, observer=None, publisher=None):
        """A stream's routing: checked at the stream, not again here (as in the core)."""
        return self.broker.publish(self, message, publisher, observer)

    # -- consumers ------------------------------------------------------------------------
    def add_consumer(self, consumer):
        """Denied (before anything changes) unless its client may consume this queue."""
        principal = consumer.client.principal
        if principal is not None:
            registered = consumer.client.consumers.get(consumer.id) is consumer
            principal.check_consumer(consumer.client, self.name, 0 if registered else 1)
        consumer.queue = self
        self.consumers.append(consumer)
        self.subscriptions[consumer] = Subscription(self, consumer)

    def remove_consumer(self, consumer):
        """Its channel closes: RabbitMQ hands back what it held (delivery count + 1)."""
        if consumer.queue is not self:
            return
        self.consumers.remove(consumer)
        consumer.active = False
        consumer.queue = None
        self.outstanding -= len(consumer.unacked) if consumer.manual_ack else 0
        consumer.unacked = {}
        self.subscriptions.pop(consumer).close()
        self.dispatch()

    def dispatch(self):
        """Credit or the mode changed: each consumer's basic.consume follows, and the
        Mover runs while push-all has a consumer here."""
        for subscription in list(self.subscriptions.values()):
            subscription.sync()
        moving = (self.mode == PUSH_ALL and modes.fans_out(self) and not self.deleted
                  and any(s.own is not None for s in self.subscriptions.values()))
        if moving and self.mover is None:
            self.mover = modes.Mover(self)
        elif not moving and self.mover is not None:
            self.mover.stop()
            self.mover = None

    def settled(self, consumer, entry, positive=True):
        self.acked += 1
        if consumer.manual_ack:
            self.outstanding -= 1
        self.subscriptions[consumer].settle(entry, positive)

    def returned(self, consumer, entry):
        """Back to RabbitMQ (nack, requeue): out again with its delivery count + 1, or
        dead-lettered past the queue's delivery limit."""
        if consumer.manual_ack:
            self.outstanding -= 1
        self.requeued += 1
        self.subscriptions[consumer].settle(entry, None)

    # -- time -----------------------------------------------------------------------------
    def tick(self, now):
        """Ack timeouts: a delivery held past the queue's `ack_timeout` goes back."""
        if self.mover is not None:
            self.mover.tick(now)
        timeout = self.options.get("ack_timeout")
        if timeout is None:
            return
        for consumer in list(self.consumers):
            late = [mid for mid, entry in consumer.unacked.items()
                    if entry.at + timeout <= now]
            for message_id in late:
                consumer.reject(message_id)

    def close(self):
        """Deleted: consumers go, RabbitMQ drops the queue."""
        self.deleted = True
        for consumer in list(self.consumers):
            if consumer.on_cancel is not None:
                consumer.on_cancel(consumer)
            self.remove_consumer(consumer)

    def __repr__(self):
        return f"RemoteQueue({self.name!r})"


class Subscription:
    """One core consumer's basic.consume, on a channel of its own.

    AMQP 0-9-1 has a prefetch window, not credit: a window frees a place on every ack, a
    credit never does. So a consumer with credit consumes with prefetch = its credit, and
    before it settles anything delivered under that basic.consume (which would let
    RabbitMQ send one more than the credit) the basic.consume is cancelled; once
    RabbitMQ's cancel-ok says nothing more comes under it, a new one starts with the
    credit left. Commands on one channel are handled in order, so RabbitMQ sees the
    cancel before the settlement. A consumer without credit consumes with the engine's
    `prefetch` as its window and is never cancelled.

    What it consumes follows the queue's mode (bridge.engine.rabbitmq.modes): the quorum
    queue in round-robin; in push-all and broadcast a queue of its own (exclusive to this
    gateway's connection, deleted with the consumer) bound to the queue's fanout; nothing
    in the other modes, where a pull takes with basic.get on its channel."""

    def __init__(self, queue, consumer):
        self.queue, self.consumer = queue, consumer
        self.engine = queue.broker
        self.channel = None
        self.ctag = None           # the live basic.consume, or None
        self.consuming = None      # the AMQP queue it consumes
        self.own = None            # its queue of its own, once declared and bound
        self.binding = None        # while its own queue is on its way (queue.binding)
        self.placed = None         # a door's answer waits for it (answer_in_place)
        if self.engine.placing is not None:
            self.placed = defer.Deferred()
            self.engine.placing.append(self.placed)
        self.pulls = defer.DeferredLock()   # one pull at a time (one basic.get in flight)
        self.waiting = []          # pulls waiting for its channel
        self.expect = 0            # deliveries it may still bring (its prefetch, less those)
        self.busy = False          # opening the channel, a consume or a cancel in flight
        self.closed = False
        if modes.fans_out(queue):
            self._binding()
        self.open()

    def _binding(self):
        """This gateway's publishes to the queue wait until its own queue is bound, as a
        consumer is in place at once in the core."""
        if self.binding is None:
            self.binding = waiting = defer.Deferred()
            self.queue.binding.append(waiting)
            waiting.addBoth(lambda _: self.queue.binding.remove(waiting))

    def _bound(self):
        waiting, self.binding = self.binding, None
        if waiting is not None:
            waiting.callback(None)

    @defer.inlineCallbacks
    def open(self):
        self.busy = True
        try:
            yield self.queue.when_declared()
            channel = yield self.engine.open_channel()
        except Exception as exc:
            log.warn("no channel for a consumer of {queue}: {why}", queue=self.queue.name,
                     why=exc)
            self.busy = False
            self._bound()
            self._in_place()
            return
        if self.closed:
            channel.close()
            self._bound()
            return
        self.channel = channel
        self.busy = False
        waiting, self.waiting = self.waiting, []
        for pull in waiting:
            pull.callback(channel)
        self.sync()

    def reopen(self):
        """The connection came back: a new channel, a new basic.consume."""
        self.channel, self.ctag, self.busy, self.own = None, None, False, None
        if not self.closed:
            self.open()

    def window(self):
        """How many deliveries a new basic.consume may take (0: none)."""
        consumer = self.consumer
        if self.closed or not consumer.active or not modes.pushes(self.queue):
            return 0
        if consumer.credit is None:
            return self.engine.prefetch
        return max(0, consumer.credit)

    def sync(self):
        """Bring the basic.consume in line with the window: none at 0, else one whose
        prefetch is the credit (a credit that grew restarts it)."""
        if self.closed:
            self._in_place()
        if self.busy or self.channel is None or self.closed:
            return
        want = self.window()
        fans_out = modes.fans_out(self.queue)
        if want and fans_out and self.own is None:
            self._declare_own()
            return
        source = self.own if fans_out else self.queue.amqp_name
        if self.ctag is not None:
            if (want == 0 or self.consuming != source
                    or (self.consumer.credit is not None and want > self.expect)):
                self._cancel()
            else:
                self._in_place()
            return
        if want:
            self._consume(want, source)
        else:
            self._in_place()

    def _in_place(self):
        """Consuming as its window says (or given up): a door's answer may go."""
        placed, self.placed = self.placed, None
        if placed is not None:
            placed.callback(None)

    @defer.inlineCallbacks
    def _declare_own(self):
        """Its queue of its own, bound to the queue's fanout (push-all, broadcast)."""
        self.busy = True
        self._binding()
        try:
            frame = yield self.channel.queue_declare("", exclusive=True)
            own = frame.method.queue
            yield self.channel.queue_bind(own, self.engine.names.fanout(self.queue.name))
        except Exception as exc:
            log.warn("no queue of its own for a consumer of {queue}: {why}",
                     queue=self.queue.name, why=exc)
            self.busy = False
            self._bound()
            self._in_place()
            return
        self.busy = False
        self.own = own
        self.queue.dispatch()
        self._bound()

    @defer.inlineCallbacks
    def _consume(self, prefetch, source):
        self.busy = True
        try:
            yield self.channel.basic_qos(prefetch_count=prefetch)
            deliveries, ctag = yield self.channel.basic_consume(source)
        except Exception as exc:
            log.warn("cannot consume {queue}: {why}", queue=self.queue.name, why=exc)
            self.busy = False
            self._in_place()
            return
        self.busy = False
        if self.closed:
            return
        self.ctag, self.expect, self.consuming = ctag, prefetch, source
        self._next(deliveries, ctag)
        self.sync()

    def _next(self, deliveries, ctag):
        got = deliveries.get()
        got.addCallbacks(self._received, lambda failure: None, callbackArgs=(deliveries, ctag))

    def _received(self, received, deliveries, ctag):
        self._next(deliveries, ctag)
        self.deliver(received, ctag)

    def _cancel(self):
        ctag, self.ctag = self.ctag, None
        self.busy = True

        def done(_):
            self.busy = False
            self.sync()
        self.channel.basic_cancel(ctag).addBoth(done)

    def _entry(self, received, ctag):
        """The core entry of what RabbitMQ handed over, its observer the publisher's."""
        method = received.method
        shared = method.exchange == self.engine.names.fanout(self.queue.name)
        message, retry = envelope.decode(received.properties, received.body, Message,
                                         method.routing_key if method.exchange and not shared
                                         else "")
        entry = Delivery(message, retry, self.engine.acks.reporter(received.properties))
        entry.tag, entry.ctag, entry.at = (method.delivery_tag, ctag,
                                           self.queue.broker.clock.now())
        entry.deliveries, entry.shared = 1, shared
        return entry

    def take(self, count, clear, left):
        """Pull: up to `count` basic.gets, each held as a delivery (a Deferred list), once
        its channel is open, one pull after the other."""
        if self.channel is not None and self.channel.is_open:
            return self.pulls.run(self._take, count, clear, left)
        waiting = defer.Deferred()
        self.waiting.append(waiting)
        return waiting.addCallback(lambda _: self.pulls.run(self._take, count, clear, left))

    @defer.inlineCallbacks
    def _take(self, count, clear, left):
        taken, channel, queue = [], self.channel, self.queue
        consumer = self.consumer
        while len(taken) < count and not self.closed:
            got = yield channel.basic_get(queue.amqp_name)
            if got is None:
                break
            entry = self._entry(got, None)
            taken.append(entry)
            queue.delivered += 1
            consumer.delivered += 1
            if consumer.manual_ack:
                consumer.unacked[entry.message.id] = entry
                queue.outstanding += 1
            else:
                self.settle(entry, True)
            if left is not None:
                left.append((0, got.method.message_count))
        if clear:
            yield channel.queue_purge(queue.amqp_name)
        return taken

    def deliver(self, received, ctag):
        if self.closed:
            return
        consumer, queue = self.consumer, self.queue
        entry = self._entry(received, ctag)
        message = entry.message
        if ctag == self.ctag:
            self.expect -= 1
        if consumer.credit is not None:
            consumer.credit -= 1
            if consumer.credit <= 0 and self.ctag == ctag:
                self._cancel()
        queue.delivered += 1
        consumer.delivered += 1
        if consumer.manual_ack:
            consumer.unacked[message.id] = entry
            queue.outstanding += 1
        else:
            self.settle(entry, True)
        consumer.deliver(consumer, entry)
        if entry.observer is not None:
            entry.notify("sent", consumer)
            if not consumer.manual_ack:
                entry.notify("ack", consumer)

    def settle(self, entry, positive):
        """ack (True), nack for good (False) or hand back (None)."""
        if self.channel is None or self.channel.is_closed:
            return       # the channel went: RabbitMQ hands it out again
        if (self.consumer.credit is not None and entry.ctag is not None
                and entry.ctag == self.ctag):
            self._cancel()
        if positive:
            self.channel.basic_ack(entry.tag)
        else:   # a copy of every consumer's own, handed back, is settled for it alone
            self.channel.basic_nack(entry.tag, requeue=positive is None and not entry.shared)

    def round_trip(self):
        """A Deferred fired once RabbitMQ answered a request on this consumer's channel:
        whatever it had handed this consumer before is delivered by then (the ready
        count it reported earlier counted it as handed)."""
        if self.busy or self.channel is None or not self.channel.is_open:
            return defer.succeed(None)
        return self.channel.queue_declare(self.queue.amqp_name, passive=True)

    def close(self):
        """Its channel closes (and its queue of its own goes: what that held was every
        consumer's copy, settled for this one alone)."""
        self.closed = True
        self._bound()
        self._in_place()
        if self.channel is not None and self.channel.is_open:
            if self.own is not None:
                self.channel.queue_delete(self.own)
            self.channel.close()
