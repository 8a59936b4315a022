"""Malamute peers for tests against the broker running in the test reactor.

Nothing here may block the reactor: raw DEALER peers poll their socket and yield
between tries; the blocking MalamuteClient runs each call in a worker thread. Timeouts
only bound a failure; that nothing arrives is checked with a CONNECTION-PING barrier (the
broker answers it after everything it had for this peer), never a quiet period.
"""
import zmq
from twisted.internet import threads

from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.protocols.malamute import codec
from tests.support.waits import received, until


class AsyncMalamute:
    """bridge.clients.malamute.MalamuteClient with every method awaitable (one thread
    at a time uses the socket: each call is awaited before the next)."""

    def __init__(self, client):
        self.client = client

    @classmethod
    async def connect(cls, endpoint, address="", **kwargs):
        client = MalamuteClient(endpoint, address, **kwargs)
        await threads.deferToThread(client.connect)
        return cls(client)

    def run(self, fn):
        """fn(client) in a worker thread: many calls for one await."""
        return threads.deferToThread(fn, self.client)

    async def nothing(self):
        """Assert that no delivery came before a PING round trip."""
        got = await self.run(lambda client: (client.ping(), client.recv(0))[1])
        assert got is None, f"unexpected delivery {got!r}"

    async def received(self):
        """Every delivery that came before a PING round trip."""
        def run(client):
            client.ping()
            out = []
            while (got := client.recv(0)) is not None:
                out.append(got)
            return out
        return await self.run(run)

    def __getattr__(self, name):
        method = getattr(self.client, name)
        return lambda *args, **kwargs: threads.deferToThread(method, *args, **kwargs)


class RawPeer:
    """One DEALER socket speaking Malamute frames (or any bytes) to the broker."""

    def __init__(self, endpoint, context=None):
        self.sock = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, *commands):
        for command in commands:
            self.sock.send_multipart(codec.encode(command))

    def send_frames(self, frames):
        self.sock.send_multipart(frames)

    async def frames(self, timeout=10.0):
        """The next multipart message; TimeoutError if none arrives in time."""
        return await until(received(lambda: self.sock.recv_multipart(zmq.NOBLOCK), zmq.Again),
                           timeout, what="a message")

    async def recv(self, timeout=10.0):
        return codec.decode(await self.frames(timeout))

    async def call(self, command, timeout=10.0):
        self.send(command)
        return await self.recv(timeout)

    async def nothing(self):
        """Assert that nothing came before the answer to a CONNECTION-PING: PONG, or
        ERROR 500 from a peer without a session. (The PING shows an open session alive.)"""
        got = await self.call(codec.ConnectionPing())
        assert got in (codec.ConnectionPong(), codec.Error(500, "")), f"unexpected {got!r}"

    async def open(self, address=""):
        reply = await self.call(codec.ConnectionOpen(address))
        assert reply == codec.Ok(200, ""), reply
        return self

    def close(self):
        self.sock.close(0)
