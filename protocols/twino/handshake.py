"""Server side of one TMQP/2.0 connection, sans-IO (bytes in, events out; bytes to write back).

The real client sends the 8 protocol bytes and its hello frame without waiting, then reads the
echo with a single read. So the echo is written only once the hello is read, in the same write
as the Accepted (or refusal) frame.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from .codec import (
    DEFAULT_MAX_FRAME_SIZE, PROTOCOLS, ContentType, Frame, FrameDecoder, Header, MessageType,
    Reason, ResultCode, TwinoProtocolError, accepted, encode, new_id, refused,
)

# Before its hello is in (and its token checked) a connection is a stranger: the broker holds
# at most this much of an incomplete hello frame (plus one read), not max_frame_size.
DEFAULT_MAX_HELLO = 64 * 1024


@dataclass(frozen=True)
class Hello:
    """The client's connection data. Ids and names are trimmed; None when not sent."""

    client_id: str | None
    name: str | None
    type: str | None
    token: str | None
    properties: dict[str, str] = field(default_factory=dict)
    method: str = ""
    path: str = ""


@dataclass(frozen=True)
class FrameReceived:
    frame: Frame


@dataclass(frozen=True)
class PingReceived:
    pass


@dataclass(frozen=True)
class PongReceived:
    pass


@dataclass(frozen=True)
class ProtocolError:
    """The connection is unusable; the door closes it without writing anything more."""

    reason: str


class State(enum.Enum):
    PROTOCOL = "waiting for the 8 protocol bytes"
    HELLO = "waiting for the hello frame"
    DECIDING = "hello received, waiting for accept() or refuse()"
    OPEN = "open"
    CLOSED = "closed"


def parse_hello(content: bytes) -> Hello:
    """`METHOD PATH` line, then `Key: value` lines. Keys match case-insensitively.

    A repeated key is an error (the real server drops such a connection too). Lines
    without a colon are ignored, and so is a bare LF instead of CRLF.
    """
    lines = content.decode("utf-8", "replace").split("\n")
    method, _, path = lines[0].rstrip("\r").partition(" ")
    properties: dict[str, str] = {}
    seen: set[str] = set()
    for line in lines[1:]:
        key, colon, value = line.rstrip("\r").partition(":")
        key = key.strip()
        if not colon or not key:
            continue
        if key.lower() in seen:
            raise TwinoProtocolError(Reason.HELLO, f"hello repeats the key {key!r}")
        seen.add(key.lower())
        properties[key] = value.strip()
    known = {key.lower(): value or None for key, value in properties.items()}
    return Hello(known.get(Header.CLIENT_ID.lower()), known.get(Header.CLIENT_NAME.lower()),
                 known.get(Header.CLIENT_TYPE.lower()), known.get(Header.CLIENT_TOKEN.lower()),
                 properties, method, path)


class TwinoServerConnection:
    """Per-connection state machine.

    `receive_data` returns events in wire order; frames that follow the hello in the same read
    come after the Hello event, so the door must act on Hello (accept or refuse) before them.
    Frames carry TTL-1 and frames that arrive with TTL 0 are dropped (counted in `expired`),
    so relaying a received frame unchanged gives the TTL the real server relays.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 id_factory: Callable[[], str] = new_id, max_hello: int = DEFAULT_MAX_HELLO):
        self.state = State.PROTOCOL
        self.max_hello = max_hello  # bytes held before a hello is complete (a stranger's)
        self.protocol: bytes | None = None
        self.hello: Hello | None = None
        self.client_id: str | None = None
        self._new_id = id_factory
        self._prefix = b""
        self._decoder = FrameDecoder(max_frame_size)

    @property
    def decoder(self) -> FrameDecoder:
        """Once OPEN, a door may feed data frames here directly (its hot path): PING and PONG
        then arrive as frames of type 0x09 / 0x0A instead of events."""
        return self._decoder

    @property
    def expired(self) -> int:
        return self._decoder.expired

    def receive_data(self, data: bytes) -> list:
        if self.state is State.CLOSED:
            return []
        if self.state is State.PROTOCOL:
            self._prefix += data
            if len(self._prefix) < 8:
                return []
            self.protocol, data = self._prefix[:8], self._prefix[8:]
            self._prefix = b""
            if self.protocol not in PROTOCOLS:
                return self._fail(f"unknown protocol bytes {self.protocol!r}")
            self.state = State.HELLO
        events: list = []
        try:
            frames = self._decoder.feed(data)
            error = None
        except TwinoProtocolError as exc:
            frames, error = exc.done, str(exc)
        for frame in frames:
            if self.state is State.HELLO:
                if frame.type != MessageType.SERVER or frame.content_type != ContentType.HELLO:
                    return events + self._fail("the first frame is not a hello (Server/101)")
                try:
                    self.hello = parse_hello(frame.content)
                except TwinoProtocolError as exc:
                    return events + self._fail(str(exc))
                self.state = State.DECIDING
                events.append(self.hello)
            elif frame.type == MessageType.PING:
                events.append(PingReceived())
            elif frame.type == MessageType.PONG:
                events.append(PongReceived())
            else:
                events.append(FrameReceived(frame))
        if error is not None:
            events += self._fail(error)
        elif self.state is State.HELLO and self._decoder.buffered > self.max_hello:
            events += self._fail(f"no hello in the first {self.max_hello} bytes")
        return events

    def accept(self, client_id: str | None = None) -> bytes:
        """Echo + Accepted, to be written at once. The id defaults to the hello's, or a new one."""
        self._expect(State.DECIDING)
        self.client_id = client_id or self.hello.client_id or self._new_id()
        self.state = State.OPEN
        return self.protocol + encode(accepted(self.client_id, self._new_id()))

    def refuse(self, code: int = ResultCode.UNAUTHORIZED) -> bytes:
        """Echo + a Server frame carrying `code` (401 auth failure, 503 id in use); then close."""
        self._expect(State.DECIDING)
        self.state = State.CLOSED
        return self.protocol + encode(refused(code, self._new_id()))

    def send(self, frame: Frame) -> bytes:
        self._expect(State.OPEN)
        return encode(frame)

    def _expect(self, state: State) -> None:
        if self.state is not state:
            raise RuntimeError(f"connection is {self.state.value}, not {state.value}")

    def _fail(self, reason: str) -> list:
        self.state = State.CLOSED
        return [ProtocolError(reason)]
