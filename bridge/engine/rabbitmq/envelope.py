"""A core Message as an AMQP message, and back: what a plain AMQP client sees.

The envelope rides in documented AMQP properties where one fits, so a pika client reads
it without knowing mqksbridge:

    message_id      Message.id
    type            Message.subject
    app_id          Message.origin
    reply_to        Message.sender
    correlation_id  Message.tracker
    priority        1 for the priority lane, else unset
    timestamp       Message.created_at, whole seconds
    expiration      what is left of Message.expires_at, in milliseconds (RabbitMQ drops
                    the message then, as the core's expiry does)
    headers         Message.headers (a dict) as a table
    body            the frames joined

What a property cannot carry exactly goes in a header of our own (`x-mqksbridge-...`):
a value longer than a short string's 255 bytes, several frames (their lengths), headers
whose names are ours (`x-mqksbridge-...`), the exact creation time, and the absolute
expiry. The retry count is RabbitMQ's: a quorum queue counts each
hand-back in `x-delivery-count` (absent on a first delivery).
"""
from pika import BasicProperties

PREFIX = "x-mqksbridge-"
SHORT = 255                     # bytes in an AMQP short string
DELIVERY_COUNT = "x-delivery-count"
DELIVERY_MODE_PERSISTENT = 2
_FIELDS = (("id", "message_id"), ("subject", "type"), ("origin", "app_id"),
           ("sender", "reply_to"), ("tracker", "correlation_id"))


def encode(message, now=None):
    """(BasicProperties, body) for a core Message; `now` (the engine's clock) turns its
    absolute expiry into AMQP's relative one."""
    ours = {}
    props = {}
    for field, prop in _FIELDS:
        value = getattr(message, field)
        if not value:
            continue
        if len(value.encode()) > SHORT:
            ours[PREFIX + field] = value
        else:
            props[prop] = value
    frames = message.frames
    if len(frames) != 1:
        ours[PREFIX + "frames"] = [len(f) for f in frames]
    table = {}
    if message.headers:
        if any(name.startswith(PREFIX) for name in message.headers):
            ours[PREFIX + "headers"] = [[name, value]
                                        for name, value in message.headers.items()]
        else:
            table = dict(message.headers)
    if message.created_at:
        props["timestamp"] = int(message.created_at)
        ours[PREFIX + "created-at"] = repr(float(message.created_at))
    if message.expires_at is not None:
        ours[PREFIX + "expires-at"] = repr(float(message.expires_at))
        if now is not None:
            props["expiration"] = str(max(0, int((message.expires_at - now) * 1000)))
    if message.priority:
        props["priority"] = 1
    table.update(ours)
    return (BasicProperties(delivery_mode=DELIVERY_MODE_PERSISTENT, headers=table or None,
                            **props), message.body)


def decode(properties, body, make, routing_key=""):
    """`make(id, subject, frames, headers, sender, origin, tracker, priority, expires_at,
    created_at)` (the Message class) from an AMQP message; with the retry count RabbitMQ
    kept: (message, retry). A message without a `type` (a plain AMQP client's, published
    to a stream's exchange) has its `routing_key` as subject."""
    table = dict(properties.headers or {})
    retry = int(table.pop(DELIVERY_COUNT, 0) or 0)
    ours = {name[len(PREFIX):]: table.pop(name) for name in list(table)
            if name.startswith(PREFIX)}
    values = {}
    for field, prop in _FIELDS:
        values[field] = ours.pop(field, None) or getattr(properties, prop) or ""
    lengths = ours.pop("frames", None)
    if lengths is None:
        frames = (body,)
    else:
        frames, at = [], 0
        for n in lengths:
            frames.append(body[at:at + n])
            at += n
        frames = tuple(frames)
    listed = ours.pop("headers", None)
    if listed is not None:
        headers = {_text(name): _text(value) for name, value in listed}
    else:
        headers = {name: _text(value) for name, value in table.items()} or None
    created = ours.pop("created-at", None)
    created_at = float(created) if created is not None else float(properties.timestamp or 0)
    expires = ours.pop("expires-at", None)
    message = make(values["id"], values["subject"] or routing_key, frames, headers,
                   values["sender"], values["origin"], values["tracker"],
                   bool(properties.priority), float(expires) if expires is not None else None,
                   created_at)
    return message, retry


def _text(value):
    """A table value as the str a core header holds (pika gives bytes it cannot decode)."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
