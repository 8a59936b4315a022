"""Core Message <-> MQKS lines (docs/mapping.md "to MQKS").

An MQKS delivery is `{cid} ok {mid} {props} {data}`: one line, space-separated, so
everything a foreign message carries must fit the props field (`k=v` joined by `,`).
The original MQKS client parses props generically, so extra keys arrive as attributes.
Every core message is representable here (percent-encoding and base64), so nothing is
ever dropped on the way to MQKS.
"""
import base64
import re
import urllib.parse

from mqksbridge.bridge.engine import Message, bounded
from mqksbridge.protocols.mqks.replies import DELIVERY_TAIL, delivery_tail as line_tail

DOOR = "mqks"

# Bytes an MQKS id/event/prop value cannot carry literally. The checks delete them with
# bytes.translate and compare lengths: a quarter of the cost of a regex search.
_UNSAFE_BYTES = bytes(range(0x21)) + b",=%\x7f"
_UNSAFE = re.compile(b"[%s]" % re.escape(_UNSAFE_BYTES))
# Bodies that cannot travel as-is: line or tab characters, or whitespace the end would lose.
_NOT_LINE = b"\t\n\r"
_LOST_AT_END = frozenset(b" \x0b\x0c")
# (subject, origin, sender) -> their props: senders repeat, so do subjects
_heads, _remember_head = bounded(4096)


def pct(value: bytes) -> bytes:
    """Percent-encode only what would break the line or the props syntax."""
    if len(value.translate(None, _UNSAFE_BYTES)) == len(value):
        return value
    return _UNSAFE.sub(lambda m: b"%%%02X" % m.group()[0], value)


def unpct(value: bytes) -> bytes:
    """Undo pct (an MQKS consumer acks a foreign message by the id it was shown)."""
    return urllib.parse.unquote_to_bytes(value)


