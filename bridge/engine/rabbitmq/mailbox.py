"""Mailboxes of the fleet: each a quorum queue, one live owner across every gateway.

Mailbox `NAME` (a Malamute address, a Twino client id) is the quorum queue
`<prefix>m.NAME`, declared with `x-single-active-consumer`: mail sent on any gateway is
published there (confirmed like any publish) and kept while its owner is away; the gateway
holding the live owner consumes it and hands it over, acking each message once handed
(mail has no acknowledgement of its own: the hand-over is the settlement, as in the core).
A message the owner could not take (it vanished) is left unacked, so RabbitMQ hands it out
again once the owner's consumer goes. With single active consumer RabbitMQ delivers to one
consumer at a time, whatever two gateways believe for a moment.

Who owns an address is each gateway's view of the fleet, kept by the control bus
(control.Bus): a gateway whose client takes an address tells every gateway (`owner`);
one whose client lets it go tells them too (`released`); on another gateway the
address's mailbox then holds a stand-in owner (RemoteClient), so that the core's claim
rule (core.mailbox: another door's live owner keeps it; within a door a newer session of
the same user takes it over) judges it as it judges a local one. A gateway hearing that
an owner of its own was taken over elsewhere lets it go and emits `mailbox-taken`
(mailbox=, client=) for its door to end that session. The owners of a gateway that died
are forgotten once its control queue is gone (control.Bus.prune, on the broker's sweep).
"""
from collections import deque

from twisted.internet import defer
from twisted.logger import Logger

from mqksbridge.bridge.engine.rabbitmq import envelope
from mqksbridge.bridge.engine.rabbitmq.declare import declare_queue
from mqksbridge.core.guarded import GuardedMailbox
from mqksbridge.core.mailbox import DELIVERED, DROPPED, STORED, Mailbox
from mqksbridge.core.message import Message
from mqksbridge.core.queue import ROUND_ROBIN

log = Logger(namespace="mqksbridge.cluster")

RAW, RAW_DOOR = envelope.PREFIX + "raw", envelope.PREFIX + "raw-door"
OWNER, RELEASED, DROPPED_BOX = "mailbox-owner", "mailbox-released", "mailbox-dropped"
TAKEN = "mailbox-taken"          # the local event a door ends a taken-over session on
RETRY = 1.0                      # seconds before a failed consume is tried again


class RemotePrincipal:
    """Who a remote owner acts as, as far as the claim rule asks (same_user)."""
    __slots__ = ("user", "anonymous")

    def __init__(self, user, anonymous):
        self.user, self.anonymous = user, anonymous

    def same_user(self, other):
        return (other is not None and not self.anonymous and not other.anonymous
                and other.user == self.user)


class RemoteClient:
    """A client of another gateway (`instance`), as the claim rule, the doors' checks and
    lifecycle listeners read one: a mailbox's remote owner, an event's client."""
    __slots__ = ("id", "name", "type", "door", "principal", "instance", "mailbox", "attrs",
                 "paused", "consumers", "connected_at")

    def __init__(self, instance, id, door, name="", type="", user=None, anonymous=None,
                 connected_at=0.0):
        self.instance, self.id, self.door, self.name, self.type = instance, id, door, name, type
        self.connected_at = connected_at
        self.principal = None if user is None and anonymous is None else \
            RemotePrincipal(user, anonymous)
        self.mailbox, self.attrs, self.paused, self.consumers = None, {}, False, {}

    def __repr__(self):
        return f"RemoteClient({self.id!r}, door={self.door!r}, at={self.instance!r})"


def describe(mailbox, owner):
    """The `owner` notice of a local owner."""
    principal = owner.principal
    return {"mailbox": mailbox.name, "claim": mailbox.claimed[0], "at": mailbox.claimed[1],
            "client": owner.id, "door": owner.door,
            "name": owner.name, "type": owner.type,
            "user": principal.user if principal is not None else None,
            "anonymous": principal.anonymous if principal is not None else None}


