"""ZMTP 3.1 (RFC 37) for the accepting end of one connection, sans-IO.

The Malamute door speaks ZeroMQ's wire protocol itself instead of going through libzmq:
a message then costs one slice per frame of a chunk parsed in one pass, and a reactor
turn's output to a peer is one write, where libzmq costs several C calls per frame on
each side plus an I/O thread. Clients still use libzmq (libmlm, pyzmq): to them this is a
ROUTER socket.

Scope: the NULL mechanism (what Malamute clients use) and, on request, PLAIN (RFC 24: the
caller checks the credentials of a `PlainHello` and answers `welcome()` or `deny()`, as a
ZAP handler would), ZMTP 3.0 and 3.1 peers, the 3.1
PING/PONG heartbeat commands. Older peers (ZMTP 1.0/2.0, libzmq before 4.0) and other
mechanisms are refused with a clear reason, as are malformed frames and messages over
the size limit; the caller then closes the connection (after an ERROR command once the
greeting is through, as the RFC suggests).

`Connection.receive_data(bytes)` returns the complete messages (each a `list` of frame
bytes: the hot path, no object per message) and leaves the rare events below in
`Connection.events` for the caller to take. A `Ready` always precedes the messages that
follow it; a `Ping` or `PeerError` may be handled after the messages of the same call.
See specs/zmtp.md.
"""
import enum
import struct
from dataclasses import dataclass

from mqksbridge.protocols.errors import ProtocolError

GREETING_SIZE = 64
# signature (0xFF, 8 padding bytes, 0x7F), version 3.1, mechanism NULL, as-server 0, filler.
# The padding holds "identity size + 1" for ZMTP 1.0 peers, as libzmq writes it.
GREETING = (b"\xff" + b"\x00" * 7 + b"\x01\x7f" + b"\x03\x01" + b"NULL".ljust(20, b"\x00")
            + b"\x00" + b"\x00" * 31)
# The same with mechanism PLAIN and as-server 1 (a PLAIN server sends no READY up front).
PLAIN_GREETING = (GREETING[:12] + b"PLAIN".ljust(20, b"\x00") + b"\x01" + b"\x00" * 31)
NULL, PLAIN = b"NULL", b"PLAIN"
PEERS_OF = {"ROUTER": frozenset({"DEALER", "REQ", "ROUTER"}),    # RFC 28 compatible types
            "DEALER": frozenset({"DEALER", "REP", "ROUTER"})}
DEFAULT_MAX_MESSAGE = 64 << 20
DEFAULT_MAX_FRAMES = 1024
# What a frame costs beyond its body, counted toward the message size limit: its bytes object
# and its place in the message's list. Without it empty and one-byte frames (2-3 bytes on the
# wire) made messages that were small on paper and hundreds of MB in memory.
FRAME_COST = 64

MORE, LONG, COMMAND = 0x01, 0x02, 0x04
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_LAST = [bytes((0, n)) for n in range(256)]          # short frame heads by size
_NEXT = [bytes((MORE, n)) for n in range(256)]
_LONG_MORE, _LONG_LAST = bytes((LONG | MORE,)), bytes((LONG,))


class Reason(enum.Enum):
    """Which ZMTP rule a peer broke (ZmtpError.code)."""
    GREETING = "greeting"        # not ZMTP 3.x, or another security mechanism
    HANDSHAKE = "handshake"      # a command, or a message, out of the handshake's order
    FRAME = "frame"              # a malformed frame or command
    LIMIT = "limit"              # a message or frame over the configured size
    CURVE = "curve"              # a CURVE box that does not open, a replayed nonce


class ZmtpError(ProtocolError):
    """The peer broke the protocol: `code` a Reason, `reason` what to log (and send as
    ERROR), `done` the messages completed before the violation (protocols.errors)."""


@dataclass(frozen=True)
class Ready:
    """The peer's handshake is complete. `identity` is its routing id ("" = none)."""
    socket_type: str
    identity: bytes
    properties: dict


@dataclass(frozen=True)
class PlainHello:
    """A PLAIN client's HELLO (RFC 24): answer with `welcome()` or `deny()`."""
    username: bytes
    password: bytes


@dataclass(frozen=True)
class Ping:
    """A ZMTP 3.1 heartbeat; answer with `pong(context)`."""
    ttl: int
    context: bytes


@dataclass(frozen=True)
class PeerError:
    """The peer sent ERROR: it is closing, and says why."""
    reason: str


# -- encoding ------------------------------------------------------------------------------

def frame(body, flags=0):
    """One frame: flags, a 1- or 8-byte size, the body."""
    n = len(body)
    if n < 256:
        return bytes((flags, n)) + body
    return bytes((flags | LONG,)) + _U64.pack(n) + body