def _wire(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def line_safe(body: bytes) -> bool:
    """Bodies that can travel as-is: UTF-8 text without line or tab characters whose end
    survives the MQKS readers' whitespace stripping."""
    if len(body.translate(None, _NOT_LINE)) != len(body) or (body and body[-1] in _LOST_AT_END):
        return False
    if body.isascii():
        return True
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# -- MQKS publish -> core Message ------------------------------------------------------------

def message(req_id: bytes, subject: str, body: bytes, sender: str, event=None,
            created_at=0.0) -> Message:
    """A publish as a core Message; `raw` is the delivery tail an MQKS consumer relays.

    The door passes the event's wire bytes too, so the hot path never re-encodes them,
    and the time of the read the line came in (`created_at`)."""
    if event is None:
        event = _wire(subject)
    return Message(req_id.decode("utf-8", "surrogateescape"), subject, (body,), None, sender,
                   DOOR, "", False, None, created_at, DELIVERY_TAIL % (req_id, event, body),
                   DOOR, len(body))


def messages(publishes, subject: str, event: bytes, sender: str, created_at=0.0):
    """`message` for each of a run of publishes of one event, given as their request parts
    `(req_id, action, event, body)` (protocols.mqks.requests.plain_publishes), in one pass."""
    tail = DELIVERY_TAIL
    return [Message(req_id.decode("utf-8", "surrogateescape"), subject, (body,), None, sender,
                    DOOR, "", False, None, created_at, tail % (req_id, event, body), DOOR,
                    len(body))
            for req_id, _, _, body in publishes]


# -- core Message -> MQKS delivery -------------------------------------------------------------

def delivery(message, retry):
    """`{mid} {props} {data}\n` for any message; the consumer adds `{cid} ok `.

    A foreign single-frame text message without headers (most cross-door traffic) is
    handled inline: this runs once per delivery."""
    if message.raw_door == DOOR and retry == 0:
        return message.raw
    if message.origin == DOOR:            # a redelivery: exactly what the original writes
        return line_tail(_wire(message.id), _wire(message.subject), retry, message.body)
    frames = message.frames
    if retry or message.headers or len(frames) != 1:
        return delivery_tail(message, retry)
    body = frames[0]
    if (len(body.translate(None, _NOT_LINE)) != len(body) or not body.isascii()
            or (body and body[-1] in _LOST_AT_END)):
        return delivery_tail(message, retry)
    key = (message.subject, message.origin, message.sender)
    head = _heads.get(key) or _head(key)
    mid = message.id.encode("utf-8", "surrogateescape")
    if not mid.isalnum() and len(mid.translate(None, _UNSAFE_BYTES)) != len(mid):
        mid = pct(mid)
    return b"".join((mid, head[2], body, b"\n"))


# What a batch's joined bodies (NUL after each) must not hold for every body to pass the
# checks of `delivery`'s inline path; a false alarm (" \x00" inside a body) only costs the
# batch its shortcut.
_BAD_ENDS = tuple(bytes((c, 0)) for c in _LOST_AT_END)


def deliveries(items):
    """Delivery lines, `prefix` first, for a turn's (prefix, message, retry) items: what
    `delivery` gives each, in one pass. Foreign single-frame messages without headers are
    checked together (one `translate` over all bodies, one over all ids); when they also
    share prefix, subject, origin and sender (a burst from one publisher to one consumer)
    the lines come from one %-format. Anything else, or a batch failing a check, goes
    through `delivery` one by one."""
    if not items:
        return b""
    prefix, first, _ = items[0]
    subject, origin, sender = first.subject, first.origin, first.sender
    if origin == DOOR:
        return _one_by_one(items)
    ids, bodies = [], []
    add_id, add_body = ids.append, bodies.append
    shared = True
    for p, message, retry in items:
        if retry or message.headers or len(message.frames) != 1:
            return _one_by_one(items)
        if (message.subject is not subject or message.sender is not sender
                or message.origin is not origin or p is not prefix):
            if message.origin == DOOR:
                return _one_by_one(items)
            shared = False
        add_id(message.id)
        add_body(message.frames[0])
    # NUL separates ids and bodies: it is an unsafe id byte, so an id holding one fails the
    # length check below, and a body holding one at most costs a false alarm.
    all_ids = "\x00".join(ids).encode("utf-8", "surrogateescape")
    blob = b"\x00".join(bodies) + b"\x00"
    if (not blob.isascii() or len(blob.translate(None, _NOT_LINE)) != len(blob)
            or any(end in blob for end in _BAD_ENDS)
            or len(all_ids.translate(None, _UNSAFE_BYTES)) != len(all_ids) - len(ids) + 1):
        return _one_by_one(items)
    wire_ids = all_ids.split(b"\x00")
    if shared:
        head = (_heads.get((subject, origin, sender)) or _head((subject, origin, sender)))[2]
        line = b"%s%%s%s%%s\n" % (prefix.replace(b"%", b"%%"), head.replace(b"%", b"%%"))
        fields = [None] * (2 * len(ids))
        fields[::2] = wire_ids
        fields[1::2] = bodies
        return (line * len(ids)) % tuple(fields)
    out = []
    add = out.extend
    subject = origin = sender = head = None
    for (p, message, _), mid, body in zip(items, wire_ids, bodies):
        if (message.subject is not subject or message.sender is not sender
                or message.origin is not origin):
            subject, origin, sender = key = (message.subject, message.origin, message.sender)
            head = (_heads.get(key) or _head(key))[2]
        add((p, mid, head, body, b"\n"))
    return b"".join(out)


def _one_by_one(items):
    return b"".join([prefix + delivery(message, retry) for prefix, message, retry in items])


def _head(key):
    """The event (the subject, encoded), `,origin=…[,sender=…]` for (subject, origin, sender),
    encoded once per combination, plus ` event=…,origin=… ` (what most deliveries need
    between id and body)."""
    head = _heads.get(key)
    if head is None:
        subject, origin, sender = key
        tail = b",origin=" + pct(_wire(origin))
        if sender:
            tail += b",sender=" + pct(_wire(sender))
        event = pct(_wire(subject))
        head = _remember_head(key, (event, tail, b" event=%s%s " % (event, tail)))
    return head


def delivery_tail(message, retry):
    """A foreign message: origin, sender, encoding and headers as extra props."""
    event, tail, _ = _head((message.subject, message.origin, message.sender))
    frames = message.frames
    props = [tail]
    if len(frames) == 1 and line_safe(frames[0]):
        data = frames[0]
    elif len(frames) == 1:
        props.append(b",enc=base64")
        data = base64.b64encode(frames[0])
    else:
        props.append(b",enc=base64,frames=%d" % len(frames))
        data = b" ".join(base64.b64encode(f) for f in frames)
    if message.headers:
        for key, value in message.headers.items():
            props.append(b",h." + pct(_wire(key)) + b"=" + pct(_wire(value)))
    return line_tail(pct(_wire(message.id)), event, retry, data, b"".join(props))
