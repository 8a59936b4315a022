"""TMQP/2.0 (Twino MQ 3.x) frames: wire constants, the Frame model and the hot-path codec.

`schema.py` is the declarative spec; this module is the hand-written `struct` path used for
every data frame, held byte-equal to the schema by the property tests.
"""
from __future__ import annotations

import enum
import functools
import struct
import uuid
from dataclasses import dataclass, replace

from mqksbridge.protocols.errors import ProtocolError

PROTOCOL = b"TMQP/2.0"
PROTOCOL_V1 = b"TMQ/1.01"
PROTOCOLS = (PROTOCOL, PROTOCOL_V1)

DEFAULT_TTL = 16
MAX_TTL = 31
MAX_NAME_BYTES = 255
MAX_HEADER_BYTES = 0xFFFF
DEFAULT_MAX_FRAME_SIZE = 64 * 1024 * 1024

FIRST_ACQUIRER = 0x80
HIGH_PRIORITY = 0x40
TYPE_MASK = 0x3F
PENDING_RESPONSE = 0x80
PENDING_ACK = 0x40
HAS_HEADER = 0x20

_NOT_FIRST_ACQUIRER = 0xFF ^ FIRST_ACQUIRER
_NOT_PENDING_ACK = 0xFF ^ PENDING_ACK

PING_BYTES = b"\x89\xff\x00\x00\x00\x00\x00\x00"
PONG_BYTES = b"\x8a\xff\x00\x00\x00\x00\x00\x00"

EVENT_UNSUBSCRIBE = 0
EVENT_SUBSCRIBE = 1


class Reason(enum.Enum):
    """Which TMQP/2.0 rule was broken (TwinoProtocolError.code)."""
    FRAME = "frame"          # bytes that are no frame, or a frame over max_frame_size
    ENCODE = "encode"        # a frame that cannot be put on the wire
    OPTIONS = "options"      # an operation's options that are not the JSON object it takes
    HELLO = "hello"          # a handshake that repeats a key


class TwinoProtocolError(ProtocolError):
    """Bytes that are not TMQP/2.0, or a frame that cannot be put on the wire: `code` a
    Reason. `done` holds the frames a decoder completed before it met the error, so a
    connection can still act on them in order (specs/errors.md).
    """


class MessageType(enum.IntEnum):
    """Low 6 bits of byte 0."""

    OTHER = 0x00
    TERMINATE = 0x08
    PING = 0x09
    PONG = 0x0A
    SERVER = 0x10
    QUEUE_MESSAGE = 0x11
    DIRECT_MESSAGE = 0x12
    ACKNOWLEDGE = 0x13
    RESPONSE = 0x14
    QUEUE_PULL_REQUEST = 0x15
    EVENT = 0x16
    ROUTER = 0x17


QUEUE_MESSAGE = int(MessageType.QUEUE_MESSAGE)   # a plain int: compared once per frame


class ContentType(enum.IntEnum):
    """Operation numbers carried in the content type of Server (0x10) frames (3.x numbering)."""

    HELLO = 101
    ACCEPTED = 202
    JOIN = 601
    LEAVE = 602
    CREATE_CHANNEL = 603
    REMOVE_CHANNEL = 604
    CHANNEL_INFORMATION = 605
    CHANNEL_LIST = 606
    CHANNEL_CONSUMERS = 607
    CREATE_QUEUE = 610
    REMOVE_QUEUE = 611
    UPDATE_QUEUE = 612
    CLEAR_MESSAGES = 613
    QUEUE_INFORMATION = 615
    QUEUE_LIST = 616
    INSTANCE_LIST = 621
    CLIENT_LIST = 631
    DECISION_OVER_NODE = 641
    ROUTER_LIST = 651
    CREATE_ROUTER = 652
    REMOVE_ROUTER = 653
    LIST_BINDINGS = 661
    ADD_BINDING = 662
    REMOVE_BINDING = 663


class ResultCode(enum.IntEnum):
    """Result carried in the content type of a Response; any other number passes through."""

    OK = 0
    FAILED = 1
    NO_CONTENT = 204
    BAD_REQUEST = 400
    UNAUTHORIZED = 401
    FORBIDDEN = 403
    NOT_FOUND = 404
    UNACCEPTABLE = 406
    REQUEST_TIMEOUT = 408
    CONFLICT = 409
    DUPLICATE = 481
    LIMIT_EXCEEDED = 482
    INTERNAL_SERVER_ERROR = 500
    BUSY = 503
    SEND_ERROR = 581


