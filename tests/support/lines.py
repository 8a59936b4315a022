"""A line-oriented test client on a real TCP connection, driven by Deferreds.

Timeouts only bound a failure (generous: a busy machine makes a line late, not absent).
That nothing arrives is checked with a barrier, never a quiet period: a `ping` the broker
answers only after everything it had read on this connection before, whose effects on
this connection (replies, deliveries) are written in order ahead of the answer.
"""
import itertools
from collections import deque

from twisted.internet import defer, endpoints, protocol, reactor


WAIT = 10.0
_barriers = itertools.count(1)


class LineClient(protocol.Protocol):
    """Collects received lines; `await line()` takes the next one or fails on timeout."""

    def __init__(self):
        self.lines = deque()
        self.waiters = deque()
        self.buffer = b""
        self.closed = defer.Deferred()
        self.lost = False

    @classmethod
    async def connect(cls, port, host="127.0.0.1"):
        endpoint = endpoints.TCP4ClientEndpoint(reactor, host, port)
        return await endpoints.connectProtocol(endpoint, cls())

    def dataReceived(self, data):
        parts = (self.buffer + data).split(b"\n")
        self.buffer = parts.pop()
        for line in parts:
            if self.waiters:
                self.waiters.popleft().callback(line)
            else:
                self.lines.append(line)

    def connectionLost(self, reason):
        self.lost = True
        for waiter in self.waiters:
            waiter.errback(ConnectionError("connection closed"))
        self.waiters.clear()
        self.closed.callback(None)

    def send(self, *lines):
        self.transport.write(b"".join(
            (line.encode() if isinstance(line, str) else line) + b"\n" for line in lines))

    async def line(self, timeout=WAIT):
        """The next line as str (UTF-8, surrogateescape)."""
        if self.lines:
            raw = self.lines.popleft()
        elif self.lost:
            raise ConnectionError("connection closed")
        else:
            waiter = defer.Deferred()
            self.waiters.append(waiter)
            waiter.addTimeout(timeout, reactor)
            try:
                raw = await waiter
            except defer.TimeoutError:
                self.waiters.remove(waiter) if waiter in self.waiters else None
                raise AssertionError(f"no line within {timeout}s") from None
        return raw.decode("utf-8", "surrogateescape")

    async def lines_n(self, n, timeout=WAIT):
        return [await self.line(timeout) for _ in range(n)]

    async def nothing(self):
        """Assert that nothing is waiting for this client: a ping round trip (its reply
        comes after anything the broker had for us) brings no other line first. Whatever
        another connection did must be known handled before (a confirm, or a ping on it)."""
        tag = f"barrier-{next(_barriers)}"
        self.send(f"{tag} ping {tag}")
        got = []
        while (line := await self.line()) != f"{tag} ok {tag}":
            got.append(line)
        assert not got and not self.lines, f"unexpected lines: {got + list(self.lines)!r}"

    async def sync(self):
        """A ping round trip: every line the broker had for this client has arrived (and
        waits in `lines`, in order) when it returns."""
        tag = f"barrier-{next(_barriers)}"
        self.send(f"{tag} ping {tag}")
        got = []
        while (line := await self.line()) != f"{tag} ok {tag}":
            got.append(line)
        self.lines.extendleft(line.encode("utf-8", "surrogateescape") for line in reversed(got))

    async def request(self, line, timeout=WAIT):
        """Send one line and return the next line received."""
        self.send(line)
        return await self.line(timeout)

    def close(self):
        self.transport.loseConnection()
        return self.closed
