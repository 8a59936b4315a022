"""A small blocking Twino TMQP/2.0 client (sockets only) for tests, benchmarks and scripts.

It speaks the wire the way the real 3.7.2 client does: protocol bytes and hello in one write,
then the 8-byte echo, then Accepted. It is single-threaded: server PINGs are answered while it
is reading (any call that waits), and frames that arrive while it waits for something else are
kept in order for `recv`. Not thread-safe. `crossed(frame)` reads what a message from another
door carries.
"""
from __future__ import annotations

import socket
import ssl
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from mqksbridge.bridge.clients.failover import ROUNDS, Failover
from mqksbridge.protocols.twino.codec import (
    PING_BYTES, PONG_BYTES, PROTOCOL, ContentType, Frame, FrameDecoder, Header, MessageType,
    NackReason, NoContent, acknowledge, encode, new_id, nack_reason, response,
)


class TwinoError(Exception):
    """The server broke the protocol, refused us, or refused a pull."""


class TwinoRefused(TwinoError):
    def __init__(self, code: int):
        super().__init__(f"server refused the connection with code {code}")
        self.code = code


@dataclass(frozen=True)
class AckResult:
    """Outcome of a push or direct message that waited for its ack.

    A Response with the same id (how the server reports push errors) counts as a failure;
    its result code is `frame.content_type`.
    """

    ok: bool
    reason: str | None
    frame: Frame


@dataclass(frozen=True)
class Crossed:
    """What a frame from another door carries (docs/mapping.md "to Twino"): the subject,
    the origin door, the publisher, the frames (split by `Frame-Lengths`) and the headers
    other than those three."""

    subject: str | None
    origin: str | None
    sender: str | None
    frames: tuple
    headers: list


_METADATA = ("subject", "x-origin", "frame-lengths")


def crossed(frame: Frame) -> Crossed:
    lengths = frame.header("Frame-Lengths")
    frames: tuple = (frame.content,)
    if lengths is not None:
        sizes = [int(n) for n in lengths.split(",")] if lengths else []
        at, parts = 0, []
        for n in sizes:
            parts.append(frame.content[at:at + n])
            at += n
        frames = tuple(parts)
    headers = [(k, v) for k, v in frame.headers or () if k.lower() not in _METADATA]
    return Crossed(frame.header("Subject"), frame.header("X-Origin"), frame.source, frames,
                   headers)


def _hello(client_id, name, client_type, token) -> bytes:
    lines = ["CONNECT /"]
    for key, value in ((Header.CLIENT_NAME, name), (Header.CLIENT_TYPE, client_type),
                       (Header.CLIENT_TOKEN, token), (Header.CLIENT_ID, client_id)):
        if value:
            lines.append(f"{key}: {value}")
    return ("\r\n".join(lines) + "\r\n").encode("utf-8")


def _content(value) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _headers(headers) -> list[tuple[str, str]] | None:
    items = list(headers.items() if isinstance(headers, dict) else headers)
    return items or None


def _unanswered(frame: Frame) -> None:
    """What a frame sent without waiting returns."""
    return None


def connect(host: str = "127.0.0.1", port: int = 22200, client_id: str | None = None,
            name: str | None = None, type: str | None = None, token: str | None = None,
            timeout: float = 10.0, keep_wire_ttl: bool = False,
            tls: ssl.SSLContext | None = None, *, addresses=None, on_failover=None,
            rounds: int = ROUNDS) -> TwinoClient:
    """Open a socket and do the real handshake. Without `client_id` the server picks one.
    With `tls` (an ssl.SSLContext) the connection is TLS, its server name `host`.

    `addresses`, a list of (host, port), replaces `host` and `port` and turns failover on
    (docs/clients.md, "Failover"): the first that answers serves, and a lost connection
    moves to the next one, with the same hello and the channels joined again.

    `keep_wire_ttl` shows each frame's TTL as sent and keeps TTL-0 frames (for tests of the
    server's TTL handling); normally TTL is decremented and TTL-0 frames are dropped.
    """
    hello = (client_id, name, type, token)
    client = TwinoClient(None, timeout, keep_wire_ttl)
    if addresses is None:
        client._open((host, port), hello, tls)
    else:
        client._connect_any(Failover(addresses, on_failover=on_failover, rounds=rounds),
                            hello, tls)
    return client