class Header:
    """Header names the protocol gives meaning to (application headers pass through)."""

    CLIENT_ID = "Client-Id"
    CLIENT_NAME = "Client-Name"
    CLIENT_TYPE = "Client-Type"
    CLIENT_TOKEN = "Client-Token"
    CLIENT_ACCEPT = "Client-Accept"
    NACK_REASON = "Nack-Reason"
    REASON = "Reason"
    CHANNEL_NAME = "Channel-Name"
    CHANNEL_TOPIC = "Channel-Topic"
    QUEUE_ID = "Queue-Id"
    QUEUE_STATUS = "Queue-Status"
    QUEUE_TAG = "Queue-Tag"
    DELIVERY_HANDLER = "Delivery-Handler"
    WAIT_FOR_ACKNOWLEDGE = "Wait-For-Acknowledge"
    CC = "CC"
    REQUEST_ID = "Request-Id"
    COUNT = "Count"
    INDEX = "Index"
    CLEAR = "Clear"
    INFO = "Info"
    ORDER = "Order"
    NO_CONTENT = "No-Content"
    PRIORITY_MESSAGES = "Priority-Messages"
    MESSAGES = "Messages"
    ROUTE_METHOD = "Route-Method"
    BINDING_NAME = "Binding-Name"
    SERVER = "Twino-MQ-Server"


class NackReason:
    NONE = "none"
    ERROR = "error"
    NO_CONSUMERS = "no-consumers"
    TIMEOUT = "timeout"


class NoContent:
    """Values of the No-Content header that close (or refuse) a pull."""

    EMPTY = "Empty"
    END = "End"
    UNACCEPTABLE = "Unacceptable"
    UNAUTHORIZED = "Unauthorized"


def new_id() -> str:
    """A 32-hex id, the shape the real client and server use for every id."""
    return uuid.uuid4().hex


@dataclass(slots=True)
class Frame:
    """One TMQP/2.0 frame. `headers` is None when the frame has no header block."""

    type: int
    first_acquirer: bool = False
    high_priority: bool = False
    ttl: int = DEFAULT_TTL
    pending_response: bool = False
    pending_ack: bool = False
    message_id: str | None = None
    source: str | None = None
    target: str | None = None
    content_type: int = 0
    headers: list[tuple[str, str]] | None = None
    content: bytes = b""

    def header(self, name: str) -> str | None:
        """First value of `name`, matched case-insensitively (the real FindHeader)."""
        if self.headers:
            name = name.lower()
            for key, value in self.headers:
                if key.lower() == name:
                    return value
        return None

    def header_values(self, name: str) -> list[str]:
        """Every value of a repeatable header such as CC."""
        name = name.lower()
        return [value for key, value in self.headers or () if key.lower() == name]

    def copy(self, **changes) -> Frame:
        """A relay copy; the header list is copied so appending to it never aliases."""
        if "headers" not in changes and self.headers is not None:
            changes["headers"] = list(self.headers)
        return replace(self, **changes)


_HEAD8 = struct.Struct("<5BHB")
_HEAD16 = struct.Struct("<5BHBH")
_HEAD32 = struct.Struct("<5BHBI")
_HEAD64 = struct.Struct("<5BHBQ")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_FLATTEN_LIMIT = 1 << 20
_WORD_HEAD = struct.Struct("<H3BHB")   # _HEAD8 with bytes 0-1 read as one word


def _flags(word: int, apply_ttl: bool) -> tuple:
    """Bytes 0-1 (`word`, byte 0 low) as (type, FirstAcquirer, HighPriority, TTL as handed
    on, PendingResponse, PendingAcknowledge, has a header block, is PING/PONG). The TTL is
    already decremented under `apply_ttl`, and -1 for a frame that arrived expired."""
    b0, b1 = word & 0xFF, word >> 8
    kind, ttl = b0 & TYPE_MASK, b1 & MAX_TTL
    ping = kind == 0x09 or kind == 0x0A
    if apply_ttl and not ping:
        ttl -= 1
    return (kind, b0 & FIRST_ACQUIRER != 0, b0 & HIGH_PRIORITY != 0, ttl,
            b1 & PENDING_RESPONSE != 0, b1 & PENDING_ACK != 0, b1 & HAS_HEADER != 0, ping)