def with_raw(message):
    """Mail keeps the bytes its door made for a receiver of that door (a Twino direct
    message, acknowledgement or response frame; a Malamute DELIVER), as the core hands them
    over: they ride in two headers of ours, which `raw_back` takes out again."""
    if message.raw is None or message.raw_door is None:
        return message
    headers = dict(message.headers or {})
    headers[RAW], headers[RAW_DOOR] = message.raw, message.raw_door
    return Message(message.id, message.subject, message.frames, headers, message.sender,
                   message.origin, message.tracker, message.priority, message.expires_at,
                   message.created_at, None, None, message.size)


def raw_back(message):
    headers = message.headers
    if headers and RAW_DOOR in headers:
        message.raw_door = headers.pop(RAW_DOOR)
        message.raw = headers.pop(RAW).encode("utf-8", "surrogateescape")
        message.headers = headers or None
    return message


class RemoteMailbox(Mailbox):
    """A core mailbox whose mail lives in RabbitMQ (module docstring). `stored` holds
    only what was delivered to this gateway while its owner was paused; `received` and
    `dropped` count this gateway's sends (the engine's publish counts them, as a queue's)."""

    mode = ROUND_ROBIN                   # published to as a plain queue (modes.route),
    binding = ()                         # with no consumer queues to wait for (engine._send)

    def __init__(self, engine, name, limit_bytes=None):
        super().__init__(name, limit_bytes)
        self.engine = engine
        self.amqp_name = f"{engine.names.prefix}m.{name}"
        self.received = 0
        self.declared = defer.Deferred()    # fires with self once RabbitMQ has the queue
        self.declaring = False
        self.tags = deque()                 # the delivery tag of each message in `stored`
        self.consuming = None               # the channel the owner's consumer is on
        self.opening = False                # that channel and consume in flight
        self.attempt = 0                    # which connection's: lost() counts up
        self.retry = None                   # the DelayedCall of a failed consume's retry
        self.claimed = (0, 0.0, "")         # the owner's claim: (number, time, gateway)

    def arguments(self):
        args = {"x-queue-type": "quorum", "x-single-active-consumer": True,
                "x-quorum-initial-group-size": int(self.engine.replicas)}
        if self.limit_bytes is not None:
            args["x-max-length-bytes"] = int(self.limit_bytes)
            args["x-overflow"] = "reject-publish"
        return args

    # -- RabbitMQ -------------------------------------------------------------------------
    def when_declared(self):
        """A Deferred fired with self (None: RabbitMQ refused it) once declared."""
        if not self.declaring:
            self.declaring = True
            self._declare()
        waiting = defer.Deferred()

        def fire(result):
            waiting.callback(result)
            return result
        self.declared.addCallback(fire)
        return waiting

    @defer.inlineCallbacks
    def _declare(self):
        declared, ok = self.declared, None
        try:
            channel = yield self.engine.open_channel()
            channel = yield declare_queue(channel, self.engine.open_channel, self.amqp_name,
                                          self.arguments(), f"mailbox {self.name}")
            ok = self
            channel.close()
        except Exception:
            log.failure("declaring mailbox {name} on the cluster", name=self.name)
        if not declared.called:
            declared.callback(ok)

    def lost(self):
        """The connection went: declared again, consumed again, on the next one (a consume
        still opening on the old one is let go: `attempt`)."""
        self.declared, self.declaring = defer.Deferred(), False
        self.consuming = None
        self.opening = False
        self.attempt += 1
        if self.retry is not None and self.retry.active():
            self.retry.cancel()          # an engine that stops leaves no timer behind
        self.retry = None
        self._forget_received()

    def reopen(self):
        if self.deliver is not None:
            self._consume()

    def refusal(self, message):
        """The engine's publish asks; the size limit is RabbitMQ's (x-max-length-bytes)."""
        return None

    def send(self, message, sender=None):
        """Published to the mailbox's queue: STORED (DELIVERED when the owner is live,
        which RabbitMQ then hands it to), DROPPED when the gateway cannot publish."""
        if not self.declaring:
            self.when_declared()
        if not self.engine.publish(self, with_raw(message), sender):
            return DROPPED
        return DELIVERED if self.owner is not None else STORED

    def hand_run(self, messages):
        """Never at once: every send is published (the door sends them one by one)."""
        return 0

    @defer.inlineCallbacks
    def _consume(self):
        """The live owner's consumer, on a channel of its own (closing it hands back what
        was not handed over). One that fails (RabbitMQ refused the declare or the consume)
        is tried again RETRY seconds later while the owner is here; one cut short by a
        lost connection is opened again by `reopen` on the next."""
        if self.opening:
            return
        self.opening, attempt = True, self.attempt
        try:
            declared = yield self.when_declared()
            if declared is None:
                raise ConnectionError("the cluster did not declare its queue")
            if self.deliver is None or self.consuming is not None:
                return
            channel = yield self.engine.open_channel()
            yield channel.basic_qos(prefetch_count=self.engine.prefetch)
            deliveries, _ = yield channel.basic_consume(self.amqp_name)
        except Exception as exc:
            if attempt == self.attempt and self.engine.connection.protocol is not None:
                log.warn("cannot consume mailbox {name}: {why}; trying again in {delay} s",
                         name=self.name, why=exc, delay=RETRY)
                self.opening = False
                self.declared, self.declaring = defer.Deferred(), False
                self.retry = self.engine.reactor.callLater(RETRY, self._again, attempt)
            return               # (not connected: `reopen` consumes on the next connection)
        finally:
            if attempt == self.attempt:
                self.opening = False
        if attempt != self.attempt or self.deliver is None or self.consuming is not None:
            if channel.is_open:          # let go meanwhile, or of a lost connection
                channel.close()
            return
        self.consuming = channel
        self._next(deliveries, channel)

    def _again(self, attempt):
        self.retry = None
        if attempt == self.attempt and self.deliver is not None and self.consuming is None:
            self._consume()

    def _next(self, deliveries, channel):
        deliveries.get().addCallbacks(self._received, lambda failure: None,
                                      callbackArgs=(deliveries, channel))

    def _received(self, received, deliveries, channel):
        if self.consuming is not channel:
            return
        self._next(deliveries, channel)
        message = raw_back(envelope.decode(received.properties, received.body, Message)[0])
        self.stored.append(message)
        self.tags.append(received.method.delivery_tag)
        self.bytes += message.size
        self.flush()

    def _stop_consuming(self):
        channel, self.consuming = self.consuming, None
        self._forget_received()
        if channel is not None and channel.is_open:
            channel.close()         # RabbitMQ hands back what was not acked

    def _forget_received(self):
        self.stored.clear()
        self.tags.clear()
        self.bytes = 0

    # -- owners ---------------------------------------------------------------------------
    def attach(self, owner, deliver, assigned=False, deliver_run=None):
        """The core's claim rule against local and remote owners; the fleet hears of it.
        Mail comes from RabbitMQ one message at a time: `deliver_run` is not used."""
        self.claim(owner, assigned)
        previous = self.owner
        if previous is not None and previous is not owner:
            previous.mailbox = None
        self.owner, self.deliver = owner, deliver
        owner.mailbox = self
        self.claimed = (self.claimed[0] + 1, self.engine.clock.now(), self.engine.bus.instance)
        self.engine.bus.send(OWNER, **describe(self, owner))
        if self.consuming is None:
            self._consume()
        self.flush()

    def detach(self, owner):
        if self.owner is not owner:
            return
        self.owner = self.deliver = None
        owner.mailbox = None
        self._stop_consuming()
        self.engine.bus.send(RELEASED, mailbox=self.name, client=owner.id)

    def flush(self):
        """Hand what RabbitMQ delivered to the local owner, in order, while it can take
        it; each handed message is acked (a restored one is not)."""
        owner = self.owner
        channel = self.consuming
        while self.stored and self.deliver is not None and not owner.paused \
                and self.owner is owner and self.consuming is channel:
            message, tag = self.stored.popleft(), self.tags.popleft()
            self.bytes -= message.size
            self.delivered += 1
            self._handing = message
            try:
                self.deliver(self, message)
            finally:
                handed, self._handing = self._handing is message, None
            if handed and channel.is_open:
                channel.basic_ack(tag)

    def restore(self, message):
        """Not handed over (the owner vanished): left unacked, so RabbitMQ hands it out
        again once the owner's consumer goes."""
        self.delivered -= 1
        self._handing = None

    def tick(self, now):
        """RabbitMQ expires mail (the AMQP expiration of each message)."""

    # -- what other gateways say ----------------------------------------------------------
    def owned_elsewhere(self, owner, claim, at):
        """Another gateway's client took the address: a local owner is let go (its door
        hears `mailbox-taken`). Claims are ordered by their number (one more than the
        last claim the claiming gateway knew of), then by their time, then by gateway:
        of two claims made before either gateway heard of the other (at once, or a client
        moving to another gateway before the notice of its old session arrived there) the
        newer wins on every gateway, and a notice of an older claim changes nothing."""
        claimed = (claim, at, owner.instance)
        if claimed < self.claimed:
            return
        self.claimed = claimed
        previous = self.owner
        self.owner, self.deliver = owner, None
        owner.mailbox = self
        if isinstance(previous, RemoteClient) or previous is None:
            return
        previous.mailbox = None
        self._stop_consuming()
        self.engine.emit_here(TAKEN, mailbox=self, client=previous)

    def released_elsewhere(self, instance, client_id):
        owner = self.owner
        if isinstance(owner, RemoteClient) and owner.instance == instance \
                and owner.id == client_id:
            self.owner = None


