"""Producer acks across gateways: an entry observer (a Twino producer waiting for `sent` or
`relay`) hears its message's fate wherever the message is delivered and settled.

The publishing gateway keeps the observer under the publish's number (a ticket) and names
itself in two headers of the message: its reply queue (exclusive to its connection) and the
ticket. The gateway that hands the message to a consumer puts a Reporter in the delivered
entry's observer slot, so the core's notifications ('sent', then one verdict: 'ack', 'nack'
or 'dropped') go back to that reply queue as small messages, or straight to the observer
when the publisher is on the same gateway (then with the consumer and its receipt
themselves). Across gateways the observer sees a RemoteConsumer (its client's id and door,
whether it acks by hand) and no receipt.

A ticket that can no longer be answered is answered 'dropped': the publish was refused, its
message expired, or the connection (and with it the reply queue) was lost.
"""
from pika import BasicProperties
from twisted.logger import Logger

from mqksbridge.bridge.engine.rabbitmq.envelope import PREFIX
from mqksbridge.core.message import Entry

log = Logger(namespace="mqksbridge.cluster")

ACK_TO, TICKET = PREFIX + "ack-to", PREFIX + "ticket"
_EVENT, _REASON = PREFIX + "event", PREFIX + "reason"
_CLIENT, _DOOR, _MANUAL = PREFIX + "client", PREFIX + "door", PREFIX + "manual-ack"


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


class RemoteClient:
    __slots__ = ("id", "door")

    def __init__(self, client_id, door):
        self.id, self.door = client_id, door


class RemoteConsumer:
    """A consumer on another gateway, as a producer-ack observer sees it."""

    __slots__ = ("client", "manual_ack")

    def __init__(self, client_id, door, manual_ack):
        self.client = RemoteClient(client_id, door)
        self.manual_ack = manual_ack


class Acks:
    """The tickets this gateway waits on, and its reply queue."""

    def __init__(self, engine):
        self.engine = engine
        self.tickets = {}         # publish number -> Entry (the observer in its slot)
        self.reply_to = None      # this connection's reply queue

    def start(self, channel):
        """Declare and consume this connection's reply queue (a Deferred)."""
        def consume(frame):
            self.reply_to = frame.method.queue
            return channel.basic_consume(self.reply_to, auto_ack=True)

        def follow(result):
            self._next(result[0])
        return channel.queue_declare("", exclusive=True).addCallback(consume).addCallback(
            follow)

    def ask(self, number, message, observer, properties):
        """A publish whose observer waits: its ticket, and the headers naming it."""
        if self.reply_to is None:
            return
        self.tickets[number] = Entry(message, 0, observer)
        headers = properties.headers if properties.headers is not None else {}
        headers[ACK_TO], headers[TICKET] = self.reply_to, number
        properties.headers = headers

    def refused(self, number, reason):
        """The publish was refused, or nobody could take it: its observer hears 'dropped'."""
        entry = self.tickets.pop(number, None)
        if entry is not None:
            entry.notify("dropped", None, reason)

    def answer(self, number, event, consumer, reason, receipt):
        entry = self.tickets.get(number)
        if entry is None:
            return
        if event != "sent":
            del self.tickets[number]
        entry.notify(event, consumer, reason, receipt)

    def reporter(self, properties):
        """The observer for an entry delivered here, or None when nobody waits on it."""
        headers = properties.headers
        if not headers or ACK_TO not in headers:
            return None
        return Reporter(self, _text(headers[ACK_TO]), int(headers[TICKET]))

    def _next(self, deliveries):
        deliveries.get().addCallbacks(self._received, lambda failure: None,
                                      callbackArgs=(deliveries,))

    def _received(self, received, deliveries):
        self._next(deliveries)
        headers = received.properties.headers or {}
        try:
            number = int(headers[TICKET])
            consumer = RemoteConsumer(_text(headers.get(_CLIENT)), _text(headers.get(_DOOR)),
                                      bool(headers.get(_MANUAL)))
            self.answer(number, _text(headers[_EVENT]), consumer,
                        _text(headers.get(_REASON)) or None, None)
        except Exception:
            log.failure("a producer ack from another gateway")

    def tick(self, now):
        """Tickets whose message expired: nobody will take it now."""
        late = [n for n, entry in self.tickets.items()
                if entry.message.expires_at is not None and entry.message.expires_at <= now]
        for number in late:
            self.refused(number, "expired")

    def lost(self):
        """The reply queue went with the connection: nothing more will answer."""
        self.reply_to = None
        for number in sorted(self.tickets):
            self.refused(number, None)


class Reporter:
    """The observer of an entry delivered on this gateway whose publisher waits for its
    fate: to the publisher's gateway (or, on this one, to its ticket directly)."""

    __slots__ = ("acks", "to", "number")

    def __init__(self, acks, to, number):
        self.acks, self.to, self.number = acks, to, number

    def __call__(self, event, entry, consumer, reason, receipt):
        acks = self.acks
        if self.to == acks.reply_to:
            acks.answer(self.number, event, consumer, reason, receipt)
            return
        channel = acks.engine._publisher
        if channel is None:
            return           # the publisher's gateway answers it when its ticket expires
        client = consumer.client if consumer is not None else None
        headers = {TICKET: self.number, _EVENT: event, _REASON: reason or "",
                   _CLIENT: client.id if client is not None else "",
                   _DOOR: client.door if client is not None else "",
                   _MANUAL: bool(consumer is not None and consumer.manual_ack)}
        channel.basic_publish("", self.to, b"", BasicProperties(headers=headers)).addErrback(
            lambda f: None)    # its gateway is gone, and its producer with it