def _name_bytes(value: str | None, what: str) -> bytes:
    if not value:
        return b""
    raw = value.encode("utf-8")
    if len(raw) > MAX_NAME_BYTES:
        raise TwinoProtocolError(Reason.ENCODE, f"{what} is longer than {MAX_NAME_BYTES} bytes")
    return raw


def encode_headers(headers) -> bytes:
    """The header block: u16 LE length, then `Key:Value\\r\\n` per header, in order."""
    lines = []
    for key, value in headers:
        if not key or ":" in key or "\r\n" in key or "\r\n" in value:
            raise TwinoProtocolError(Reason.ENCODE,
                                     f"header {key!r} cannot be written as Key:Value")
        lines.append(f"{key}:{value}\r\n")
    block = "".join(lines).encode("utf-8")
    if len(block) > MAX_HEADER_BYTES:
        raise TwinoProtocolError(Reason.ENCODE, "header block is longer than 65535 bytes")
    return _U16.pack(len(block)) + block


def parse_headers(block) -> list[tuple[str, str]]:
    """Split at CRLF and at each entry's first ':'; values stay untrimmed, keyless entries go."""
    headers = []
    for entry in block.decode("utf-8", "replace").split("\r\n"):
        key, colon, value = entry.partition(":")
        if key and colon:
            headers.append((key, value))
    return headers


def encode(frame: Frame, header_block: bytes | None = None) -> bytes:
    """Frame -> wire bytes, with the smallest length form as the real TmqWriter picks it.

    `header_block`, when given, is an `encode_headers` result used instead of frame.headers
    (a relay that sends the same headers many times encodes them once)."""
    kind = frame.type
    if kind == 0x09:
        return PING_BYTES
    if kind == 0x0A:
        return PONG_BYTES
    if not 0 <= kind <= TYPE_MASK:
        raise TwinoProtocolError(Reason.ENCODE, f"message type {kind} does not fit in 6 bits")
    mid = _name_bytes(frame.message_id, "message id")
    src = _name_bytes(frame.source, "source")
    tgt = _name_bytes(frame.target, "target")
    b0 = kind
    if frame.first_acquirer:
        b0 |= FIRST_ACQUIRER
    if frame.high_priority:
        b0 |= HIGH_PRIORITY
    ttl = frame.ttl
    b1 = MAX_TTL if ttl > MAX_TTL else (ttl if ttl > 0 else 0)
    if frame.pending_response:
        b1 |= PENDING_RESPONSE
    if frame.pending_ack:
        b1 |= PENDING_ACK
    if header_block is not None:
        b1 |= HAS_HEADER
        hdr = header_block
    elif frame.headers is None:
        hdr = b""
    else:
        b1 |= HAS_HEADER
        hdr = encode_headers(frame.headers)
    content = frame.content
    head = pack_head(b0, b1, len(mid), len(src), len(tgt), frame.content_type, len(content))
    return b"".join((head, mid, src, tgt, hdr, content))


def pack_head(b0: int, b1: int, lid: int, lsrc: int, ltgt: int, content_type: int,
              n: int) -> bytes:
    """The fixed 8 bytes and the content length in its smallest form (as TmqWriter)."""
    try:
        if n < 253:
            return _HEAD8.pack(b0, b1, lid, lsrc, ltgt, content_type, n)
        if n <= 0xFFFF:
            return _HEAD16.pack(b0, b1, lid, lsrc, ltgt, content_type, 253, n)
        if n <= 0xFFFFFFFF:
            return _HEAD32.pack(b0, b1, lid, lsrc, ltgt, content_type, 254, n)
        return _HEAD64.pack(b0, b1, lid, lsrc, ltgt, content_type, 255, n)
    except struct.error as exc:
        raise TwinoProtocolError(Reason.ENCODE,
                                 f"content type {content_type!r} is not a uint16") from exc


