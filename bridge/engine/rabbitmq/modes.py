"""Delivery modes on the cluster: one mode per queue across the fleet, and how each mode's
messages move through RabbitMQ (docs/cluster.md, "Queue modes").

- round-robin: the consumers' basic.consume on the quorum queue (RabbitMQ rotates).
- push-all: publishes are stored in the quorum queue; each consumer has a queue of its own
  (exclusive to its gateway) bound to the queue's fanout exchange `<prefix>f.<name>`, and
  every gateway holding such a consumer runs a Mover: it takes what the quorum queue holds
  and republishes it to the fanout, acking the original once RabbitMQ confirmed the copy.
  Stored while nobody consumes, to every consumer present once someone does.
- broadcast: publishes go straight to the fanout (never stored); one nobody takes is
  returned, and is then dropped (`no-consumers`), as in the core.
- pull, cache, paused, stopped: no basic.consume. Pull is basic.get on the puller's channel
  (RemoteQueue.pull); a cache publish purges the queue first, on the publishing channel.
- only-first push-all or broadcast: one consumer per message, as round-robin.

The fleet's mode of each queue is a log, the stream `<prefix>control.modes`: a record
(queue, mode) is appended when a gateway creates a queue the log does not know (a claim:
the first claim in the log holds), sets a mode, or deletes a queue (mode None). Every gateway reads the log from its start on connecting,
before its doors open (a marker record of its own says it has caught up), then follows it:
a mode another gateway set reaches every gateway, and a gateway learning of a queue takes
the fleet's mode for it, not its door's default.
"""
import uuid

from pika import BasicProperties
from twisted.internet import defer, task
from twisted.logger import Logger

from mqksbridge.bridge.engine.rabbitmq.connection import Connection
from mqksbridge.bridge.engine.rabbitmq.envelope import PREFIX
from mqksbridge.core.queue import BROADCAST, CACHE, PUSH_ALL, ROUND_ROBIN

log = Logger(namespace="mqksbridge.cluster")

FANNING = (PUSH_ALL, BROADCAST)
_QUEUE, _MODE, _CLAIM, _MARKER = (PREFIX + "queue", PREFIX + "mode", PREFIX + "claim",
                                  PREFIX + "marker")
_MOVING = 64         # copies a Mover has in flight at most
_RETRY = 1.0         # seconds between a waiting Mover's tries
_MARKS = 10         # tries of the catching-up marker, _RETRY apart
_EVERY_NODE = 255    # the log's replicas: RabbitMQ puts one on each node it has, at most


def fans_out(queue):
    """Whether each message goes to every consumer (through its queue of its own)."""
    return queue.mode in FANNING and not queue.options.get("only_first")


def pushes(queue):
    """Whether the queue hands messages to its consumers on its own."""
    return queue.mode == ROUND_ROBIN or queue.mode in FANNING


def route(queue, channel):
    """(exchange, routing key, returned_is_dropped) of a publish to `queue` in its mode,
    on `channel`: broadcast to the fanout (a return: nobody to take it, dropped), a cache
    purges first (commands on one channel run in order; a publish held while the gateway
    is disconnected does not), the rest to the quorum queue."""
    if queue.mode == BROADCAST and not queue.options.get("only_first"):
        return queue.broker.names.fanout(queue.name), "", True
    if queue.mode == CACHE and channel is not None:
        channel.queue_purge(queue.amqp_name).addErrback(
            lambda f: log.failure("clearing cache {queue}", f, queue=queue.name))
    return "", queue.amqp_name, False


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


