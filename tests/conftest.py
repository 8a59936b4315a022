"""Shared fixtures: a real broker in the test reactor, listening on loopback."""
import pytest
import pytest_twisted
from twisted.internet import defer, endpoints, reactor

from bridge import config as configuration
from bridge.service import build
from tests.support.lines import LineClient

__all__ = ["LineClient"]


class RunningBroker:
    """The service tree of bridge.service.build, plus the doors' loopback ports."""

    def __init__(self, overrides=None):
        cfg = {"mqks": {"listen": []}}
        for door, values in (overrides or {}).items():
            cfg.setdefault(door, {}).update(values)
        self.config = configuration.load(overrides=cfg)
        self.top, self.broker, self.doors = build(self.config, reactor)
        self.ports = []

    async def start(self):
        from bridge.mqks import MqksFactory
        self.top.startService()
        endpoint = endpoints.serverFromString(reactor, "tcp:0:interface=127.0.0.1")
        port = await endpoint.listen(MqksFactory(self.doors["mqks"]))
        self.ports.append(port)
        self.mqks_port = port.getHost().port
        return self

    async def stop(self):
        for port in self.ports:
            await port.stopListening()
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