class FrameDecoder:
    """Incremental decoder: feed arbitrary chunks, get complete frames back.

    Declared lengths are checked against `max_frame_size` as soon as the length field is
    readable, so an oversize frame is refused before any of its body is buffered.
    With `apply_ttl` (what every real reader does) each frame's TTL is decremented and a frame
    that arrives with TTL 0 is dropped and counted in `expired`; relaying a decoded frame
    therefore sends TTL-1. PING and PONG are exempt.
    """

    __slots__ = ("max_frame_size", "apply_ttl", "expired", "_buf", "_need", "_flags")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, apply_ttl: bool = True):
        self.max_frame_size = max_frame_size
        self.apply_ttl = apply_ttl
        self.expired = 0
        self._buf = bytearray()
        self._need = 0  # size of the pending frame's next readable part, once known
        self._flags = {}  # bytes 0-1 -> _flags() (at most 65536 entries, a few in practice)

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf)

    def feed(self, data) -> list[Frame]:
        buf = self._buf
        if len(buf) + len(data) < self._need:
            buf += data  # still short of the pending frame: do not rescan or copy
            return []
        if not buf:
            src = data if type(data) is bytes else bytes(data)
        elif len(buf) + len(data) <= _FLATTEN_LIMIT:
            buf += data
            src = bytes(buf)  # one memcpy; slicing bytes is cheaper than slicing the buffer
            buf.clear()
        else:
            buf += data
            src = buf
        frames: list[Frame] = []
        try:
            pos = self._parse(src, frames)
        except TwinoProtocolError as exc:
            exc.done = frames
            raise
        if src is buf:
            del buf[:pos]  # O(1) for CPython bytearrays: it moves the start offset
        elif pos < len(src):
            buf += memoryview(src)[pos:]
        return frames

    def _parse(self, src, frames: list[Frame]) -> int:
        """Decode every complete frame in `src`; return the offset of the first unused byte.

        Flags come from a per-decoder table of the first two bytes and (source, target)
        from a bounded cache (_names_of), as connections send the same few of both over
        and over: both keep the per-frame path short.
        """
        unpack, new_frame, append = _WORD_HEAD.unpack_from, Frame, frames.append
        names, table = _names_of, self._flags
        in_buffer = type(src) is not bytes
        end = len(src)
        limit = self.max_frame_size
        pos = 0
        need = 8
        while end - pos >= 8:
            word, lid, lsrc, ltgt, ctype, n = unpack(src, pos)
            flags = table.get(word)
            if flags is None:
                flags = table[word] = _flags(word, self.apply_ttl)
            kind, first, high, ttl, response, ack, has_headers, ping = flags
            if ping:
                append(new_frame(kind, first, high, ttl, response, ack))
                pos += 8
                continue
            p = pos + 8
            if n >= 253:
                size = 2 if n == 253 else 4 if n == 254 else 8
                if end - p < size:
                    need = p + size - pos
                    break
                n = (_U16 if size == 2 else _U32 if size == 4 else _U64).unpack_from(src, p)[0]
                p += size
            a = p + lid
            q = c = a + lsrc + ltgt
            if has_headers:
                if end - q < 2:
                    if q - pos + n > limit:
                        raise TwinoProtocolError(Reason.FRAME,
                                                 f"frame exceeds the {limit} byte limit")
                    need = q + 2 - pos
                    break
                q += 2 + _U16.unpack_from(src, q)[0]
            frame_end = q + n
            if frame_end - pos > limit:
                raise TwinoProtocolError(Reason.FRAME, f"frame exceeds the {limit} byte limit")
            if frame_end > end:
                need = frame_end - pos
                break
            if ttl < 0:
                self.expired += 1
                pos = frame_end
                continue
            key = src[a:c]
            if in_buffer:
                key = bytes(key)
                with memoryview(src) as view:
                    content = view[q:frame_end].tobytes()
            else:
                content = src[q:frame_end]
            known = names(key, lsrc)
            append(new_frame(
                kind, first, high, ttl, response, ack,
                src[p:a].decode("utf-8", "replace") if lid else None, known[0], known[1],
                ctype, parse_headers(src[c + 2:q]) if has_headers else None, content))
            pos = frame_end
        self._need = need
        return pos


@functools.lru_cache(maxsize=1024)
def _names_of(key: bytes, lsrc: int) -> tuple[str | None, str | None]:
    """(source, target) of the name bytes `key`, whose first `lsrc` are the source."""
    return (key[:lsrc].decode("utf-8", "replace") if lsrc else None,
            key[lsrc:].decode("utf-8", "replace") if len(key) > lsrc else None)


# -- changing encoded frames without decoding them ------------------------------------------
# A relay sends one encoded frame to many receivers, each with its own FirstAcquirer and
# PendingAcknowledge bits, and a pull answer is a stored frame with headers appended. Tests
# hold each of these equal to decode -> change the Frame -> encode.

