"""A line-oriented test client on a real TCP connection, driven by Deferreds."""
from collections import deque

from twisted.internet import defer, endpoints, protocol, reactor


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

    async def line(self, timeout=2.0):
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

    async def lines_n(self, n, timeout=2.0):
        return [await self.line(timeout) for _ in range(n)]

    async def nothing(self, wait=0.1):
        """Assert that no line arrives within `wait` seconds."""
        await sleep(wait)
        assert not self.lines, f"unexpected lines: {list(self.lines)!r}"

    async def request(self, line, timeout=2.0):
        """Send one line and return the next line received."""
        self.send(line)
        return await self.line(timeout)

    def close(self):
        self.transport.loseConnection()
        return self.closed


def sleep(seconds):
    d = defer.Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d