class ModeLog:
    """The fleet's mode of every queue (module docstring): `modes` as the log says.

    A queue the log does not know takes its creator's mode at once, and the creator
    appends a claim. Every gateway reads the log in the same order, and the first record
    of a queue decides: a later claim is ignored (its gateway then follows the first),
    while a mode set on purpose and a deletion always hold.

    The log has an AMQP connection of its own: RabbitMQ 3.10 closes the whole connection
    of a stream consumer while the stream elects a new leader (a node died), which must
    not take the gateway's consumers with it."""

    def __init__(self, engine, urls):
        self.engine = engine
        self.name = engine.names.control("modes")
        self.modes = {}           # queue name -> mode, as read from the log
        self.channel = None
        self._unsent = []         # records made while disconnected
        self._marker = None       # (token, Deferred) while catching up
        self._read = defer.Deferred()   # fired once the log was read (or given up) once
        self.connection = Connection(engine.reactor, urls, self.start, self._lost,
                                     name=f"mqksbridge-modes {engine.node}")
        self.connection.start()

    def caught_up(self):
        """A Deferred fired once this gateway has read the log once (doors open then)."""
        waiting = defer.Deferred()
        self._read.addBoth(lambda result: (waiting.callback(None), result)[1])
        return waiting

    def _given_up(self):
        if not self._read.called:
            self._read.callback(None)

    def stop(self):
        return self.connection.stop()

    @defer.inlineCallbacks
    def start(self, protocol):
        """Read the log from its start; fires once this gateway's marker came back. A
        gateway that cannot read it (RabbitMQ 3.10 serves a stream over AMQP only from a
        node with a replica: one that was down when the log was made has none) says so and
        goes on with its own modes, as if alone."""
        self.channel, self._marker = None, None
        try:
            channel = yield protocol.channel()
            yield channel.queue_declare(self.name, durable=True, arguments={
                "x-queue-type": "stream", "x-initial-cluster-size": _EVERY_NODE})
            yield channel.basic_qos(prefetch_count=1000)
            deliveries, _ = yield channel.basic_consume(
                self.name, arguments={"x-stream-offset": "first"})
        except Exception as exc:
            log.warn("cannot read the mode log {log}: {why}; this gateway's queue modes "
                     "are its own until it reconnects", log=self.name, why=exc)
            self._unsent = []
            self._given_up()
            return
        self._next(deliveries, channel)
        token, caught_up = uuid.uuid4().hex, defer.Deferred()
        self._marker = (token, caught_up)
        for _ in range(_MARKS):       # a stream electing a new leader may lose a publish
            self._append(channel, {_MARKER: token})
            pause = task.deferLater(self.engine.reactor, _RETRY, lambda: None)
            pause.addErrback(lambda f: f.trap(defer.CancelledError))
            yield defer.DeferredList([caught_up, pause], fireOnOneCallback=True)
            if caught_up.called:
                pause.cancel()
                break
        else:
            log.warn("the mode log {log} does not answer; this gateway's queue modes are "
                     "its own until it reconnects", log=self.name)
            self._marker, self._unsent = None, []
            self._given_up()
            return
        self.channel = channel
        unsent, self._unsent = self._unsent, []
        for headers in unsent:
            self._append(channel, headers)
        for queue in list(self.engine.queues.values()):   # made while disconnected
            queue.apply_mode(self.mode_of(queue.name, queue.mode))
        self._given_up()

    def _next(self, deliveries, channel):
        deliveries.get().addCallbacks(self._received, lambda failure: None,
                                      callbackArgs=(deliveries, channel))

    def _received(self, received, deliveries, channel):
        self._next(deliveries, channel)
        channel.basic_ack(received.method.delivery_tag)
        headers = received.properties.headers or {}
        token = _text(headers.get(_MARKER))
        if token is not None:
            if self._marker is not None and self._marker[0] == token:
                waiting, self._marker = self._marker[1], None
                waiting.callback(None)
            return
        name, mode = _text(headers.get(_QUEUE)), _text(headers.get(_MODE))
        if name is None or (headers.get(_CLAIM) and name in self.modes):
            return
        if not mode:
            self.modes.pop(name, None)
            return
        self.modes[name] = mode
        queue = self.engine.queues.get(name)
        if queue is not None and queue.mode != mode:
            queue.apply_mode(mode)

    def mode_of(self, name, default):
        """The mode of a queue this gateway creates: the fleet's, else its own, claimed."""
        known = self.modes.get(name)
        if known is not None:
            return known
        self._record({_QUEUE: name, _MODE: default, _CLAIM: True})
        return default

    def record(self, name, mode):
        """A mode set on purpose, or None: the queue is deleted."""
        self._record({_QUEUE: name, _MODE: mode or ""})

    def _record(self, headers):
        if self.channel is None:
            if self._marker is not None or self.connection.protocol is None:
                self._unsent.append(headers)     # connecting: the log comes next
        else:
            self._append(self.channel, headers)

    def _append(self, channel, headers):
        channel.basic_publish("", self.name, b"", BasicProperties(
            headers=headers, delivery_mode=2)).addErrback(
                lambda f: log.failure("appending to the mode log", f))

    def _lost(self, reason):
        self.channel, self._marker = None, None


class Mover:
    """Push-all's stored messages to every consumer: while this gateway holds a consumer of
    the queue, it consumes the quorum queue and republishes each message to the queue's
    fanout (every consumer's queue of every gateway is bound to it), acking the original
    once RabbitMQ confirmed the copy. A copy nobody took (every consumer gone meanwhile)
    goes back to the quorum queue.

    One Mover moves at a time across the fleet, so every consumer sees the messages in
    the order the queue holds them: it moves while it holds the queue's lock, an exclusive
    queue `<prefix>mover.NAME` (RabbitMQ refuses it to every other connection, and drops
    it with its connection). The Movers of other gateways try again each second (`tick`),
    and one takes over when the moving gateway's consumers, or the gateway, are gone."""

    def __init__(self, queue):
        self.queue = queue
        self.channel = None
        self.closed = False
        self.trying = False       # a channel or a basic.consume on its way
        self.retry_at = 0.0       # not before (a refused try closes a channel: not too often)
        self.start()

    @defer.inlineCallbacks
    def start(self):
        queue = self.queue
        self.trying = True
        try:
            channel = yield queue.broker.open_channel()
            if self.closed:
                channel.close()
                return
            self.channel = channel
            yield channel.queue_declare(queue.broker.names.mover(queue.name), exclusive=True)
            yield channel.confirm_delivery()
            yield channel.basic_qos(prefetch_count=_MOVING)
            deliveries, _ = yield channel.basic_consume(queue.amqp_name)
        except Exception:
            self.channel = None   # another gateway moves (405), or no connection now
            self.retry_at = queue.broker.clock.now() + _RETRY
            return
        finally:
            self.trying = False
        self._next(deliveries)

    def tick(self, now):
        """Not moving: try again (another gateway's Mover may be gone)."""
        if (not self.closed and not self.trying and now >= self.retry_at
                and (self.channel is None or self.channel.is_closed)):
            self.start()

    def _next(self, deliveries):
        deliveries.get().addCallbacks(self._move, lambda failure: None,
                                      callbackArgs=(deliveries,))

    def _move(self, received, deliveries):
        self._next(deliveries)
        channel, tag = self.channel, received.method.delivery_tag
        if self.closed or channel is None or channel.is_closed:
            return
        copy = channel.basic_publish(self.queue.broker.names.fanout(self.queue.name), "",
                                     received.body, received.properties, mandatory=True)
        copy.addCallbacks(lambda _: channel.basic_ack(tag),
                          lambda _: channel.basic_nack(tag, requeue=True) if channel.is_open
                          else None)

    def stop(self):
        """Its channel closes: what it held unmoved goes back to the quorum queue."""
        self.closed = True
        if self.channel is not None and self.channel.is_open:
            self.channel.queue_delete(self.queue.broker.names.mover(self.queue.name))
            self.channel.close()