def message(frames):
    """A multipart message as wire bytes (the routing id is not on the wire)."""
    if len(frames) == 2:
        return pair(frames[0], frames[1])
    parts = []
    last = len(frames) - 1
    for i, body in enumerate(frames):
        n = len(body)
        if n < 256:
            parts.append((_NEXT if i < last else _LAST)[n])
        else:
            parts.append(bytes((LONG | MORE if i < last else LONG,)) + _U64.pack(n))
        parts.append(body)
    return b"".join(parts)


def pair(head, body):
    """`message([head, body])`, the shape of nearly every Malamute message (a command and
    its one content frame), in one join: no loop, no list (tests hold it equal)."""
    n, m = len(head), len(body)
    return b"".join((_NEXT[n] if n < 256 else _LONG_MORE + _U64.pack(n), head,
                     _LAST[m] if m < 256 else _LONG_LAST + _U64.pack(m), body))


def pairs(head, bodies):
    """`pair(head, body)` for each of `bodies`, joined: a run of messages with one header
    frame (the DELIVERs of a run of SENDs) in one pass, the header's bytes made once
    (tests hold it equal)."""
    n = len(head)
    first = (_NEXT[n] if n < 256 else _LONG_MORE + _U64.pack(n)) + head
    parts = []
    for body in bodies:
        m = len(body)
        parts.append(first)
        parts.append(_LAST[m] if m < 256 else _LONG_LAST + _U64.pack(m))
        parts.append(body)
    return b"".join(parts)


def command(name, data=b""):
    return frame(bytes((len(name),)) + name + data, COMMAND)


def metadata(properties):
    """READY's property list: name (1-byte size), value (4-byte size)."""
    return b"".join(bytes((len(k),)) + k + _U32.pack(len(v)) + v for k, v in properties)


def ready(socket_type, identity=b""):
    return command(b"READY", metadata([(b"Socket-Type", socket_type.encode("ascii")),
                                       (b"Identity", identity)]))


def pong(context):
    return command(b"PONG", context)


def error(reason):
    """ERROR: a reason of at most 255 bytes."""
    raw = reason.encode("utf-8", "replace")[:255]
    return command(b"ERROR", bytes((len(raw),)) + raw)


def zap_denied(status):
    """The ERROR a libzmq (4.3) PLAIN server sends when its ZAP handler refuses a login.
    libzmq spells the command prefix as the C string "\\x05ERROR", which C reads as the
    byte 0x5E ('^', the escape eats the E) then "RROR": the name size byte is gone and
    the name is "^RROR". libzmq clients look for that same prefix, so they take RFC 37's
    own ERROR (`error`) for an unknown command (a failed handshake of the protocol kind)
    and this one, with a 3-digit ZAP status as its reason, for a failed login
    (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH with the status)."""
    raw = status.encode("ascii")
    if len(raw) != 3 or not raw.isdigit():
        raise ValueError(f"a ZAP status is 3 digits, not {status!r}")
    return frame(b"^RROR" + bytes((len(raw),)) + raw, COMMAND)


# -- decoding -------------------------------------------------------------------------------

def routing_id(n):
    """The routing id a ROUTER gives a peer that announced no identity: a zero byte, then a
    32-bit counter (`n`, wrapped), as libzmq makes them (specs/zmtp.md, "Routing ids")."""
    return b"\x00" + (n & 0xFFFFFFFF).to_bytes(4, "big")


def parse_metadata(data):
    """READY/INITIATE properties as {lower-case name: value}; ZmtpError if truncated."""
    props, pos, end = {}, 0, len(data)
    while pos < end:
        n = data[pos]
        name_end = pos + 1 + n
        if n == 0 or name_end + 4 > end:
            raise ZmtpError(Reason.FRAME, "malformed READY metadata")
        size = _U32.unpack_from(data, name_end)[0]
        value_end = name_end + 4 + size
        if value_end > end:
            raise ZmtpError(Reason.FRAME, "malformed READY metadata")
        props[bytes(data[pos + 1:name_end]).decode("ascii", "replace").lower()] = \
            bytes(data[name_end + 4:value_end])
        pos = value_end
    return props


def check_greeting(greeting, mechanism=NULL):
    """ZmtpError unless the peer's 64 bytes are a ZMTP 3.x greeting of our mechanism. A
    shorter prefix is checked as far as it goes (a ZMTP 1.0/2.0 peer never sends 64 bytes)."""
    n = len(greeting)
    if n and greeting[0] != 0xFF or n > 9 and not greeting[9] & 1:
        raise ZmtpError(Reason.GREETING, "not a ZMTP 3 peer (unversioned greeting)")
    if n > 10 and greeting[10] < 3:
        minor = greeting[11] if n > 11 else 0
        raise ZmtpError(Reason.GREETING, f"ZMTP {greeting[10]}.{minor} is not supported (need 3.x)")
    theirs = bytes(greeting[12:32]).rstrip(b"\x00")
    if n >= 32 and theirs != mechanism:
        raise ZmtpError(Reason.GREETING, f"security mechanism {theirs!r} is not supported "
                        f"(only {mechanism.decode()})")


