"""Malamute (ZPROTO ``mlm_proto``) commands and their hand-written hot-path codec.

One ZeroMQ multipart message is one command: a header frame (``AA A8``, the
command id, then the fields) followed, for the three SENDs and three DELIVERs
only, by the content frames.  Strings carry a 1-byte length, numbers are
big-endian.  ``schema.py`` describes the same layout with ``construct``; the
property tests hold the two equal, so this module may stay fast and terse.

Decoding is liberal where malamute 1.2 is and strict where it breaks: bytes after
a command's last field and frames after a command that carries no content are
ignored (a newer client may add fields), while a field that runs past the end of
the header is refused with one exception type (the real codec runs such a
half-parsed command with stale values).  Strings are
``str`` decoded as UTF-8 with ``surrogateescape``, so any byte string survives
a round trip.  Encoders accept ``str`` or ``bytes`` and, like the C setter,
truncate a string field at 255 bytes rather than emit a malformed header.
"""

import enum
from struct import Struct
from typing import NamedTuple

from mqksbridge.protocols.errors import ProtocolError

SIGNATURE = b"\xaa\xa8"
PROTOCOL = b"MALAMUTE"
VERSION = 1

SUCCESS = 200
FAILED = 300
COMMAND_INVALID = 500
NOT_IMPLEMENTED = 501
INTERNAL_ERROR = 502

_U16 = Struct(">H")
_U32 = Struct(">I")
_STATUS = Struct(">HB")
_LEN = [bytes((n,)) for n in range(256)]


class Reason(enum.Enum):
    """What makes frames no Malamute command (MalamuteDecodeError.code)."""
    FRAMES = "frames"        # no frames at all
    HEADER = "header"        # a header shorter than its fields say, or a bad signature
    PROTOCOL = "protocol"    # CONNECTION-OPEN of another protocol or version
    COMMAND = "command"      # a command id malamute does not have


class MalamuteDecodeError(ProtocolError):
    """A frame sequence that is not one well-formed Malamute command (`code` a Reason).
    It costs that one command, never the connection (specs/errors.md)."""


# -- commands ---------------------------------------------------------------
# ``ID`` is the wire id; ``content`` (where present) is a tuple of frames.

class ConnectionOpen(NamedTuple):
    address: str
    ID = 1


class ConnectionPing(NamedTuple):
    ID = 2


class ConnectionPong(NamedTuple):
    ID = 3


class ConnectionClose(NamedTuple):
    ID = 4


class StreamWrite(NamedTuple):
    stream: str
    ID = 5


class StreamRead(NamedTuple):
    stream: str
    pattern: str = ""
    ID = 6


class StreamSend(NamedTuple):
    subject: str
    content: tuple = ()
    ID = 7


class StreamDeliver(NamedTuple):
    address: str
    sender: str
    subject: str
    content: tuple = ()
    ID = 8


class MailboxSend(NamedTuple):
    address: str
    subject: str
    tracker: str = ""
    timeout: int = 0
    content: tuple = ()
    ID = 9


class MailboxDeliver(NamedTuple):
    sender: str
    address: str
    subject: str
    tracker: str = ""
    content: tuple = ()
    ID = 10


class ServiceSend(NamedTuple):
    address: str
    subject: str
    tracker: str = ""
    timeout: int = 0
    content: tuple = ()
    ID = 11


class ServiceOffer(NamedTuple):
    address: str
    pattern: str = ""
    ID = 12


class ServiceDeliver(NamedTuple):
    sender: str
    address: str
    subject: str
    tracker: str = ""
    content: tuple = ()
    ID = 13


class Ok(NamedTuple):
    code: int = SUCCESS
    reason: str = ""
    ID = 14


class Error(NamedTuple):
    code: int
    reason: str = ""
    ID = 15


class Credit(NamedTuple):
    amount: int
    ID = 16


class Confirm(NamedTuple):
    tracker: str
    code: int = SUCCESS
    reason: str = ""
    ID = 17


class StreamCancel(NamedTuple):
    stream: str
    ID = 18


COMMANDS = (
    ConnectionOpen, ConnectionPing, ConnectionPong, ConnectionClose,
    StreamWrite, StreamRead, StreamSend, StreamDeliver,
    MailboxSend, MailboxDeliver, ServiceSend, ServiceOffer, ServiceDeliver,
    Ok, Error, Credit, Confirm, StreamCancel,
)
BY_ID = {cls.ID: cls for cls in COMMANDS}
WITH_CONTENT = frozenset(cls for cls in COMMANDS if "content" in cls._fields)


# -- decoding ---------------------------------------------------------------

