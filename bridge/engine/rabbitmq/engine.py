"""RabbitMQEngine: IEngine over a RabbitMQ cluster (docs/engine.md, docs/cluster.md).

The gateway keeps the model doors read (clients, channels, streams, lifecycle events) in
this process, as the embedded engine does, and puts every queue in the cluster: a
RemoteQueue (bridge.engine.rabbitmq.queue) per quorum queue. Publishing goes through one
channel in confirm mode; every publish takes the next number of the storage barrier
(core.storage), and the barrier moves past a number once RabbitMQ confirmed it and every
earlier one, so confirmations come out in publish order whatever order RabbitMQ acks in,
and a door's batched barrier works unchanged. A publish RabbitMQ refuses (nack: a full
queue that rejects publishes; an unroutable return) is confirmed False and marked
refused on the barrier (core.storage LateBarrier) before it passes, so a door answers it as
a refusal; a nacked publish to one queue only after it was sent again a few times
(bridge.engine.rabbitmq.resend: a queue still starting nacks too). A publish RabbitMQ has
not answered when the connection goes, or made while there is none, is held and sent on
the next connection (at least once: the first copy may have got in; the message id tells
them apart), so the barrier never passes a publish RabbitMQ did not take: a door's
confirmation is RabbitMQ's publisher confirm.
"""
from functools import partial

import pika.exceptions
from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from mqksbridge.bridge.engine.interface import IEngine
from mqksbridge.bridge.engine.verbs import ConsumerVerbs
from mqksbridge.bridge.engine.rabbitmq import acks, envelope, modes, topology
from mqksbridge.bridge.engine.rabbitmq.connection import Connection
from mqksbridge.bridge.engine.rabbitmq.control import Bus
from mqksbridge.bridge.engine.rabbitmq.declare import declare_queue
from mqksbridge.bridge.engine.rabbitmq.events import FleetEvents
from mqksbridge.bridge.engine.rabbitmq.mailbox import (
    GuardedRemoteMailbox, Mailboxes, Owners, RemoteMailbox)
from mqksbridge.bridge.engine.rabbitmq.queue import RemoteQueue
from mqksbridge.bridge.engine.rabbitmq.readers import Tap, mark
from mqksbridge.bridge.engine.rabbitmq.resend import Resends
from mqksbridge.bridge.engine.rabbitmq.stream import RemoteStream
from mqksbridge.core.broker import Broker
from mqksbridge.core.storage import LateBarrier

log = Logger(namespace="mqksbridge.cluster")

MAX_HELD = 100_000   # publishes held for the next connection at most; more are refused
_REFUSALS = (pika.exceptions.NackError, pika.exceptions.UnroutableError,
             pika.exceptions.ChannelClosedByBroker)   # RabbitMQ's verdicts, not a lost link


