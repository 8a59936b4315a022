"""Stream readers and router bindings across gateways.

A stream's readers (Malamute STREAM-READ: regular-expression patterns, which no RabbitMQ
binding can express) and its router bindings (Twino routers: every subject, one of them
or all by the route method) are kept and matched in the gateway that holds them, as the
core does. For them to see what other gateways and plain AMQP clients publish, each
gateway has one queue of its own, `<prefix>r.<gateway id>` (classic, exclusive: it goes
with the gateway's connection, so a dead gateway leaves nothing behind), bound to the
fanout exchange `<prefix>s.<stream>` of each stream where it holds readers or router
bindings, and consumed on a channel of its own (the Tap).

A gateway hands its own publishes to its readers at once, as the core does; those come
back through its queue too, marked with its id (header `x-mqksbridge-gateway`, set when
the stream has readers or router bindings here), and are skipped: each reader gets each
message once, and one publisher's messages in the order it published them (one channel
publishes them, one queue brings them). A stream nobody reads is bound by no gateway's
queue: its publish is the one basic.publish it was.

At most once: what is in a gateway's queue when its connection goes is lost with the
queue (a reconnected gateway reads from then on), as a core reader misses what was
published while it was away.
"""
import secrets

from twisted.internet import defer
from twisted.python.failure import Failure
from twisted.logger import Logger

from mqksbridge.bridge.engine.rabbitmq import envelope
from mqksbridge.core.message import Message

log = Logger(namespace="mqksbridge.cluster")

GATEWAY = envelope.PREFIX + "gateway"


def mark(properties, gateway):
    """Say in an encoded message's headers which gateway published it."""
    if properties.headers is None:
        properties.headers = {GATEWAY: gateway}
    else:
        properties.headers[GATEWAY] = gateway


class Tap:
    """This gateway's queue of the streams its readers and router bindings read.

    `watch(stream)` after a stream's readers or router bindings change binds the queue to
    the stream's exchange or unbinds it; binds and unbinds run one after another, each
    doing what the stream needs when its turn comes, so quick changes end in the right
    state. Deliveries are acked once per reactor turn (one ack for all, `multiple`)."""

    def __init__(self, engine):
        self.engine = engine
        self.gateway = f"{engine.node}.{secrets.token_hex(4)}"
        self.queue = engine.names.readers(self.gateway)
        self.channel = None
        self.bound = set()             # streams whose exchange the queue is bound to
        self.received = self.skipped = 0
        self.pending = 0                   # binds and unbinds waiting or in flight
        self._turn = defer.succeed(None)   # the bind or unbind in progress, then the next
        self._connection = 0               # which connection `pending` counts for
        self._acked = None                 # (channel, last tag) to ack this turn, or None

    @defer.inlineCallbacks
    def opened(self, protocol):
        """A new connection: the queue declared and consumed, the streams bound again."""
        self.channel, self.bound, self._turn = None, set(), defer.succeed(None)
        self.pending, self._connection = 0, self._connection + 1
        try:
            channel = yield protocol.channel()
            yield channel.queue_declare(self.queue, exclusive=True, auto_delete=True,
                                        arguments={"x-queue-type": "classic"})
            yield channel.basic_qos(prefetch_count=self.engine.prefetch)
            deliveries, _ = yield channel.basic_consume(self.queue)
        except Exception:
            log.failure("the stream readers' queue {queue}", queue=self.queue)
            return
        self.channel = channel
        self._next(channel, deliveries)
        for stream in list(self.engine.streams.values()):
            self.watch(stream)

    def lost(self):
        """The connection went, and the queue with it."""
        self.channel, self.bound, self._acked = None, set(), None

    # -- binding --------------------------------------------------------------------------
    def watch(self, stream):
        if self.channel is None:
            return              # bound when the connection comes
        self.pending += 1
        self._turn.addCallback(lambda _: self._sync(stream)).addBoth(
            self._synced, self._connection)

    def _synced(self, result, connection):
        if connection == self._connection:
            self.pending -= 1
        if isinstance(result, Failure):
            log.failure("binding the readers' queue", result)

    @defer.inlineCallbacks
    def _sync(self, stream):
        channel = self.channel
        wanted = stream.read_here()
        if channel is None or wanted == (stream.name in self.bound):
            return
        try:
            yield self.engine.settled(stream)      # its exchange declared
            if wanted:
                yield channel.queue_bind(self.queue, stream.exchange, routing_key="")
                self.bound.add(stream.name)
            else:
                yield channel.queue_unbind(self.queue, stream.exchange, routing_key="")
                self.bound.discard(stream.name)
        except Exception:
            log.failure("binding the readers' queue to {stream}", stream=stream.name)

    def round_trip(self):
        """A Deferred fired once RabbitMQ answered a request on the queue's channel: what
        the queue held before has been delivered by then (engine.barrier)."""
        channel = self.channel
        if channel is None or not channel.is_open:
            return defer.succeed(None)
        return channel.queue_declare(self.queue, passive=True)

    # -- receiving ------------------------------------------------------------------------
    def _next(self, channel, deliveries):
        deliveries.get().addCallbacks(self._received, lambda failure: None,
                                      callbackArgs=(channel, deliveries))

    def _received(self, received, channel, deliveries):
        self._next(channel, deliveries)
        if channel is not self.channel:
            return
        if self._acked is None:
            self.engine.reactor.callLater(0, self._ack)
        self._acked = (channel, received.method.delivery_tag)
        try:
            self.deliver(received)
        except Exception:
            log.failure("delivering a message of another gateway to this one's readers")

    def deliver(self, received):
        """Another gateway's (or an AMQP client's) publish, to this gateway's readers and
        router bindings of its stream; this gateway's own are skipped."""
        method, properties = received.method, received.properties
        headers = properties.headers
        if headers is not None and headers.get(GATEWAY) == self.gateway:
            self.skipped += 1
            return
        stream = self.engine.streams.get(self.engine.names.core_stream(method.exchange))
        if stream is None:
            return
        self.received += 1
        message, _ = envelope.decode(properties, received.body, Message, method.routing_key)
        stream.deliver_remote(message)

    def _ack(self):
        acked, self._acked = self._acked, None
        if acked is not None and acked[0] is self.channel and self.channel.is_open:
            acked[0].basic_ack(acked[1], multiple=True)