def _text(h, pos):
    """Read one length-prefixed string at ``pos``; return (str, next pos)."""
    if pos >= len(h):
        raise MalamuteDecodeError(Reason.HEADER, "truncated string length at byte %d" % pos)
    end = pos + 1 + h[pos]
    if end > len(h):
        raise MalamuteDecodeError(Reason.HEADER, "truncated string at byte %d" % pos)
    return h[pos + 1:end].decode("utf-8", "surrogateescape"), end


def _u16(h, pos):
    if pos + 2 > len(h):
        raise MalamuteDecodeError(Reason.HEADER, "truncated number2 at byte %d" % pos)
    return _U16.unpack_from(h, pos)[0], pos + 2


def _u32(h, pos):
    if pos + 4 > len(h):
        raise MalamuteDecodeError(Reason.HEADER, "truncated number4 at byte %d" % pos)
    return _U32.unpack_from(h, pos)[0], pos + 4


# Each reads its command's fields from the header after the id, and whatever follows them
# is left unread (ignored, as malamute does).

def _open(h):
    protocol, pos = _text(h, 3)
    if protocol != "MALAMUTE":
        raise MalamuteDecodeError(Reason.PROTOCOL, "protocol is not MALAMUTE")
    version, pos = _u16(h, pos)
    if version != VERSION:
        raise MalamuteDecodeError(Reason.PROTOCOL, "unsupported version %d" % version)
    return (_text(h, pos)[0],)


def _none(h):
    return ()


def _one(h):
    return (_text(h, 3)[0],)


def _two(h):
    a, pos = _text(h, 3)
    return (a, _text(h, pos)[0])


def _three(h):
    a, pos = _text(h, 3)
    b, pos = _text(h, pos)
    return (a, b, _text(h, pos)[0])


def _four(h):
    a, pos = _text(h, 3)
    b, pos = _text(h, pos)
    c, pos = _text(h, pos)
    return (a, b, c, _text(h, pos)[0])


def _send(h):
    address, pos = _text(h, 3)
    subject, pos = _text(h, pos)
    tracker, pos = _text(h, pos)
    return (address, subject, tracker, _u32(h, pos)[0])


def _status(h):
    code, pos = _u16(h, 3)
    return (code, _text(h, pos)[0])


def _credit(h):
    return (_u16(h, 3)[0],)


def _confirm(h):
    tracker, pos = _text(h, 3)
    code, pos = _u16(h, pos)
    return (tracker, code, _text(h, pos)[0])



_FIELDS = {
    ConnectionOpen: _open, ConnectionPing: _none, ConnectionPong: _none,
    ConnectionClose: _none, StreamWrite: _one, StreamRead: _two, StreamSend: _one,
    StreamDeliver: _three, MailboxSend: _send, MailboxDeliver: _four,
    ServiceSend: _send, ServiceOffer: _two, ServiceDeliver: _four, Ok: _status,
    Error: _status, Credit: _credit, Confirm: _confirm, StreamCancel: _one,
}
_DECODERS = [None] * 256
for _cls, _fn in _FIELDS.items():
    _DECODERS[_cls.ID] = (_cls, _fn, _cls in WITH_CONTENT)
del _cls, _fn


def decode(frames):
    """Decode one command from its frames (routing id already removed)."""
    if not frames:
        raise MalamuteDecodeError(Reason.FRAMES, "no frames")
    h = frames[0]
    if len(h) < 3:
        raise MalamuteDecodeError(Reason.HEADER, "header shorter than 3 bytes")
    if h[0] != 0xAA or h[1] != 0xA8:
        raise MalamuteDecodeError(Reason.HEADER, "bad signature")
    entry = _DECODERS[h[2]]
    if entry is None:
        raise MalamuteDecodeError(Reason.COMMAND, "unknown command id %d" % h[2])
    cls, fields, has_content = entry
    values = fields(h)               # bytes after the last field are ignored, as malamute
    if has_content:
        return cls(*values, tuple(frames[1:]))
    return cls(*values)              # and so are frames after a command without content


def send_fields(h):
    """(address, subject, tracker, timeout, end) of a MAILBOX-SEND or SERVICE-SEND header,
    `end` being where the tracker ends (the timeout follows).

    The hot path of `decode` for these two commands, without building a command or copying
    the content frames (tests hold the two equal).
    """
    try:
        if h[0] != 0xAA or h[1] != 0xA8:
            raise MalamuteDecodeError(Reason.HEADER, "bad signature")
        a = 4 + h[3]
        b = a + 1 + h[a]
        c = b + 1 + h[b]
    except IndexError:
        raise MalamuteDecodeError(Reason.HEADER, "truncated SEND header") from None
    if c + 4 > len(h):
        raise MalamuteDecodeError(Reason.HEADER,
                                  "SEND header of %d bytes, fields say %d" % (len(h), c + 4))
    return (h[4:a].decode("utf-8", "surrogateescape"),
            h[a + 1:b].decode("utf-8", "surrogateescape"),
            h[b + 1:c].decode("utf-8", "surrogateescape"), _U32.unpack_from(h, c)[0], c)