_reflagged = [None, 0, 0, None]   # the last (frame, byte 0, byte 1, result): see reflag


def reflag(raw: bytes, first_acquirer: bool, pending_ack: bool) -> bytes:
    """An encoded frame with FirstAcquirer and PendingAcknowledge set as given.

    The last result is kept: a broadcast sends the same variant of one frame to every
    receiver after the first, and a copy of a large frame costs more than this check."""
    b0, b1 = raw[0], raw[1]
    n0 = b0 | 0x80 if first_acquirer else b0 & 0x7F     # FIRST_ACQUIRER, as constants:
    n1 = b1 | 0x40 if pending_ack else b1 & 0xBF        # PENDING_ACK   once per delivery
    if n0 == b0 and n1 == b1:
        return raw
    last = _reflagged
    if last[0] is raw and last[1] == n0 and last[2] == n1:
        return last[3]
    changed = bytes((n0, n1)) + raw[2:]
    last[:] = (raw, n0, n1, changed)
    return changed


def append_headers(raw: bytes, headers, first_acquirer: bool | None = None,
                   pending_ack: bool | None = None) -> bytes:
    """An encoded frame with `headers` added after its own, and FirstAcquirer and
    PendingAcknowledge set as given (None: left as they are)."""
    b0, b1, lid, lsrc, ltgt, ctype, n = _HEAD8.unpack_from(raw, 0)
    p = 8 + (0 if n < 253 else 2 if n == 253 else 4 if n == 254 else 8)
    q = p + lid + lsrc + ltgt
    extra = encode_headers(headers)[2:]
    if b1 & HAS_HEADER:
        size = _U16.unpack_from(raw, q)[0]
        block, rest = raw[q + 2:q + 2 + size] + extra, raw[q + 2 + size:]
    else:
        block, rest = extra, raw[q:]
    if len(block) > MAX_HEADER_BYTES:
        raise TwinoProtocolError(Reason.ENCODE, "header block is longer than 65535 bytes")
    if first_acquirer is not None:
        b0 = b0 | FIRST_ACQUIRER if first_acquirer else b0 & _NOT_FIRST_ACQUIRER
    if pending_ack is not None:
        b1 = b1 | PENDING_ACK if pending_ack else b1 & _NOT_PENDING_ACK
    return b"".join((bytes((b0, b1 | HAS_HEADER)), raw[2:q], _U16.pack(len(block)), block,
                     rest))


def pull_headers(request_id: str, count: int, index: int,
                 left: tuple[int, int] | None = None) -> list[tuple[str, str]]:
    """The headers a message answering a pull carries after its own: the request, how
    many were asked for, its place, and with `left` (Info: yes) the priority and regular
    messages still queued."""
    headers = [(Header.REQUEST_ID, request_id), (Header.COUNT, str(count)),
               (Header.INDEX, str(index))]
    if left is not None:
        headers += [(Header.PRIORITY_MESSAGES, str(left[0])), (Header.MESSAGES, str(left[1]))]
    return headers


def pull_answer(raw: bytes, request_id: str, count: int, index: int,
                left: tuple[int, int] | None = None, pending_ack: bool | None = None) -> bytes:
    """A stored message's encoded frame as the answer to a pull: `pull_item` without
    decoding, FirstAcquirer set (the puller is its only receiver) and PendingAcknowledge as
    the puller acks (None: as stored)."""
    return append_headers(raw, pull_headers(request_id, count, index, left), True, pending_ack)


class FrameTemplate:
    """Frames that differ only in FirstAcquirer, HighPriority, PendingAcknowledge, message
    id and content, made from one encoded frame without an id or content (a foreign
    message to a queue: its source, target, queue id and header block repeat)."""

    __slots__ = ("b0", "b1", "lsrc", "ltgt", "content_type", "names")

    def __init__(self, raw: bytes):
        b0, b1, lid, lsrc, ltgt, ctype, n = _HEAD8.unpack_from(raw, 0)
        if lid or n:
            raise TwinoProtocolError(Reason.ENCODE,
                                     "a template frame has no message id and no content")
        self.b0 = b0 & ~(FIRST_ACQUIRER | HIGH_PRIORITY)
        self.b1 = b1 & ~PENDING_ACK
        self.lsrc, self.ltgt, self.content_type = lsrc, ltgt, ctype
        self.names = raw[8:]             # source, target and header block

    def render(self, message_id: str | None, content: bytes, first_acquirer: bool,
               high_priority: bool, pending_ack: bool) -> bytes:
        """The frame's bytes; an id over 255 bytes raises TwinoProtocolError (and one that
        is not UTF-8, UnicodeEncodeError), as encode does."""
        mid = _name_bytes(message_id, "message id")
        b0 = self.b0
        if first_acquirer:
            b0 |= FIRST_ACQUIRER
        if high_priority:
            b0 |= HIGH_PRIORITY
        head = pack_head(b0, self.b1 | PENDING_ACK if pending_ack else self.b1, len(mid),
                         self.lsrc, self.ltgt, self.content_type, len(content))
        return b"".join((head, mid, self.names, content))