@implementer(IEngine)
class RabbitMQEngine(ConsumerVerbs, Broker):
    """The core broker's model in this gateway, its queues in RabbitMQ.

    `urls`: the cluster's nodes (amqp://user:pass@host:port/vhost), tried in turn; `node`:
    this gateway's name; `prefix`: the fleet's names in RabbitMQ (topology.Names);
    `replicas`: each quorum queue's initial group size; `prefetch`: the window of a
    consumer without credit. `ready()` fires once connected."""

    def __init__(self, clock, urls, *, node="gateway", prefix="mqksbridge.", replicas=3,
                 prefetch=256, reactor=None, **broker_options):
        super().__init__(clock, **broker_options)
        if reactor is None:
            from twisted.internet import reactor
        self._Queue = RemoteQueue
        self.storage = LateBarrier()   # RabbitMQ's nacks come after the publish
        self._settle = None            # the storage.settle() call of this reactor turn
        self.node, self.replicas, self.prefetch = node, replicas, prefetch
        self.names = topology.Names(prefix)
        self.reactor = reactor
        self.acks = acks.Acks(self)         # producer acks waiting on other gateways
        self.connection = Connection(reactor, urls, self._opened, self._lost,
                                     name=f"mqksbridge {node}")
        self._publisher = None         # the confirm-mode channel
        self._declarer = None          # the channel declares and counts go on
        self._held = {}                # barrier number -> publish, for the next connection
        self._flying = {}              # barrier number -> publish sent, not answered yet
        self._pending = {}             # barrier number -> None (waiting) or verdict
        self._ready = []
        self._binds = {}               # queue name -> [(stream, subject, True)] until declared
        self._settling = {}            # stream name -> Deferreds of binds in flight
        self._drops = set()            # publish numbers a return drops (broadcast)
        self.resends = Resends(reactor, self._resend)   # nacked, to be sent again
        self.modes = modes.ModeLog(self, urls)   # the fleet's mode of each queue
        self.placing = None            # during answer_in_place: its consumers' Deferreds
        self.confirms = 0              # publishes RabbitMQ answered (/metrics)
        self.confirm_seconds = 0.0     # their publish-to-answer times, summed
        self.tap = Tap(self)           # what other gateways publish, for readers here
        self._fleet()
        self.connection.start()

    # -- connection -----------------------------------------------------------------------
    def ready(self):
        """A Deferred fired once the engine can publish (at once if it can)."""
        if self._publisher is not None:
            return defer.succeed(self)
        waiting = defer.Deferred()
        self._ready.append(waiting)
        return waiting

    @defer.inlineCallbacks
    def _opened(self, protocol):
        publisher = yield protocol.channel()
        yield publisher.confirm_delivery()
        self._declarer = yield protocol.channel()
        yield self.acks.start(self._declarer)
        yield self.modes.caught_up()
        self._publisher = publisher
        for stream in list(self.streams.values()):
            self._declare_stream(stream)
        for queue in list(self.queues.values()):
            self._declare(queue)
        for stream in list(self.streams.values()):
            for name, subjects in stream.bindings.items():
                self.bind(stream, name, sorted(subjects), ())
        self.tap.opened(protocol)
        for queue in list(self.queues.values()):
            for subscription in queue.subscriptions.values():
                subscription.reopen()
        self._send_held()
        yield self._fleet_opened(protocol)
        ready, self._ready = self._ready, []
        for waiting in ready:
            waiting.callback(self)

    def _lost(self, reason):
        """What was in flight is unknown: unconfirmed publishes are held for the next
        connection (pika fails each, `_failed`), deliveries are forgotten (RabbitMQ hands
        them out again)."""
        self._publisher = self._declarer = None
        self.tap.lost()
        self._fleet_lost()
        self.acks.lost()
        for queue in self.queues.values():
            declaring, queue.declared = queue.declared, defer.Deferred()
            if not declaring.called:     # publishes waiting for it wait for the next one
                queue.when_declared().addCallback(declaring.callback)
            if queue.mover is not None:
                queue.mover.stop()
                queue.mover = None
            for consumer in queue.consumers:
                if consumer.manual_ack:
                    queue.outstanding -= len(consumer.unacked)
                consumer.unacked = {}

    def answer_in_place(self, answer, work):
        """A door's subscribing `work`, its `answer` once RabbitMQ has what it asked for:
        each consumer it made consuming (basic.consume-ok, or its own queue bound) and
        every binding in flight bound (bind-ok), so that a client told it is subscribed
        gets what another gateway publishes next. The answer takes a number of the storage
        barrier, so it keeps its place among the connection's confirmations."""
        self.placing = placing = []
        try:
            work()
        finally:
            self.placing = None
        waits = placing + [op for ops in self._settling.values() for op in ops]
        if not waits:
            answer()
            return
        number = self.storage.append()
        self._pending[number] = None
        defer.DeferredList(waits).addCallback(lambda _: self._confirmed(number, True))
        self.storage.when_stored(number, answer)

    def unconfirmed(self):
        """How many publishes wait for RabbitMQ's verdict."""
        return self.storage.appended - self.storage.durable

    def open_channel(self):
        protocol = self.connection.protocol
        if protocol is None:
            return defer.fail(ConnectionError("not connected to the cluster"))
        return protocol.channel()

    def stop(self):
        """Close the connections; a Deferred fired once closed."""
        self.resends.stop()
        return defer.gatherResults([self.connection.stop(), self.modes.stop()])

    # -- the fleet: mailboxes, owners and lifecycle events across gateways ----------------
    def _fleet(self):
        """Mailboxes in RabbitMQ, their owners and lifecycle events told on the control bus
        (bridge.engine.rabbitmq.mailbox, .events, .control)."""
        self.mailboxes = Mailboxes(self)
        self._Mailbox = partial(GuardedRemoteMailbox if self.guarded else RemoteMailbox, self)
        self.bus = Bus(self)
        self.owners = Owners(self, self.bus)
        self.fleet = FleetEvents(self, self.bus)

    @defer.inlineCallbacks
    def _fleet_opened(self, protocol):
        try:
            yield self.bus.open(protocol)
        except Exception:
            log.failure("opening the control bus")
        for mailbox in list(self.mailboxes.values()):
            mailbox.reopen()

    def _fleet_lost(self):
        self.bus.lost()
        for mailbox in self.mailboxes.values():
            mailbox.lost()

    def emit(self, event, **data):
        """Broker.emit, and the event told to the other gateways (events.FleetEvents)."""
        try:
            super().emit(event, **data)
        finally:
            self.fleet.tell(event, data)

    def members(self, channel):
        """This gateway's members of `channel`, then other gateways' (told on the bus)."""
        return [client for client, _ in channel.members.values()] + \
            self.fleet.members_elsewhere(channel.name)

    def emit_here(self, event, **data):
        """Broker.emit to this gateway's listeners only."""
        super().emit(event, **data)

    # -- declaring ------------------------------------------------------------------------
    def queue(self, name, create=True, **options):
        queue = self.queues.get(name)
        if queue is None and create:
            queue = super().queue(name, create, **options)
            target = topology.dead_letter_target(name, queue.options)
            if target is not None:
                self.queue(target)
            if self._declarer is not None:
                self._declare(queue)
            for stream, subject, _ in self._binds.pop(name, ()):
                if subject in stream.bound_subjects(name):
                    self.bind(stream, name, [subject], [])
        return queue

    def stream(self, name, create=True):
        stream = self.streams.get(name)
        if stream is None and create:
            stream = self.streams[name] = RemoteStream(name, self.queues, self)
            if self._declarer is not None:
                self._declare_stream(stream)
        return stream

    def _declare_stream(self, stream):
        """The fanout exchange publishes go to, the direct one queues bind subjects on,
        and the exchange-to-exchange binding between them (stream.py)."""
        declarer = self._declarer
        self._track(stream, declarer.exchange_declare(stream.exchange, exchange_type="fanout",
                                                      durable=True))
        self._track(stream, declarer.exchange_declare(stream.subjects, exchange_type="direct",
                                                      durable=True))
        self._track(stream, declarer.exchange_bind(stream.subjects, stream.exchange))

    def settled(self, stream):
        """A Deferred fired once the declares and binds of `stream` in flight are done."""
        return defer.DeferredList(list(self._settling.get(stream.name, ())))

    def _track(self, stream, operation):
        """A declare or bind of `stream` in flight: its publishes wait for it (a publish
        right after a bind reaches the newly bound queue, as in the core)."""
        flight = self._settling.setdefault(stream.name, [])
        flight.append(operation)

        def done(result):
            flight.remove(operation)
            if not flight:
                self._settling.pop(stream.name, None)
            return None
        operation.addBoth(done)

    def bind(self, stream, queue_name, added, removed):
        """Bind (and unbind) a queue to subjects of a stream in RabbitMQ, once both exist
        there (a binding may name a queue before it is declared: MQKS rebind)."""
        queue = self.queues.get(queue_name)
        changes = [(subject, True) for subject in added] + [(s, False) for s in removed]
        if self._declarer is not None and queue is None:   # perhaps another gateway's
            for subject, on in changes:
                self._track(stream, self._bind_by_name(queue_name, stream, subject, on))
        if queue is None:            # bound before it is declared; a gone one lost its own
            self._binds.setdefault(queue_name, []).extend(
                (stream, subject, True) for subject in added)
            return
        if self._declarer is None:   # bound again from stream.bindings once connected
            return
        for subject, on in changes:
            operation = queue.when_declared().addCallback(self._bind_now, stream, subject, on)
            self._track(stream, operation)

    def _bind_now(self, queue, stream, subject, on):
        if queue is None or self._declarer is None:
            return None
        verb = self._declarer.queue_bind if on else self._declarer.queue_unbind
        return verb(queue.amqp_name, stream.subjects,
                    routing_key=topology.routing_key(subject)).addErrback(
            lambda f: log.failure("binding {queue} to {stream}", f, queue=queue.name,
                                  stream=stream.name))

    @defer.inlineCallbacks
    def _bind_by_name(self, queue_name, stream, subject, on):
        """(Un)bind a queue this gateway has not declared, which another gateway may have:
        on a channel of its own, once the stream's exchange is declared (RabbitMQ closes the
        channel with 404 when no gateway has the queue yet: the binding then waits for this
        gateway to declare it, as in the core, where it routes once the queue exists)."""
        yield self.settled(stream)
        try:
            channel = yield self.open_channel()
            verb = channel.queue_bind if on else channel.queue_unbind
            yield verb(self.names.queue(queue_name), stream.subjects,
                       routing_key=topology.routing_key(subject))
            channel.close()
        except pika.exceptions.ChannelClosedByBroker as refused:
            if refused.reply_code != 404:
                log.failure("binding {queue} to {stream}", queue=queue_name, stream=stream.name)
        except Exception:
            log.failure("binding {queue} to {stream}", queue=queue_name, stream=stream.name)

    def publish_to_stream(self, stream, message, gateway=None):
        """One copy of `message` to the stream's exchange, through the barrier like every
        publish (RabbitMQ drops it if no queue of any gateway is bound: not a refusal);
        `gateway`: this gateway's id in its headers, when its readers' queue may bring it
        back here (readers.Tap skips it)."""
        if self._full():
            self.counters["refused"] += 1
            return False
        try:
            properties, body = envelope.encode(message, self.clock.now())
        except ValueError:           # text AMQP cannot carry: refused, the barrier unharmed
            self.counters["refused"] += 1
            return False
        if gateway is not None:
            mark(properties, gateway)
        key = topology.routing_key(message.subject)
        number = self.storage.append()
        self._pending[number] = None
        flight = self._settling.get(stream.name)
        if flight:
            defer.DeferredList(list(flight)).addCallback(
                lambda _: self._send_to(stream.exchange, key, number, properties, body, False))
        else:
            self._send_to(stream.exchange, key, number, properties, body, False)
        return True

    def arguments_of(self, queue):
        return topology.queue_arguments(self.names, queue.name,
                                        dict(queue.options, mode=queue.mode),
                                        self.replicas, queue.attrs)

    @defer.inlineCallbacks
    def _declare(self, queue):
        """Declare the queue on a channel of its own (RabbitMQ closes a channel whose
        declare it refuses). A queue another gateway declared first with other options
        (406 PRECONDITION_FAILED) is taken as the cluster has it: its options stay the
        first declarer's, and this gateway publishes to it and consumes from it."""
        declared = queue.declared
        protocol = self.connection.protocol
        ok = None
        try:
            channel = yield protocol.channel()
            yield channel.exchange_declare(self.names.fanout(queue.name),
                                           exchange_type="fanout", durable=True)
            channel = yield declare_queue(channel, protocol.channel, queue.amqp_name,
                                          self.arguments_of(queue), queue.name)
            ok = queue
            if channel.is_open:
                channel.close()
        except Exception:
            if not protocol.is_open:     # lost: _lost hands `declared` on to the next
                return
            log.failure("declaring {queue} on the cluster", queue=queue.name)
        if not declared.called:
            declared.callback(ok)        # None: its publishes are refused

    def delete_queue(self, name):
        queue = self.queues.get(name)
        deleted = super().delete_queue(name)
        if deleted:
            self.modes.record(name, None)
        if deleted and self._declarer is not None:
            self._declarer.queue_delete(queue.amqp_name).addErrback(
                lambda f: log.failure("deleting {queue}", f, queue=name))
            self._declarer.exchange_delete(self.names.fanout(name)).addErrback(
                lambda f: log.failure("deleting {queue}'s fanout", f, queue=name))
        return deleted

    def purge(self, queue):
        if self._declarer is not None:
            self._declarer.queue_purge(queue.amqp_name)

    @defer.inlineCallbacks
    def refresh(self):
        """Ask RabbitMQ how many ready messages each queue holds (their `len`)."""
        for queue in list(self.queues.values()):
            if self._declarer is None or not queue.declared.called or queue.deleted:
                continue
            frame = yield self._declarer.queue_declare(queue.amqp_name, passive=True)
            queue.count = frame.method.message_count

    def busy(self):
        """Whether a publish waits for its confirm, or a consumer's basic.consume or
        cancel or a readers' queue bind is in flight."""
        return bool(self.unconfirmed()) or bool(self._settling) or bool(self.tap.pending) \
            or any(s.busy for q in self.queues.values() for s in q.subscriptions.values())

    @defer.inlineCallbacks
    def barrier(self):
        """Once nothing is busy: the lengths read again, then a round trip on the readers'
        queue's channel and every consumer's, so that what RabbitMQ counted as handed out
        has arrived."""
        yield self.refresh()
        yield self.tap.round_trip()
        for queue in list(self.queues.values()):
            for subscription in list(queue.subscriptions.values()):
                yield subscription.round_trip()

    def tick(self, now=None):
        super().tick(now)
        self.bus.prune(self.clock.now() if now is None else now)
        self.acks.tick(self.clock.now())
        if self._declarer is not None:
            self.refresh().addErrback(lambda f: log.failure("counting queues", f))

    # -- publishing -----------------------------------------------------------------------
    def publish(self, queue, message, publisher=None, observer=None, confirm=False):
        """IEngine.publish: the confirmation is RabbitMQ's publisher confirm (a quorum
        queue confirms once a majority of its replicas has the message on disk)."""
        if isinstance(queue, str):
            queue = self.queue(queue)
        encoded = None
        if queue.refusal(message) is None and not self._full():
            encoded = self._encode(message)
        if encoded is None:
            queue.dropped += 1
            self.counters["refused"] += 1
            return defer.succeed(False) if confirm else False
        queue.received += 1
        number = self.storage.append()
        self._pending[number] = None
        if observer is not None:
            self.acks.ask(number, message, observer, encoded[0])
        queue.declared.addCallback(self._send, number, *encoded)
        if not confirm:
            return True
        confirmed = defer.Deferred()
        self.storage.when_stored(number, lambda: confirmed.callback(
            not self.storage.refused_in(number - 1, number)), since=number - 1)
        return confirmed

    def _encode(self, message):
        """(properties, body), or None when AMQP cannot carry the message (text that is
        not UTF-8: an MQKS event may be any bytes). Before the publish takes its place in
        the confirmation order: one that raised after would hold every later one."""
        try:
            return envelope.encode(message, self.clock.now())
        except UnicodeError:
            return None

    def _send(self, queue, number, properties, body):
        if queue is not None and queue.binding:     # a consumer's queue is on its way
            defer.DeferredList(list(queue.binding)).addCallback(
                lambda _: self._send(queue, number, properties, body))
        elif queue is None:
            self._confirmed(number, False)
        else:
            exchange, key, dropped = modes.route(queue, self._publisher)
            self._send_to(exchange, key, number, properties, body, True, dropped)
        return queue

    def _send_to(self, exchange, key, number, properties, body, mandatory, dropped=False):
        """basic.publish, its confirm the verdict of `number` (a nack or, `mandatory`, a
        message no queue takes: refused, or with `dropped` (broadcast) taken and dropped:
        nobody was there to take it); without a connection it is held for the next."""
        if dropped:
            self._drops.add(number)
        publish = (exchange, key, properties, body, mandatory)
        channel = self._publisher
        if channel is None:
            self._held[number] = publish
            return
        self._flying[number] = publish
        sent = self.reactor.seconds()
        try:
            acked = channel.basic_publish(exchange, key, body, properties,
                                          mandatory=mandatory)
        except (UnicodeError, TypeError, ValueError):   # a header value AMQP cannot carry
            log.failure("publish {number} cannot be sent: refused", number=number)
            return self._answered(None, number, sent, False)
        acked.addCallbacks(self._answered, self._failed, (number, sent), None, (number, sent))

    def _answered(self, _, number, sent, ok=True):
        self._flying.pop(number, None)
        self._drops.discard(number)
        self.resends.answered(number)
        self.confirms += 1
        self.confirm_seconds += self.reactor.seconds() - sent
        self._confirmed(number, ok)

    def _failed(self, failure, number, sent):
        """A refusal is the verdict; a connection lost before the answer holds the
        publish for the next connection (RabbitMQ may or may not have it)."""
        if failure.check(pika.exceptions.UnroutableError) and number in self._drops:
            self.acks.refused(number, "no-consumers")      # broadcast: nobody took it
            return self._answered(None, number, sent, True)
        if failure.check(pika.exceptions.NackError):
            publish = self._flying.get(number)
            if publish is not None and publish[0] == "" and self.resends.take(number, publish):
                del self._flying[number]         # to one queue: sent again (resend)
                return None
        if failure.check(*_REFUSALS):
            return self._answered(None, number, sent, False)
        publish = self._flying.pop(number, None)
        if publish is not None:
            self._held[number] = publish
            if self._publisher is not None and self._publisher.is_open:   # a new one
                self._send_held()
        return None

    def _send_held(self):
        """On a new connection: the held publishes, in order, once the streams' exchanges
        are declared again."""
        held, self._held = self._held, {}
        flight = [d for ds in self._settling.values() for d in ds]

        def send(_=None):
            for number in sorted(held):
                self._resend(number, held[number])
        if flight:
            defer.DeferredList(flight).addCallback(send)
        else:
            send()

    def _resend(self, number, publish):
        exchange, key, properties, body, mandatory = publish
        self._send_to(exchange, key, number, properties, body, mandatory)

    def _full(self):
        """Whether no more publishes can be held while the connection is down."""
        return self._publisher is None and self.unconfirmed() >= MAX_HELD

    def _confirmed(self, number, ok):
        """RabbitMQ's verdict on publish `number`; the barrier moves past every number
        up to the first still waiting; the refusals it passes are kept until the turn
        after (storage.settle), when every door has asked about its publish."""
        if number not in self._pending:
            return
        self._pending[number] = ok
        if not ok:
            self.storage.refuse(number)
            self.counters["refused"] += 1
            self.acks.refused(number, "full")
        passed = self.storage.durable
        while self._pending.get(passed + 1) is not None:
            passed += 1
            del self._pending[passed]
        if passed > self.storage.durable:
            self.storage.stored(passed)
            if self.storage.refusals and self._settle is None:
                self._settle = self.reactor.callLater(0, self._settled)

    def _settled(self):
        self._settle = None
        self.storage.settle()
