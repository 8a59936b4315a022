"""TMQP/2.0 frame as a `construct` schema: the executable spec the codec is tested against.

It is written independently of the `struct` codec in codec.py so the property tests can use
it as an oracle; `parse_frame` / `build_frame` convert to and from the shared `Frame`. The
broker never imports it (`construct` is in the test extra).
"""
from __future__ import annotations

from construct import (
    Adapter, BitsInteger, BitStruct, Bytes, Computed, ConstructError, Flag, GreedyBytes, If,
    IfThenElse, Int8ul, Int16ul, Int32ul, Int64ul, OneOf, Padding, Prefixed, Rebuild, Struct,
    Switch, Terminated, this,
)

from .codec import Frame, MessageType, Reason, TwinoProtocolError

PROTOCOL_BYTES = OneOf(Bytes(8), [b"TMQP/2.0", b"TMQ/1.01"])
"""The 8 bytes a client sends first and the server echoes."""

TYPE_BYTE = BitStruct("first_acquirer" / Flag, "high_priority" / Flag, "type" / BitsInteger(6))
FLAGS_BYTE = BitStruct(
    "pending_response" / Flag, "pending_ack" / Flag, "has_header" / Flag, "ttl" / BitsInteger(5),
)


class _Length(Adapter):
    """One byte below 253, else marker 253/254/255 followed by u16/u32/u64 little-endian."""

    def _decode(self, obj, context, path):
        return obj.value

    def _encode(self, obj, context, path):
        if obj < 253:
            return {"marker": obj, "value": obj}
        marker = 253 if obj <= 0xFFFF else 254 if obj <= 0xFFFFFFFF else 255
        return {"marker": marker, "value": obj}


LENGTH = _Length(Struct(
    "marker" / Int8ul,
    "value" / Switch(this.marker, {253: Int16ul, 254: Int32ul, 255: Int64ul},
                     default=Computed(this.marker)),
))


class _Name(Adapter):
    """UTF-8 text; zero bytes mean 'absent' (None), as the real reader returns null."""

    def _decode(self, obj, context, path):
        return obj.decode("utf-8", "replace") if obj else None

    def _encode(self, obj, context, path):
        return obj.encode("utf-8") if obj else b""


class _HeaderLines(Adapter):
    """`Key:Value\\r\\n` lines; split at the first colon, value untrimmed, keyless lines skipped."""

    def _decode(self, obj, context, path):
        pairs = []
        for line in obj.decode("utf-8", "replace").split("\r\n"):
            key, colon, value = line.partition(":")
            if colon and key:
                pairs.append((key, value))
        return pairs

    def _encode(self, obj, context, path):
        return "".join(f"{key}:{value}\r\n" for key, value in obj).encode("utf-8")


def _byte_length(field):
    return lambda ctx: len(ctx[field].encode("utf-8")) if ctx[field] else 0


BODY = Struct(
    "id_length" / Rebuild(Int8ul, _byte_length("message_id")),
    "source_length" / Rebuild(Int8ul, _byte_length("source")),
    "target_length" / Rebuild(Int8ul, _byte_length("target")),
    "content_type" / Int16ul,
    "length" / Rebuild(LENGTH, lambda ctx: len(ctx.content)),
    "message_id" / _Name(Bytes(this.id_length)),
    "source" / _Name(Bytes(this.source_length)),
    "target" / _Name(Bytes(this.target_length)),
    "headers" / If(this._.flags.has_header, Prefixed(Int16ul, _HeaderLines(GreedyBytes))),
    "content" / Bytes(this.length),
)

_PING_PONG = (MessageType.PING, MessageType.PONG)

FRAME = Struct(
    "kind" / TYPE_BYTE,
    "flags" / FLAGS_BYTE,
    # PING/PONG are 8 fixed bytes: only the first two mean anything.
    "body" / IfThenElse(lambda ctx: ctx.kind.type in _PING_PONG, Padding(6), BODY),
)

_ONE_FRAME = Struct("frame" / FRAME, Terminated)


def parse_frame(data: bytes) -> Frame:
    """Exactly one frame (TTL as on the wire); anything else raises TwinoProtocolError."""
    try:
        parsed = _ONE_FRAME.parse(data).frame
    except ConstructError as exc:
        raise TwinoProtocolError(Reason.FRAME, f"not a TMQP/2.0 frame: {exc}") from None
    kind, flags, body = parsed.kind, parsed.flags, parsed.body
    frame = Frame(kind.type, kind.first_acquirer, kind.high_priority, flags.ttl,
                  flags.pending_response, flags.pending_ack)
    if kind.type not in _PING_PONG:
        frame.message_id, frame.source, frame.target = body.message_id, body.source, body.target
        frame.content_type, frame.headers = body.content_type, body.headers
        frame.content = body.content
    return frame


def build_frame(frame: Frame) -> bytes:
    """Frame -> bytes through the schema (PING/PONG always come out as their fixed bytes)."""
    if frame.type in _PING_PONG:
        kind = {"first_acquirer": True, "high_priority": False, "type": frame.type}
        flags = {"pending_response": True, "pending_ack": True, "has_header": True, "ttl": 31}
        body = None
    else:
        kind = {"first_acquirer": frame.first_acquirer, "high_priority": frame.high_priority,
                "type": frame.type}
        flags = {"pending_response": frame.pending_response, "pending_ack": frame.pending_ack,
                 "has_header": frame.headers is not None, "ttl": min(max(frame.ttl, 0), 31)}
        body = {"content_type": frame.content_type, "message_id": frame.message_id,
                "source": frame.source, "target": frame.target,
                "headers": frame.headers, "content": bytes(frame.content)}
    try:
        return FRAME.build({"kind": kind, "flags": flags, "body": body})
    except ConstructError as exc:
        raise TwinoProtocolError(Reason.ENCODE, f"frame cannot be built: {exc}") from None
