"""The Malamute header frame described declaratively with ``construct``.

This is the executable spec of the wire format; the property tests use it as the
oracle for the hand-written codec, and the broker never imports it (test extra).  Content frames
are not part of the header: ``parse`` and ``build`` handle them around it.
"""

import construct as cs

from .codec import BY_ID, WITH_CONTENT, MalamuteDecodeError, Reason


class _Utf8(cs.Adapter):
    """Strings are raw bytes on the wire; we expose them as lossless ``str``."""

    def _decode(self, obj, context, path):
        return obj.decode("utf-8", "surrogateescape")

    def _encode(self, obj, context, path):
        return obj.encode("utf-8", "surrogateescape") if isinstance(obj, str) else obj


String = _Utf8(cs.Prefixed(cs.Int8ub, cs.GreedyBytes))
Number2 = cs.Int16ub
Number4 = cs.Int32ub

_SEND = ("address" / String, "subject" / String, "tracker" / String, "timeout" / Number4)
_DELIVER = ("sender" / String, "address" / String, "subject" / String, "tracker" / String)
_STATUS = ("code" / Number2, "reason" / String)

BODIES = {
    1: cs.Struct("protocol" / cs.Const(b"MALAMUTE", cs.Prefixed(cs.Int8ub, cs.GreedyBytes)),
                 "version" / cs.Const(1, Number2),
                 "address" / String),                                    # CONNECTION-OPEN
    2: cs.Struct(),                                                      # CONNECTION-PING
    3: cs.Struct(),                                                      # CONNECTION-PONG
    4: cs.Struct(),                                                      # CONNECTION-CLOSE
    5: cs.Struct("stream" / String),                                     # STREAM-WRITE
    6: cs.Struct("stream" / String, "pattern" / String),                 # STREAM-READ
    7: cs.Struct("subject" / String),                                    # STREAM-SEND + content
    8: cs.Struct("address" / String, "sender" / String, "subject" / String),  # STREAM-DELIVER
    9: cs.Struct(*_SEND),                                                # MAILBOX-SEND + content
    10: cs.Struct(*_DELIVER),                                            # MAILBOX-DELIVER
    11: cs.Struct(*_SEND),                                               # SERVICE-SEND + content
    12: cs.Struct("address" / String, "pattern" / String),               # SERVICE-OFFER
    13: cs.Struct(*_DELIVER),                                            # SERVICE-DELIVER
    14: cs.Struct(*_STATUS),                                             # OK
    15: cs.Struct(*_STATUS),                                             # ERROR
    16: cs.Struct("amount" / Number2),                                   # CREDIT
    17: cs.Struct("tracker" / String, *_STATUS),                         # CONFIRM
    18: cs.Struct("stream" / String),                                    # STREAM-CANCEL
}

# Bytes after the last field are ignored (no Terminated), as malamute 1.2 ignores them.
Header = cs.Struct(
    "signature" / cs.Const(b"\xaa\xa8"),
    "id" / cs.Int8ub,
    "body" / cs.Switch(cs.this.id, BODIES, default=cs.Error),
)


def _header_fields(cls):
    return [name for name in cls._fields if name != "content"]


def parse(frames):
    """Decode one command from its frames with the declarative schema."""
    if not frames:
        raise MalamuteDecodeError(Reason.FRAMES, "no frames")
    try:
        header = Header.parse(frames[0])
    except cs.ConstructError as exc:
        raise MalamuteDecodeError(Reason.HEADER, "schema: %s" % exc) from None
    cls = BY_ID[header.id]
    values = {name: header.body[name] for name in _header_fields(cls)}
    if cls in WITH_CONTENT:
        return cls(content=tuple(frames[1:]), **values)
    return cls(**values)             # frames after a command without content are ignored


def build(command):
    """Encode a command to frames with the declarative schema."""
    cls = command.__class__
    body = {name: getattr(command, name) for name in _header_fields(cls)}
    frames = [Header.build({"id": cls.ID, "body": body})]
    if cls in WITH_CONTENT:
        frames.extend(command.content)
    return frames