class Connection:
    """One ZMTP connection: greeting, NULL handshake, then traffic (either end: the
    broker's ROUTER, or a benchmark's DEALER).

    Our side is constant (greeting + READY), so `preamble()` is written at once on
    connect. Frames are parsed straight out of each received chunk; only an incomplete
    tail is buffered, and a large frame arriving piecewise is not rescanned.
    """

    __slots__ = ("socket_type", "max_message", "max_frames", "mechanism", "state", "events",
                 "_buf", "_need", "_parts", "_size")

    def __init__(self, socket_type="ROUTER", max_message=DEFAULT_MAX_MESSAGE,
                 max_frames=DEFAULT_MAX_FRAMES, mechanism=NULL):
        self.socket_type = socket_type
        self.max_message = max_message   # bytes: bodies plus FRAME_COST per frame
        self.max_frames = max_frames     # frames per message
        self.mechanism = mechanism
        self.state = "greeting"          # -> "handshake" -> "traffic" (-> "closed"); PLAIN:
        #                                  "hello" -> "authenticating" -> "initiate" -> ...
        self.events = []                 # Ready, Ping, PeerError not yet taken by the caller
        self._buf = bytearray()
        self._need = GREETING_SIZE       # bytes wanted before parsing is worth trying
        self._parts = []                 # frames of a message not yet complete
        self._size = 0                   # their total size (with FRAME_COST each)

    def preamble(self):
        if self.mechanism == PLAIN:
            return PLAIN_GREETING
        return GREETING + ready(self.socket_type)

    def welcome(self):
        """PLAIN: the credentials are good (WELCOME); the peer's INITIATE comes next."""
        if self.state != "authenticating":
            raise ZmtpError(Reason.HANDSHAKE, f"WELCOME while {self.state}")
        self.state = "initiate"
        return command(b"WELCOME")

    def deny(self, status="400"):
        """PLAIN: the credentials are bad; the caller then closes the connection. The bytes
        are libzmq's (`zap_denied`), so libzmq clients report an authentication failure
        with this status rather than a broken protocol."""
        self.state = "closed"
        return zap_denied(status)

    def ready_reply(self):
        """What to send once the peer is Ready: PLAIN's READY (NULL sent ours up front)."""
        return ready(self.socket_type) if self.mechanism == PLAIN else b""

    def receive_data(self, data):
        """The messages (lists of frames) completed by `data`; events go to `events`.
        ZmtpError on a protocol violation, its `done` the messages completed before it."""
        buf = self._buf
        if len(buf) + len(data) < self._need:
            buf += data
            if self.state == "greeting":
                check_greeting(buf, self.mechanism)
            return []
        if buf:
            buf += data
            src = bytes(buf)
            buf.clear()
        else:
            src = data if type(data) is bytes else bytes(data)
        out = []
        pos = 0
        try:
            if self.state == "greeting":
                check_greeting(src[:GREETING_SIZE], self.mechanism)
                self.state = "hello" if self.mechanism == PLAIN else "handshake"
                pos = GREETING_SIZE
            pos = self._frames(src, pos, out)
        except ZmtpError as exc:
            if self.state != "greeting":     # the caller sends ERROR only past the greeting
                self.state = "closed"
            exc.done = out                   # served before the error (specs/errors.md)
            raise
        if pos < len(src):
            buf += src[pos:]
        return out

    def _frames(self, src, pos, out):
        """Parse whole frames from `src[pos:]` into `out`; return the first unused offset.

        Short traffic frames (flags 0 or 1: nearly every frame) take the first branch, a
        short two-frame message (a Malamute command and its body) in one step, and the ones
        that follow it in an inner loop (a burst's messages: fewer checks each); long frames
        and commands the general one. A message may have at most `max_frames` frames and
        cost at most `max_message` bytes, each frame its body plus FRAME_COST.
        """
        end = len(src)
        parts, size, limit = self._parts, self._size, self.max_message
        frames = self.max_frames
        pair = limit - 2 * FRAME_COST if frames >= 2 else -1     # the two-frame step's bound
        traffic = self.state == "traffic"
        need = 2
        while end - pos >= 2:
            flags = src[pos]
            if flags < 2 and traffic:
                n = src[pos + 1]
                stop = pos + 2 + n
                if flags and not parts:          # the common two-frame messages, a step
                    while stop + 2 <= end and not src[stop]:     # each while they follow
                        m = src[stop + 1]        # one another: a short last frame follows
                        last = stop + 2 + m
                        if last > end or n + m > pair:
                            break
                        out.append([src[pos + 2:stop], src[stop + 2:last]])
                        pos = last
                        if end - pos < 2 or src[pos] != 1:
                            n = -1               # the next frame is not of this shape
                            break
                        n = src[pos + 1]
                        stop = pos + 2 + n
                    if n < 0:
                        continue
                if stop > end:
                    need = stop - pos
                    break
                size += n + FRAME_COST
                if size > limit:
                    raise ZmtpError(Reason.LIMIT, f"message over the {limit} byte limit")
                if len(parts) >= frames:
                    raise ZmtpError(Reason.LIMIT, f"message over the {frames} frame limit")
                parts.append(src[pos + 2:stop])
                pos = stop
                if not flags:
                    out.append(parts)
                    parts, size = [], 0
                continue
            if flags & LONG:
                if end - pos < 9:
                    need = 9
                    break
                n = _U64.unpack_from(src, pos + 1)[0]
                start = pos + 9
            else:
                n = src[pos + 1]
                start = pos + 2
            if flags & 0xF8:
                raise ZmtpError(Reason.FRAME, f"reserved frame flags set ({flags:#04x})")
            stop = start + n
            if flags & COMMAND:
                if parts:
                    raise ZmtpError(Reason.FRAME, "command frame inside a multipart message")
                if n > 0xFFFF + 256:
                    raise ZmtpError(Reason.LIMIT, "command frame too large")
            elif not traffic:
                raise ZmtpError(Reason.HANDSHAKE, "message before the handshake completed")
            elif size + n + FRAME_COST > limit:
                raise ZmtpError(Reason.LIMIT, f"message over the {limit} byte limit")
            elif len(parts) >= frames:
                raise ZmtpError(Reason.LIMIT, f"message over the {frames} frame limit")
            if stop > end:
                need = stop - pos
                break
            body = src[start:stop]
            pos = stop
            if flags & COMMAND:
                event = self._command(body)
                if event is not None:
                    self.events.append(event)
                traffic = self.state == "traffic"
            elif flags & MORE:
                parts.append(body)
                size += n + FRAME_COST
            else:
                parts.append(body)
                out.append(parts)
                parts, size = [], 0
        self._parts, self._size, self._need = parts, size, need
        return pos

    def _command(self, body):
        if not body or len(body) < 1 + body[0]:
            raise ZmtpError(Reason.FRAME, "malformed command frame")
        name, data = body[1:1 + body[0]], body[1 + body[0]:]
        if self.state == "handshake":
            if name != b"READY":
                raise ZmtpError(Reason.HANDSHAKE, f"expected READY, got {name!r}")
            return self._ready(data)
        if self.state == "hello":
            if name != b"HELLO":
                raise ZmtpError(Reason.HANDSHAKE, f"expected HELLO, got {name!r}")
            self.state = "authenticating"
            return _plain_hello(data)
        if self.state == "authenticating":
            raise ZmtpError(Reason.HANDSHAKE, f"{name!r} before WELCOME")
        if self.state == "initiate":
            if name != b"INITIATE":
                raise ZmtpError(Reason.HANDSHAKE, f"expected INITIATE, got {name!r}")
            return self._ready(data)
        if name == b"PING":
            if len(data) < 2 or len(data) > 18:
                raise ZmtpError(Reason.FRAME, "malformed PING")
            return Ping(int.from_bytes(data[:2], "big"), data[2:])
        if name == b"ERROR":
            n = data[0] if data else 0
            return PeerError(data[1:1 + n].decode("utf-8", "replace"))
        if name == b"READY":
            raise ZmtpError(Reason.HANDSHAKE, "READY after the handshake")
        return None                      # PONG, SUBSCRIBE, CANCEL...: nothing to do here

    def _ready(self, data):
        props = parse_metadata(data)
        socket_type = props.get("socket-type", b"").decode("ascii", "replace")
        if socket_type not in PEERS_OF.get(self.socket_type, ()):
            raise ZmtpError(Reason.HANDSHAKE, f"socket type {socket_type or '(none)'} cannot "
                            f"talk to {self.socket_type}")
        self.state = "traffic"
        return Ready(socket_type, props.get("identity", b""), props)


def _plain_hello(data):
    """HELLO's body: username and password, each with a one-byte size (RFC 24)."""
    if not data or len(data) < 2 + data[0] or len(data) != 2 + data[0] + data[1 + data[0]]:
        raise ZmtpError(Reason.FRAME, "malformed HELLO")
    n = data[0]
    return PlainHello(bytes(data[1:1 + n]), bytes(data[2 + n:]))
