"""Core Message <-> TextQueue records (docs/mapping.md "TextQueue", specs/textqueue.md
section 7).

An inbox record becomes a publish: its body (continuation lines are newlines; base64 with
`\\enc=base64`, several frames with `\\frames=N`) and the journal's variables (`\\i` id, `\\s`
subject, `\\headers`, `\\f` sender, `\\tracker`, `\\priority`, `\\t` created, `\\ttl`), with
the door's own: `\\to=` (another target than the file's), `\\subject=` and `\\id=` (readable
spellings of `\\s` and `\\i`), `\\error=` (room for the broker's reason when it refuses the
record). A delivery to an outbox is the journal's fields (`journal.encode_fields`: every
core field, any bytes) after a `-`, then `\\r=` (the delivery's retry count) and `\\error=`
with room for the worker's reason. The origin of an inbox publish is always `textqueue`.
"""
import urllib.parse
from typing import NamedTuple, Optional

from mqksbridge.bridge.engine import Message, bounded
from mqksbridge.protocols.textqueue import Record, journal, unpadded

DOOR = "textqueue"
ERROR = "error"


class Inbound(NamedTuple):
    """An inbox record read as a publish: the message (subject None when the record names
    none: the target's name is the default), the `\\to=` target if any, and the variables
    the door may rewrite in place (`\\error=`, and `\\i=` when it holds only room)."""
    message: Message
    to: Optional[str]
    error: object
    id_room: object


def unpct(text: str) -> str:
    """Percent-decoded text (file names, `\\to=`), bytes that are not UTF-8 kept as the
    project's surrogateescape."""
    if "%" not in text:
        return text
    data = urllib.parse.unquote_to_bytes(text.encode("utf-8", "surrogateescape"))
    return data.decode("utf-8", "surrogateescape")


def inbound(record: Record, sender: str, now: float) -> Inbound:
    """A record as a publish; TextQueueError when a variable does not decode (bad base64,
    a frame count that does not add up...). The door's hot path takes one-line records
    without variables itself (protocols.textqueue.one_line_body), the file's target, an id of its own."""
    env = journal.decode(unpadded(record.raw))
    by_name = {}
    for var in record.variables:
        by_name.setdefault(var.name, var)
    subject = env.subject
    if not subject:
        alias = by_name.get("subject")
        subject = unpct(alias.value) if alias is not None and alias.value else None
    message_id = env.id
    id_room = None
    if not message_id:
        alias = by_name.get("id")
        if alias is not None and alias.value:
            message_id = unpct(alias.value)
        else:
            room = by_name.get("i")
            if room is not None and room.width:
                id_room = room
    created = env.created_at or now
    expires = None if env.expires_at is None else created + (env.expires_at - env.created_at)
    to = by_name.get("to")
    message = Message(message_id, subject, env.frames, env.headers, env.sender or sender,
                      DOOR, env.tracker, env.priority, expires, created)
    return Inbound(message, unpct(to.value) if to is not None and to.value else None,
                   by_name.get(ERROR), id_room)


def outbound(message, retry: int, error_width: int) -> bytes:
    """The outbox record of one delivery (every core message is representable)."""
    tail = _tails.get((retry, error_width))
    if tail is None:
        tail = _put_tail((retry, error_width),
                         b"\\r=%d\n\\error=%s\n" % (retry, b" " * error_width))
    return b"-" + journal.encode_fields(message) + tail


_tails, _put_tail = bounded(256)     # (retry, error width) -> the record's last two lines

