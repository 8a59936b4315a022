"""The fleet's control bus: live notices every gateway hears (a mailbox's owner moved, a
client connected or joined a channel on another gateway).

One transient fanout exchange `<prefix>control.bus`; each gateway consumes it through an
auto-delete queue of its own, `<prefix>control.bus.<node>.<instance>`, which RabbitMQ
removes when the gateway's consumer goes (with its connection), so a gateway is alive
while its queue exists (`alive`: a passive declare, which RabbitMQ would refuse for an
exclusive queue of another connection even while it lives). A notice is one AMQP message:
`type` its kind, `app_id` the sending gateway's instance, the body JSON. A gateway does not hear its own notices. Notices are not
kept: a gateway that (re)connects says `hello`, and each handler of `hello` sends what a
newcomer must know. Each gateway's sweep asks RabbitMQ whether the gateways it heard from
are alive (`prune`, every PRUNE_EVERY seconds); what a gateway that died had told is
forgotten by the `on_gone` handlers.
"""
import json
import uuid

import pika
import pika.exceptions
from twisted.internet import defer
from twisted.logger import Logger

log = Logger(namespace="mqksbridge.cluster")

HELLO = "hello"
PRUNE_EVERY = 2.0                # seconds between checks for gateways that died


class Bus:
    def __init__(self, engine):
        self.engine = engine
        self.instance = f"{engine.node}.{uuid.uuid4().hex[:8]}"
        self.exchange = engine.names.prefix + "control.bus"
        self.queue = self.queue_of(self.instance)
        self.channel = None           # consuming and publishing, once open
        self.handlers = {}            # kind -> [handler(data, sender instance)]
        self.gone = []                # handler(instance) of a gateway that died
        self.known = set()            # the instances heard from, not known dead
        self.checked = None           # when prune last ran

    def queue_of(self, instance):
        return f"{self.exchange}.{instance}"

    def on(self, kind, handler):
        self.handlers.setdefault(kind, []).append(handler)

    def on_gone(self, handler):
        self.gone.append(handler)

    @defer.inlineCallbacks
    def open(self, protocol):
        """Declare the exchange and this gateway's queue, consume it, say hello."""
        channel = yield protocol.channel()
        yield channel.exchange_declare(self.exchange, exchange_type="fanout", durable=False)
        yield channel.queue_declare(self.queue, durable=False, auto_delete=True)
        yield channel.queue_bind(self.queue, self.exchange)
        deliveries, _ = yield channel.basic_consume(self.queue, auto_ack=True)
        self.channel = channel
        self._next(deliveries)
        self.send(HELLO)

    def lost(self):
        self.channel = None

    def _next(self, deliveries):
        deliveries.get().addCallbacks(self._received, lambda failure: None,
                                      callbackArgs=(deliveries,))

    def _received(self, received, deliveries):
        self._next(deliveries)
        properties = received.properties
        sender = properties.app_id
        if sender == self.instance:
            return
        self.known.add(sender)
        for handler in self.handlers.get(properties.type, ()):
            try:
                handler(json.loads(received.body), sender)
            except Exception:
                log.failure("control notice {kind} from {sender}", kind=properties.type,
                            sender=sender)

    def send(self, kind, **data):
        """Tell every other gateway; False when not connected (the notice is lost: what it
        said is sent again to whoever says hello)."""
        channel = self.channel
        if channel is None or not channel.is_open:
            return False
        channel.basic_publish(self.exchange, "", json.dumps(data).encode(),
                              pika.BasicProperties(type=kind, app_id=self.instance))
        return True

    @defer.inlineCallbacks
    def prune(self, now):
        """Forget what gateways whose control queue is gone (they died) had told."""
        if self.channel is None or (self.checked is not None
                                    and now - self.checked < PRUNE_EVERY):
            return
        self.checked = now
        for instance in sorted(self.known):
            alive = yield self.alive(instance)
            if alive or instance not in self.known:
                continue
            self.known.discard(instance)
            for handler in self.gone:
                try:
                    handler(instance)
                except Exception:
                    log.failure("forgetting gateway {instance}", instance=instance)

    @defer.inlineCallbacks
    def alive(self, instance):
        """Whether gateway `instance` is connected: its queue exists (a passive declare on
        a channel of its own, which RabbitMQ closes with 404 when it does not)."""
        try:
            channel = yield self.engine.open_channel()
        except Exception:
            return True              # cannot tell: assume it is
        try:
            yield channel.queue_declare(self.queue_of(instance), passive=True)
        except pika.exceptions.ChannelClosedByBroker as refused:
            return refused.reply_code != 404
        if channel.is_open:
            channel.close()
        return True
