"""Core Message <-> Malamute DELIVER frames (docs/mapping.md "to Malamute").

Malamute publishes carry their finished DELIVER header in `Message.raw` (the session
builds it once per SEND header: protocols.malamute.session.Send.deliver), so every
reader relays it with the content frames untouched. Each kind of DELIVER has its own
`raw_door` tag, because a stream message can reach a queue (the shared namespace) and
must then leave as a SERVICE-DELIVER.

Foreign messages: sender = the publisher's client id, subject = subject, tracker = the
tracker the publisher gave (a Twino direct message's id), content = the frames. Malamute has
no place for headers, so they are dropped. A string field holds 255 bytes and no NUL: a
longer one, or one with a NUL, raises Unrepresentable (the C setter would cut it; we never
do).
"""
from mqksbridge.bridge.convert import Unrepresentable
from mqksbridge.bridge.engine import Message, bounded
from mqksbridge.protocols.malamute.codec import (encode_mailbox_deliver, encode_service_deliver,
                                      encode_stream_deliver)

ORIGIN = "malamute"
RAW_STREAM, RAW_MAILBOX, RAW_SERVICE = "malamute/stream", "malamute/mailbox", "malamute/service"


def refusal(message):
    """Why a Malamute client could not receive `message`, or None: its strings are C
    strings of at most 255 bytes, without NUL."""
    for what in (message.subject, message.sender, message.tracker or ""):
        if len(what.encode("utf-8", "surrogateescape")) > 255:
            return f"{what[:40]!r}... is longer than a Malamute string (255 bytes)"
        if "\x00" in what:
            return f"{what[:40]!r} holds a NUL, which a Malamute string cannot"
    return None


def _fits(message):
    reason = refusal(message)
    if reason is not None:
        raise Unrepresentable(reason)


# -- Malamute publish -> core Message -----------------------------------------------------

def message(raw_door, id, sender, subject, tracker, content, raw, expires_at,
            created_at=0.0):
    """A Malamute SEND as a core Message; `raw` is its DELIVER header, for the kind of
    DELIVER `raw_door` names, `created_at` the time of the read it came in. With `run`, the
    only place the door's messages are built: positionally, as the hot path needs (see
    core.message)."""
    return Message(id, subject, content, None, sender, ORIGIN, tracker, False, expires_at,
                   created_at, raw, raw_door)


def run(raw_door, new_id, sender, send, messages, i, most, expires_at, created_at):
    """`message` for messages[i] and the SENDs after it with the same header as `send` (a
    protocols.malamute.session.Send), at most `most` of them: the index after them and
    their Messages, `new_id()` giving each its id. One call for a lone SEND (a round
    trip's hop) as for a run; a loop, not a comprehension, which would make a function and
    a cell per name it uses on every call."""
    header, subject, tracker, raw = send.header, send.subject, send.tracker, send.deliver
    count = len(messages)
    if count > i + most:
        count = i + most
    out = []
    while i < count:
        frames = messages[i]
        if not frames or frames[0] != header:
            break
        i += 1
        if len(frames) == 2:             # one content frame: its size given, not summed
            body = frames[1]
            out.append(Message(new_id(), subject, (body,), None, sender, ORIGIN, tracker,
                               False, expires_at, created_at, raw, raw_door, len(body)))
        else:
            out.append(Message(new_id(), subject, tuple(frames[1:]), None, sender, ORIGIN,
                               tracker, False, expires_at, created_at, raw, raw_door))
    return i, out


# -- core Message -> DELIVER frames --------------------------------------------------------

_stream_heads, _remember_head = bounded(4096)   # (stream, sender, subject) -> header


def stream_frames(stream, message):
    """STREAM-DELIVER for any message read from `stream`."""
    if message.raw_door == RAW_STREAM:
        return [message.raw, *message.frames]
    key = (stream, message.sender, message.subject)
    head = _stream_heads.get(key)
    if head is None:
        _fits(message)
        head = _remember_head(key, encode_stream_deliver(stream, message.sender,
                                                         message.subject)[0])
    return [head, *message.frames]


def mailbox_frames(address, message):
    """MAILBOX-DELIVER for any message stored in or sent to mailbox `address`."""
    if message.raw_door == RAW_MAILBOX:
        return [message.raw, *message.frames]
    _fits(message)
    return encode_mailbox_deliver(message.sender, address, message.subject,
                                  message.tracker or "", message.frames)


def service_frames(service, message):
    """SERVICE-DELIVER for any message taken from queue `service`."""
    if message.raw_door == RAW_SERVICE:
        return [message.raw, *message.frames]
    _fits(message)
    return encode_service_deliver(message.sender, service, message.subject,
                                  message.tracker or "", message.frames)