class GuardedRemoteMailbox(GuardedMailbox, RemoteMailbox):
    """With users: each send checked against its sender (core.guarded), then published."""


class Mailboxes(dict):
    """The engine's `mailboxes`: a door dropping an empty mailbox (`del`) drops it from
    every gateway's view. Its queue stays in RabbitMQ: a quorum queue cannot be deleted
    only if empty (RabbitMQ refuses `if-empty` for one), and deleting it unconditionally
    could lose mail confirmed meanwhile."""

    def __init__(self, engine):
        super().__init__()
        self.engine = engine

    def __delitem__(self, name):
        mailbox = self[name]
        super().__delitem__(name)
        mailbox._stop_consuming()
        self.engine.bus.send(DROPPED_BOX, mailbox=name)


class Owners:
    """The control bus's mailbox notices, applied to the engine's mailboxes."""

    def __init__(self, engine, bus):
        self.engine, self.bus = engine, bus
        bus.on_gone(self.gone)
        bus.on(OWNER, self.owner)
        bus.on(RELEASED, self.released)
        bus.on(DROPPED_BOX, self.dropped)
        bus.on("hello", self.hello)

    def owner(self, data, sender):
        mailbox = self.engine.mailbox(data["mailbox"])
        mailbox.owned_elsewhere(RemoteClient(sender, data["client"], data["door"],
                                             data["name"], data["type"], data["user"],
                                             data["anonymous"]), data["claim"], data["at"])

    def released(self, data, sender):
        mailbox = self.engine.mailboxes.get(data["mailbox"])
        if mailbox is not None:
            mailbox.released_elsewhere(sender, data["client"])

    def dropped(self, data, sender):
        name = data["mailbox"]
        mailbox = self.engine.mailboxes.get(name)
        if mailbox is not None and mailbox.deliver is None and not mailbox.stored:
            self.engine.mailboxes.pop(name, None)      # (not `del`: that tells the fleet)

    def hello(self, data, sender):
        """A gateway (re)connected: it hears who owns what here."""
        for mailbox in list(self.engine.mailboxes.values()):
            if mailbox.deliver is not None:
                self.bus.send(OWNER, **describe(mailbox, mailbox.owner))

    def gone(self, instance):
        """A gateway died: its addresses are free."""
        for mailbox in list(self.engine.mailboxes.values()):
            owner = mailbox.owner
            if isinstance(owner, RemoteClient) and owner.instance == instance:
                mailbox.owner = None
