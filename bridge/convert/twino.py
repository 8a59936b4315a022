"""Core Message <-> Twino frames (DESIGN §4, docs/mapping.md "to Twino").

Same-door traffic never comes here: a Twino push keeps its delivery frame in Message.raw.
Foreign messages become ordinary Twino frames: source = sender, the subject as header
`Subject`, the origin door as `X-Origin`, several frames as one body plus `Frame-Lengths`,
and every core header as a header.
"""
from core.message import Message
from protocols.twino.codec import MAX_NAME_BYTES, Frame, MessageType

DOOR = "twino"
SUBJECT = "Subject"
ORIGIN = "X-Origin"
FRAME_LENGTHS = "Frame-Lengths"


def wire_id(message_id):
    """A Twino message id for a core id, or None when it cannot travel (empty, > 255 bytes)."""
    if message_id and len(message_id.encode("utf-8", "surrogateescape")) <= MAX_NAME_BYTES:
        return message_id
    return None


def _header_safe(text):
    return text.replace("\r", " ").replace("\n", " ")


def frame_headers(message):
    """Headers for a foreign message: Subject, X-Origin, Frame-Lengths, then its own."""
    headers = []
    if message.origin != DOOR:
        headers.append((SUBJECT, _header_safe(message.subject)))
        if message.origin:
            headers.append((ORIGIN, _header_safe(message.origin)))
    if len(message.frames) > 1:
        headers.append((FRAME_LENGTHS, ",".join(str(len(f)) for f in message.frames)))
    for key, value in (message.headers or {}).items():
        key = _header_safe(key).replace(":", "-")
        if key:
            headers.append((key, _header_safe(value)))
    return headers or None


def _name(value):
    if not value or len(value.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return None
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def queue_delivery(message, message_id, channel, queue_id, first, pending_ack, hide_source):
    """A QueueMessage frame carrying any core message to a Twino consumer."""
    return Frame(MessageType.QUEUE_MESSAGE, first, message.priority, 16, False, pending_ack,
                 message_id, None if hide_source else _name(message.sender), channel,
                 queue_id, frame_headers(message), message.body)


def direct_delivery(message, message_id, target):
    """A DirectMessage frame carrying a foreign message to a Twino client's mailbox."""
    return Frame(MessageType.DIRECT_MESSAGE, False, message.priority, 16, False, False,
                 message_id, _name(message.sender), target, 0, frame_headers(message),
                 message.body)


def from_frame(frame, message_id, sender, subject, raw, raw_door, now, expires_at=None):
    """A Twino push (or direct or router message) as a core Message. The subject is the
    `Subject` header when given, else `subject` (the queue name); `raw` is what a Twino
    receiver gets."""
    headers = None
    if frame.headers:
        headers = {}
        for key, value in frame.headers:
            headers.setdefault(key, value)
            if key.lower() == "subject":
                subject = value.strip()
    return Message(message_id, subject, (frame.content,), headers, sender, DOOR, "",
                   frame.high_priority, expires_at, now, raw, raw_door, len(frame.content))