class TwinoClient:
    def __init__(self, sock: socket.socket, timeout: float = 10.0, keep_wire_ttl: bool = False):
        self.sock = sock
        self.timeout = timeout
        self.client_id: str | None = None
        self._keep_wire_ttl = keep_wire_ttl
        self._decoder = FrameDecoder(apply_ttl=not keep_wire_ttl)
        self._wire: deque[Frame] = deque()  # decoded, not yet looked at
        self._inbox: deque[Frame] = deque()  # looked at while waiting for something else
        self._failover: Failover | None = None

    def _connect_any(self, failover: Failover, hello, tls) -> None:
        """Connect to the first live address, remembering what a failover replays."""
        self._failover, self._hello, self._tls = failover, hello, tls
        self._joined: list[str] = []
        self._events: dict[tuple, bool] = {}     # (event, channel, queue id), in order
        self._unacked: set[str] = set()          # ids delivered here, not acked yet
        self._stale: set[str] = set()            # ids delivered on a lost connection
        failover.connect(self._reopen)

    def _open(self, address, hello, tls) -> None:
        """Connect, handshake, and with failover join every channel joined before and
        subscribe every event subscribed before."""
        host, port = address
        sock = socket.create_connection((host, port), timeout=self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=host)
            self.sock = sock
            self._decoder = FrameDecoder(apply_ttl=not self._keep_wire_ttl)
            self._wire.clear()
            self._handshake(*hello)
            if self._failover is not None:
                self._restore()
        except BaseException:
            sock.close()
            raise

    @property
    def address(self):
        """The (host, port) in use."""
        if self._failover is None:
            return self.sock.getpeername()[:2]
        return self._failover.current

    def _restore(self) -> None:
        for channel in self._joined:
            code = self._operation(ContentType.JOIN, channel, True, None)
            if code != 0:
                raise TwinoError(f"joining channel {channel!r} again after a failover "
                                 f"failed with code {code}")
        for (event, channel, queue_id) in self._events:
            if self._subscribe(event, channel, queue_id, True, None) != 0:
                raise TwinoError(f"subscribing to {event!r} again after a failover failed")

    def _reconnect(self) -> None:
        """After a lost connection: frames that want an ack and were not acked are the
        broker's to redeliver (with retry + 1), so acks for them are not sent on the next
        connection, and those not yet handed out are dropped."""
        self.sock.close()
        self._inbox = deque(f for f in (*self._inbox, *self._wire) if not f.pending_ack)
        self._stale |= self._unacked
        self._unacked = set()
        self._failover.connect(self._reopen)

    def _reopen(self, address) -> None:
        self._open(address, self._hello, self._tls)

    def _retrying(self, operation, *args):
        """`operation(*args)`; with failover, again on the next gateway after a lost
        connection."""
        if self._failover is None:
            return operation(*args)
        return self._failover.retrying(self._reconnect, operation, *args)

    def __enter__(self) -> TwinoClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- raw frames ---------------------------------------------------------------------------

    def send_frame(self, frame: Frame | bytes) -> None:
        self.sock.sendall(frame if isinstance(frame, bytes) else encode(frame))

    def recv_frame(self, timeout: float | None = None) -> Frame | None:
        """The next frame exactly as received (PINGs included, nothing answered), or None."""
        if self._inbox:
            return self._inbox.popleft()
        return self._next(self._deadline(timeout))

    # -- connection ---------------------------------------------------------------------------

    def _handshake(self, client_id, name, client_type, token) -> None:
        hello = Frame(MessageType.SERVER, first_acquirer=True, message_id=new_id(),
                      source=client_id, content_type=ContentType.HELLO,
                      content=_hello(client_id, name, client_type, token))
        self.sock.sendall(PROTOCOL + encode(hello))
        echo = self._read_exact(8)
        if echo != PROTOCOL:
            raise TwinoError(f"unexpected server response {echo!r}")
        frame = self._wait(lambda f: f.type == MessageType.SERVER, None)
        if frame.content_type != ContentType.ACCEPTED:
            raise TwinoRefused(frame.content_type)
        self.client_id = frame.target

    def ping(self, timeout: float | None = None) -> float:
        """Round-trip time of a PING/PONG, in seconds."""
        started = time.monotonic()

        def attempt():
            self.sock.sendall(PING_BYTES)
            self._wait(lambda f: f.type == MessageType.PONG, timeout)
        self._retrying(attempt)
        return time.monotonic() - started

    def close(self) -> None:
        self.sock.close()

    @property
    def failovers(self) -> int:
        """How many times the client moved to another address."""
        return 0 if self._failover is None else self._failover.moves

    def _exchange(self, frame: Frame, answer: Callable, *args):
        """Send `frame` and return `answer(frame, *args)`; with failover, both again on
        the next gateway after a lost connection, the frame's source set to the new
        connection's client id and its message id kept (at least once: the id tells
        copies apart)."""
        return self._retrying(self._send_answered, frame, answer, args)

    def _send_answered(self, frame: Frame, answer: Callable, args: tuple):
        frame.source = self.client_id
        self.send_frame(frame)
        return answer(frame, *args)

    def _response(self, frame: Frame, timeout: float | None) -> Frame:
        return self._wait(self._answer_to(frame, MessageType.RESPONSE), timeout)

    def _sent(self, frame: Frame, wait_ack: bool, timeout: float | None) -> AckResult | None:
        """A push, router or direct message, waiting for its ack when asked to."""
        if wait_ack:
            return self._exchange(frame, self._ack_result, timeout)
        return self._exchange(frame, _unanswered)

    # -- channels and queues ------------------------------------------------------------------

    def join(self, channel: str, wait_response: bool = True,
             timeout: float | None = None) -> int | None:
        """Result code of the join (0 = ok), or None when not waiting. With failover, a
        joined channel is joined again on the next gateway."""
        code = self._retrying(
            lambda: self._operation(ContentType.JOIN, channel, wait_response, timeout))
        if self._failover is not None and code in (0, None) and channel not in self._joined:
            self._joined.append(channel)
        return code

    def leave(self, channel: str, wait_response: bool = True,
              timeout: float | None = None) -> int | None:
        if self._failover is not None and channel in self._joined:
            self._joined.remove(channel)
        return self._retrying(
            lambda: self._operation(ContentType.LEAVE, channel, wait_response, timeout))

    def _operation(self, code, target, wait_response, timeout) -> int | None:
        frame = Frame(MessageType.SERVER, pending_response=wait_response, message_id=new_id(),
                      source=self.client_id, target=target, content_type=code)
        self.send_frame(frame)
        if not wait_response:
            return None
        return self._wait(self._answer_to(frame, MessageType.RESPONSE), timeout).content_type

    def push(self, channel: str, queue_id: int, content, headers=(), wait_ack: bool = False,
             high_priority: bool = False, timeout: float | None = None,
             message_id: str | None = None) -> AckResult | None:
        """A message into a queue, under `message_id` (default: a new one)."""
        frame = Frame(MessageType.QUEUE_MESSAGE, high_priority=high_priority,
                      pending_ack=wait_ack, message_id=message_id or new_id(),
                      source=self.client_id, target=channel, content_type=queue_id,
                      headers=_headers(headers), content=_content(content))
        return self._sent(frame, wait_ack, timeout)

    def recv(self, timeout: float | None = None) -> Frame | None:
        """Next incoming frame other than PING/PONG (PINGs get their PONG), or None on timeout.
        With failover, a lost connection moves to the next gateway and waits there."""
        frame = self._retrying(self._recv, timeout)
        if self._failover is not None and frame is not None and frame.pending_ack:
            self._stale.discard(frame.message_id)       # a redelivery on this connection
            self._unacked.add(frame.message_id)
        return frame

    def _recv(self, timeout: float | None) -> Frame | None:
        deadline = self._deadline(timeout)
        while True:
            frame = self._inbox.popleft() if self._inbox else self._next(deadline)
            if frame is None or not self._ping_pong(frame):
                return frame

    def ack(self, frame: Frame) -> None:
        """Acknowledge a frame. With failover, one delivered on a lost connection is not
        acked on the next (the broker redelivers it)."""
        self._settle(frame, lambda: acknowledge(frame, self.client_id))

    def nack(self, frame: Frame, reason: str = NackReason.NONE) -> None:
        self._settle(frame, lambda: acknowledge(frame, self.client_id, reason))

    def _settle(self, frame: Frame, answer: Callable[[], Frame]) -> None:
        if self._failover is None:
            self.send_frame(answer())
            return

        def attempt():
            if frame.message_id in self._stale:     # its connection was lost, perhaps now
                self._stale.discard(frame.message_id)
                return
            self.send_frame(answer())
            self._unacked.discard(frame.message_id)
        self._retrying(attempt)

    def pull(self, channel: str, queue_id: int, count: int, clear: bool | str = False,
             order_lifo: bool = False, info: bool = False,
             timeout: float | None = None) -> list[Frame]:
        """Pulled messages in order. An empty queue gives []; Unacceptable/Unauthorized raise.

        `clear` is True (= "all"), or "High-Priority" / "Default-Priority".
        """
        headers = [(Header.COUNT, str(count))]
        if clear:
            headers.append((Header.CLEAR, "all" if clear is True else clear))
        if info:
            headers.append((Header.INFO, "yes"))
        if order_lifo:
            headers.append((Header.ORDER, "LIFO"))
        request = Frame(MessageType.QUEUE_PULL_REQUEST, message_id=new_id(),
                        source=self.client_id, target=channel, content_type=queue_id,
                        headers=headers)
        return self._exchange(request, self._pulled, timeout)

    def _pulled(self, request: Frame, timeout: float | None) -> list[Frame]:
        def ours(frame: Frame) -> bool:
            return (frame.type == MessageType.QUEUE_MESSAGE
                    and frame.header(Header.REQUEST_ID) == request.message_id)

        messages = []
        while True:
            frame = self._wait(ours, timeout)
            status = frame.header(Header.NO_CONTENT)
            if status is None:
                messages.append(frame)
            elif status in (NoContent.END, NoContent.EMPTY):
                return messages
            else:
                raise TwinoError(f"pull refused: {status}")

    def operation(self, content_type: int, target: str | None = None, headers=(), content=b"",
                  timeout: float | None = None) -> Frame:
        """Any server operation (601-663) with PendingResponse; returns the Response frame
        (result code in content_type, JSON in content)."""
        frame = Frame(MessageType.SERVER, pending_response=True, message_id=new_id(),
                      source=self.client_id, target=target, content_type=content_type,
                      headers=_headers(headers), content=_content(content))
        return self._exchange(frame, self._response, timeout)

    def subscribe(self, event: str, channel: str | None = None, queue_id: int | None = None,
                  subscribe: bool = True, timeout: float | None = None) -> int:
        """Event subscription (or unsubscription); returns 0 (ok) or 1 (failed). With
        failover, a subscription is made again on the next gateway."""
        code = self._retrying(lambda: self._subscribe(event, channel, queue_id, subscribe,
                                                      timeout))
        if self._failover is not None and code == 0:
            key = (event, channel, queue_id)
            if subscribe:
                self._events[key] = True
            else:
                self._events.pop(key, None)
        return code

    def _subscribe(self, event, channel, queue_id, subscribe, timeout) -> int:
        headers = [(Header.CHANNEL_NAME, channel)] if channel else []
        if queue_id is not None:
            headers.append((Header.QUEUE_ID, str(queue_id)))
        frame = Frame(MessageType.EVENT, pending_response=True, message_id=new_id(),
                      source=self.client_id, target=event, content_type=int(subscribe),
                      headers=headers or None)
        self.send_frame(frame)
        return self._wait(self._answer_to(frame, MessageType.RESPONSE), timeout).content_type

    def publish_router(self, router: str, content, content_type: int = 0, headers=(),
                       wait_ack: bool = False, timeout: float | None = None) -> AckResult | None:
        """A Router frame; with `wait_ack` the router's ack (or nack) comes back."""
        frame = Frame(MessageType.ROUTER, pending_ack=wait_ack, message_id=new_id(),
                      source=self.client_id, target=router, content_type=content_type,
                      headers=_headers(headers), content=_content(content))
        return self._sent(frame, wait_ack, timeout)

    # -- client to client ---------------------------------------------------------------------

    def send_direct(self, target: str, content, content_type: int = 0, headers=(),
                    wait_ack: bool = False, high_priority: bool = False,
                    first_acquirer: bool = False,
                    timeout: float | None = None) -> AckResult | None:
        """To a client id, `@name:NAME` or `@type:TYPE`."""
        frame = Frame(MessageType.DIRECT_MESSAGE, first_acquirer, high_priority,
                      pending_ack=wait_ack, message_id=new_id(), source=self.client_id,
                      target=target, content_type=content_type, headers=_headers(headers),
                      content=_content(content))
        return self._sent(frame, wait_ack, timeout)

    def request(self, target: str, content, content_type: int = 0, headers=(),
                timeout: float | None = None) -> Frame:
        """Direct message with PendingResponse; returns the Response (result in content_type)."""
        frame = Frame(MessageType.DIRECT_MESSAGE, pending_response=True, message_id=new_id(),
                      source=self.client_id, target=target, content_type=content_type,
                      headers=_headers(headers), content=_content(content))
        return self._exchange(frame, self._response, timeout)

    def respond(self, frame: Frame, content=b"", code: int = 0) -> None:
        self.send_frame(response(frame, code, _content(content), source=self.client_id))

    # -- waiting ------------------------------------------------------------------------------

    @staticmethod
    def _answer_to(request: Frame, *types: int) -> Callable[[Frame], bool]:
        return lambda f: f.type in types and f.message_id == request.message_id

    def _ack_result(self, frame: Frame, timeout) -> AckResult:
        answer = self._wait(
            self._answer_to(frame, MessageType.ACKNOWLEDGE, MessageType.RESPONSE), timeout)
        if answer.type == MessageType.RESPONSE:
            return AckResult(False, None, answer)
        reason = nack_reason(answer)
        return AckResult(reason is None, reason, answer)

    def _wait(self, match: Callable[[Frame], bool], timeout: float | None) -> Frame:
        """Read until a frame matches; others are kept for recv(). TimeoutError when late."""
        deadline = self._deadline(timeout)
        while True:
            frame = self._next(deadline)
            if frame is None:
                raise TimeoutError("no answer from the Twino server in time")
            if match(frame):
                return frame
            if not self._ping_pong(frame):
                self._inbox.append(frame)

    def _ping_pong(self, frame: Frame) -> bool:
        if frame.type == MessageType.PING:
            self.sock.sendall(PONG_BYTES)
            return True
        return frame.type == MessageType.PONG

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def _next(self, deadline: float) -> Frame | None:
        """Next decoded frame from the socket, or None at the deadline."""
        while not self._wire:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return None
            if not data:
                raise ConnectionError("the Twino server closed the connection")
            self._wire.extend(self._decoder.feed(data))
        return self._wire.popleft()

    def _read_exact(self, size: int) -> bytes:
        """Raw bytes before framing starts (the protocol echo)."""
        self.sock.settimeout(self.timeout)
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("the Twino server closed the connection")
            data += chunk
        return data