def decode(data: bytes, apply_ttl: bool = False) -> Frame:
    """Exactly one complete frame (tests, tools); the TTL is left as on the wire by default."""
    decoder = FrameDecoder(max(len(data), 8), apply_ttl)
    frames = decoder.feed(data)
    if len(frames) != 1 or decoder.buffered:
        raise TwinoProtocolError(Reason.FRAME, "data is not exactly one complete frame")
    return frames[0]


def accepted(client_id: str, message_id: str) -> Frame:
    """The server's hello answer: the client adopts `target` as its id."""
    return Frame(MessageType.SERVER, first_acquirer=True, message_id=message_id,
                 target=client_id, content_type=ContentType.ACCEPTED)


def refused(code: int, message_id: str) -> Frame:
    """Hello refusal sent before closing: 401 (authentication) or 503 (id in use)."""
    return Frame(MessageType.SERVER, first_acquirer=True, message_id=message_id,
                 content_type=code)


def response(request: Frame, code: int = ResultCode.OK, content: bytes = b"", *,
             source: str | None = None, target: str | None = None) -> Frame:
    """Answer to a request: same id, result code in the content type, back to the requester."""
    return Frame(MessageType.RESPONSE, request.first_acquirer, request.high_priority,
                 message_id=request.message_id, source=source,
                 target=request.source if target is None else target,
                 content_type=code, content=content)


def acknowledge(message: Frame, source: str | None = None, reason: str | None = None) -> Frame:
    """A receiver's ack (or nack, when `reason` is given) of a queue or direct message.

    A direct message's ack goes back to its sender with HighPriority set; a queue message's
    ack names the channel and queue.
    """
    direct = message.type == MessageType.DIRECT_MESSAGE
    return Frame(MessageType.ACKNOWLEDGE, message.first_acquirer, direct,
                 message_id=message.message_id, source=source,
                 target=message.source if direct else message.target,
                 content_type=message.content_type,
                 headers=None if reason is None else [(Header.NACK_REASON, reason)])


def server_ack(message_id: str, channel: str, queue_id: int, reason: str | None = None) -> Frame:
    """The broker's own producer ack (or nack) for a queue push."""
    return Frame(MessageType.ACKNOWLEDGE, first_acquirer=True, message_id=message_id,
                 target=channel, content_type=queue_id,
                 headers=None if reason is None else [(Header.NACK_REASON, reason)])


def nack_reason(ack: Frame) -> str | None:
    """None for a positive ack, else the reason text."""
    return ack.header(Header.NACK_REASON)


def pull_item(message: Frame, request_id: str, count: int, index: int,
              left: tuple[int, int] | None = None) -> Frame:
    """A stored message answering a pull, with the pull headers appended after its own.

    `left` = (priority messages, messages) still queued, sent when the request had Info: yes.
    """
    headers = list(message.headers or ()) + pull_headers(request_id, count, index, left)
    return message.copy(headers=headers)


def queue_id_of(content: bytes) -> int | None:
    """The queue id that Remove Queue (611) and Queue Information (615) carry as their
    content: a little-endian uint16; None when the content is shorter."""
    return _U16.unpack_from(content)[0] if len(content) >= 2 else None


def pull_status(request: Frame, value: str) -> Frame:
    """The content-less frame that ends (End) or refuses (Empty, Unacceptable...) a pull."""
    return Frame(MessageType.QUEUE_MESSAGE, message_id=request.message_id,
                 target=request.target, content_type=request.content_type,
                 headers=[(Header.REQUEST_ID, request.message_id or ""),
                          (Header.NO_CONTENT, value)])
