"""Core Message <-> Twino frames (docs/mapping.md "to Twino" / "from Twino").

Same-door traffic never comes here: a Twino push keeps its delivery frame in Message.raw.
Foreign messages become ordinary Twino frames: source = sender, the subject as header
`Subject`, the origin door as `X-Origin`, several frames as one body plus `Frame-Lengths`,
and every core header as a header. What a Twino frame cannot carry (a header value with
CRLF or bytes that are not UTF-8, a header block over 64 KiB, a sender over 255 bytes)
raises Unrepresentable instead of being cut.
"""
from mqksbridge.bridge.convert import Unrepresentable
from mqksbridge.bridge.engine import Message, bounded
from mqksbridge.protocols.twino.codec import (MAX_NAME_BYTES, Frame, FrameTemplate, MessageType,
                                              TwinoProtocolError, encode, encode_headers)

DOOR = "twino"
SUBJECT = "Subject"
ORIGIN = "X-Origin"
FRAME_LENGTHS = "Frame-Lengths"


def wire_id(message_id):
    """A Twino message id for a core id, or None when it cannot travel (empty, > 255 bytes,
    not UTF-8); the door then makes up an alias and maps acks back."""
    try:
        if message_id and len(message_id.encode("utf-8")) <= MAX_NAME_BYTES:
            return message_id
    except UnicodeEncodeError:
        pass
    return None


def frame_headers(message):
    """Headers for a core message: Subject, X-Origin and Frame-Lengths when it came from
    another door (a Twino message carries its own), then its own headers."""
    headers = []
    if message.origin != DOOR:
        headers.append((SUBJECT, message.subject))
        headers.append((ORIGIN, message.origin))
        if len(message.frames) != 1:
            headers.append((FRAME_LENGTHS, ",".join(str(len(f)) for f in message.frames)))
    if message.headers:
        headers.extend(message.headers.items())
    return headers or None


def _source(sender):
    if not sender:
        return None
    try:
        if len(sender.encode("utf-8")) <= MAX_NAME_BYTES:
            return sender
    except UnicodeEncodeError:
        pass
    raise Unrepresentable(f"sender {sender!r} is no Twino client id (1-255 UTF-8 bytes)")


_blocks, _remember_block = bounded(4096)   # (subject, origin, frame lengths) -> header block


def _encode(frame, message):
    """Frame bytes; a foreign message without headers of its own (most traffic) reuses the
    header block encoded for its subject and origin."""
    try:
        if message.headers or message.origin == DOOR:
            headers = frame_headers(message)
            return encode(frame, None if headers is None else encode_headers(headers))
        frames = message.frames
        key = (message.subject, message.origin,
               None if len(frames) == 1 else tuple(map(len, frames)))
        block = _blocks.get(key)
        if block is None:
            block = _remember_block(key, encode_headers(frame_headers(message)))
        return encode(frame, block)
    except (TwinoProtocolError, UnicodeEncodeError) as exc:
        raise Unrepresentable(str(exc)) from None


# (subject, origin, frame lengths, source, channel, queue id) -> FrameTemplate
_templates, _remember_template = bounded(4096)


def queue_delivery(message, message_id, channel, queue_id, first, pending_ack, hide_source):
    """The QueueMessage bytes carrying any core message to a Twino consumer.

    A foreign message without headers of its own (most traffic) is made from a frame
    template kept per subject, origin, sender and queue: only the flags, the id and the
    body vary."""
    source = None if hide_source else message.sender
    if message.headers or message.origin == DOOR:
        return _encode(Frame(MessageType.QUEUE_MESSAGE, first, message.priority, 16, False,
                             pending_ack, message_id, _source(source), channel, queue_id, None,
                             message.body), message)
    frames = message.frames
    key = (message.subject, message.origin, None if len(frames) == 1 else tuple(map(len, frames)),
           source, channel, queue_id)
    template = _templates.get(key)
    if template is None:
        template = _template(key, message)
    try:
        return template.render(message_id, frames[0] if len(frames) == 1 else b"".join(frames),
                               first, message.priority, pending_ack)
    except (TwinoProtocolError, UnicodeEncodeError) as exc:
        raise Unrepresentable(str(exc)) from None


def _template(key, message):
    """The frame template for a key of queue_delivery, from a full encode (so both stay
    byte-equal)."""
    source, channel, queue_id = key[3:]
    raw = _encode(Frame(MessageType.QUEUE_MESSAGE, False, False, 16, False, False, None,
                        _source(source), channel, queue_id, None, b""), message)
    return _remember_template(key, FrameTemplate(raw))


def direct_delivery(message, message_id, target):
    """The DirectMessage bytes carrying a foreign message to a Twino client's mailbox."""
    return _encode(Frame(MessageType.DIRECT_MESSAGE, False, message.priority, 16, False,
                         False, message_id, _source(message.sender), target, 0, None,
                         message.body), message)


def response_delivery(message, request_id, target):
    """A foreign reply to a Twino client's direct request: the Response it waits for."""
    return _encode(Frame(MessageType.RESPONSE, False, False, 16, False, False, request_id,
                         _source(message.sender), target, 0, None, message.body), message)


def refusal(message):
    """Why a Twino consumer could not receive `message`, or None."""
    try:
        _encode(Frame(MessageType.DIRECT_MESSAGE, source=_source(message.sender)), message)
    except Unrepresentable as exc:
        return exc.reason
    return None


def _split(content, lengths):
    """Frames from `Frame-Lengths`, or None when the header does not describe `content`."""
    try:
        sizes = [int(n) for n in lengths.split(",")] if lengths.strip() else []
    except ValueError:
        return None
    if any(n < 0 for n in sizes) or sum(sizes) != len(content):
        return None
    frames, at = [], 0
    for n in sizes:
        frames.append(content[at:at + n])
        at += n
    return tuple(frames)


def from_frame(frame, message_id, sender, subject, raw, raw_door, now, expires_at=None):
    """A Twino push (or direct, router or response message) as a core Message.

    The subject is the `Subject` header (trimmed, as Twino readers trim `Key: value`) when
    given, else `subject` (the queue, router or target name). A `Frame-Lengths` header that
    adds up to the body splits it back into frames. Headers stay as sent (the first value of
    a repeated key); `raw` is what a Twino receiver gets.
    """
    frames = (frame.content,)
    headers = None
    if frame.headers:
        headers = {}
        for key, value in frame.headers:
            headers.setdefault(key, value)
        found = frame.header(SUBJECT)
        if found is not None:
            subject = found.strip()
        lengths = frame.header(FRAME_LENGTHS)
        split = None if lengths is None else _split(frame.content, lengths)
        if split is not None:
            frames = split
    return Message(message_id, subject, frames, headers, sender, DOOR, "",
                   frame.high_priority, expires_at, now, raw, raw_door, len(frame.content))
