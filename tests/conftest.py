"""Shared fixtures: a real broker in the test reactor, listening on loopback."""
import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from bridge import config as configuration
from bridge.service import build
from tests.support.lines import LineClient

__all__ = ["LineClient"]


class RunningBroker:
    """The real service tree of bridge.service.build, every door on an ephemeral
    loopback port; `port(door)` tells where a door listens."""

    LOOPBACK = {"mqks": "tcp:0:interface=127.0.0.1"}

    def __init__(self, overrides=None):
        cfg = {door: {"listen": [endpoint]} for door, endpoint in self.LOOPBACK.items()}
        for door, values in (overrides or {}).items():
            cfg.setdefault(door, {}).update(values)
        self.config = configuration.load(overrides=cfg)
        self.top, self.broker, self.doors, self.listeners = build(self.config, reactor)

    async def start(self):
        self.top.startService()
        for services in self.listeners.values():
            for svc in services:
                if hasattr(svc, "ready"):
                    await svc.ready
        return self

    def port(self, door):
        return self.listeners[door][0].port.getHost().port

    @property
    def mqks_port(self):
        return self.port("mqks")

    async def stop(self):
        await self.top.stopService()

    async def mqks(self):
        """A connected MQKS line client."""
        return await LineClient.connect(self.mqks_port)


@pytest.fixture
def server():
    running = RunningBroker()
    pytest_twisted.blockon(defer.ensureDeferred(running.start()))
    yield running
    pytest_twisted.blockon(defer.ensureDeferred(running.stop()))
