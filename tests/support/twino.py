"""The blocking Twino client (bridge.clients.twino) driven from async tests.

Every call runs in the reactor's thread pool (`await c.join("ch")`), so the broker keeps
running in the reactor thread while the client blocks. One call at a time per client.
"""
from twisted.internet.threads import deferToThread

from mqksbridge.bridge.clients import twino


class AsyncTwino:
    def __init__(self, client):
        self.client = client

    @classmethod
    async def connect(cls, port, **kwargs):
        return cls(await deferToThread(twino.connect, "127.0.0.1", port, **kwargs))

    @property
    def client_id(self):
        return self.client.client_id

    def __getattr__(self, name):
        method = getattr(self.client, name)
        return lambda *args, **kwargs: deferToThread(method, *args, **kwargs)

    async def nothing(self):
        """Assert that no frame (other than PING/PONG) came before a PING round trip: the
        broker answers it after everything it had for this client."""
        frame = await deferToThread(lambda: (self.client.ping(), self.client.recv(0))[1])
        assert frame is None, f"unexpected frame: {frame!r}"

    async def received(self):
        """Every frame that came before a PING round trip (PING/PONG left out)."""
        def run():
            self.client.ping()
            frames = []
            while (frame := self.client.recv(0)) is not None:
                frames.append(frame)
            return frames
        return await deferToThread(run)