def stream_send_subject(h):
    """(subject, end) of a STREAM-SEND header, `end` being where the subject ends (the hot
    path of `decode`, held equal to it)."""
    if len(h) < 4 or h[0] != 0xAA or h[1] != 0xA8 or len(h) < 4 + h[3]:
        raise MalamuteDecodeError(Reason.HEADER, "malformed STREAM-SEND header")
    end = 4 + h[3]
    return h[4:end].decode("utf-8", "surrogateescape"), end


# -- encoding ---------------------------------------------------------------

def _b(value):
    """Field bytes: UTF-8 (surrogateescape) for str, cut at 255 like the C setter."""
    if value.__class__ is not bytes:
        value = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
    return value if len(value) < 256 else value[:255]


def _frame(value):
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value


def _head(cls):
    return SIGNATURE + bytes((cls.ID,))


_H = {cls: _head(cls) for cls in COMMANDS}
_H_SD, _H_MD, _H_VD = _H[StreamDeliver], _H[MailboxDeliver], _H[ServiceDeliver]

PING = [_H[ConnectionPing]]
PONG = [_H[ConnectionPong]]
CLOSE = [_H[ConnectionClose]]
OK = [_H[Ok] + _STATUS.pack(SUCCESS, 0)]


def encode_ok(code=SUCCESS, reason=""):
    """OK frames; the real client ignores the code, so 200 is the norm."""
    if code == SUCCESS and not reason:
        return OK
    r = _b(reason)
    return [b"".join((_H[Ok], _U16.pack(code), _LEN[len(r)], r))]


_ERRORS = {}


def encode_error(code, reason=""):
    """ERROR frames (300 ends a real client, 500 makes it re-open)."""
    if not reason:
        cached = _ERRORS.get(code)
        if cached is None:
            cached = _ERRORS[code] = [_H[Error] + _STATUS.pack(code, 0)]
        return cached
    r = _b(reason)
    return [b"".join((_H[Error], _U16.pack(code), _LEN[len(r)], r))]


def deliver_prefix(cls, *names):
    """The start of a DELIVER header (``cls``): its id and the ``names`` that come before
    the fields a SEND carries (STREAM-DELIVER: stream and sender; MAILBOX- and
    SERVICE-DELIVER: sender). See ``deliver_header``."""
    return b"".join((_H[cls], *(_LEN[len(n)] + n for n in map(_b, names))))


def deliver_header(prefix, send_header, end):
    """The DELIVER header for a SEND header whose fields end at ``end`` (as ``send_fields``
    and ``stream_send_subject`` give it): a SEND's fields up to its timeout are the
    DELIVER's last fields in the same order, so they are copied, not re-encoded. Tests
    hold it equal to the encoders."""
    return prefix + send_header[3:end]


def encode_stream_deliver(address, sender, subject, content=()):
    a, s, j = _b(address), _b(sender), _b(subject)
    return [b"".join((_H_SD, _LEN[len(a)], a, _LEN[len(s)], s, _LEN[len(j)], j)),
            *map(_frame, content)]


def encode_mailbox_deliver(sender, address, subject, tracker="", content=()):
    s, a, j, t = _b(sender), _b(address), _b(subject), _b(tracker)
    return [b"".join((_H_MD, _LEN[len(s)], s, _LEN[len(a)], a, _LEN[len(j)], j,
                      _LEN[len(t)], t)), *map(_frame, content)]


def encode_service_deliver(sender, address, subject, tracker="", content=()):
    s, a, j, t = _b(sender), _b(address), _b(subject), _b(tracker)
    return [b"".join((_H_VD, _LEN[len(s)], s, _LEN[len(a)], a, _LEN[len(j)], j,
                      _LEN[len(t)], t)), *map(_frame, content)]


def encode(command):
    """Encode any command to its list of frames (header first)."""
    cls = command.__class__
    head = _H.get(cls)
    if head is None:
        raise TypeError("not a Malamute command: %r" % (command,))
    parts = [head]
    if cls is ConnectionOpen:
        parts.append(b"\x08MALAMUTE\x00\x01")
    for name, value in zip(cls._fields, command):
        if name == "content":
            break
        if name == "timeout":
            parts.append(_U32.pack(value))
        elif name in ("code", "amount"):
            parts.append(_U16.pack(value))
        else:
            value = _b(value)
            parts.append(_LEN[len(value)])
            parts.append(value)
    frames = [b"".join(parts)]
    if cls in WITH_CONTENT:
        frames.extend(map(_frame, command.content))
    return frames
