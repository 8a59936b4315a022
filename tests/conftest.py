"""Shared fixtures: a real broker in the test reactor, listening on loopback."""
import os
import sys
import threading

import pytest
import pytest_twisted
from hypothesis import HealthCheck, settings
from twisted.internet import defer, reactor, task
from twisted.logger import globalLogPublisher

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.service import build
from tests.support import process
from tests.support.lines import LineClient
from tests.support.malamute import AsyncMalamute, RawPeer
from tests.support.twino import AsyncTwino
from tests.support.wire import START, Harness

__all__ = ["LineClient"]

# Property tests judge results, not speed: on a loaded machine an example may take longer
# than hypothesis' default 200 ms deadline, and that must not fail the suite.
settings.register_profile("mqksbridge", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mqksbridge")


class RunningBroker:
    """The real service tree of bridge.service.build, every door on an ephemeral
    loopback port; `port(door)` tells where a door listens.

    Its time is a task.Clock: no timer fires (sweeps, keep-alive, expiry, ack timeouts,
    delete-when-unused) unless a test moves it with `advance`; sockets are real."""

    LOOPBACK = {"mqks": "tcp:0:interface=127.0.0.1", "twino": "tcp:0:interface=127.0.0.1",
                "malamute": "tcp://127.0.0.1:*", "admin": "tcp:0:interface=127.0.0.1"}

    def __init__(self, overrides=None, data_dir=None):
        cfg = {door: {"listen": [endpoint]} for door, endpoint in self.LOOPBACK.items()}
        for door, values in (overrides or {}).items():
            cfg.setdefault(door, {}).update(values)
        if data_dir is not None:
            cfg["data_dir"] = str(data_dir)
        self.config = configuration.load(overrides=cfg)
        self.clock = task.Clock()
        self.clock.advance(START)
        self.top, self.broker, self.doors, self.listeners = build(self.config, reactor,
                                                                  self.clock)
        self.twino_clients = []
        self.malamute_peers = []
        self.malamute_clients = []

    def advance(self, seconds, step=None):
        """Move the broker's time on by `seconds`, in steps no longer than the shortest
        sweep interval, so every periodic sweep runs as often as it would have."""
        step = step or min(self.config["broker"]["sweep_interval"],
                           self.config["twino"]["check_interval"],
                           self.config["malamute"]["check_interval"])
        while seconds > 1e-9:
            self.clock.advance(min(step, seconds))
            seconds -= step

    async def start(self):
        self.top.startService()
        for services in self.listeners.values():
            for svc in services:
                if hasattr(svc, "ready"):
                    await svc.ready
        return self

    def port(self, door):
        svc = self.listeners[door][0]
        if hasattr(svc, "endpoints"):          # ZeroMQ: "tcp://127.0.0.1:PORT"
            return int(svc.endpoints[0].rsplit(":", 1)[1])
        return svc.port.getHost().port

    def endpoint(self, door="malamute"):
        """The first ZeroMQ endpoint a door bound, wildcard port resolved."""
        return self.listeners[door][0].endpoints[0]

    @property
    def mqks_port(self):
        return self.port("mqks")

    async def stop(self):
        for client in self.twino_clients:
            client.client.close()
        for peer in self.malamute_peers:
            peer.close()
        for client in self.malamute_clients:
            if client.client._socket is not None:
                client.client._socket.close(0)
        # The stop's deadline is on our clock, which only the test moves. Sockets that
        # have not closed after the bound in real seconds (a client that stopped reading)
        # are the deadline's to end: the clock is moved to it, and the stop aborts them.
        overdue = reactor.callLater(self.top.timeout, self.clock.advance, self.top.timeout)
        try:
            await self.top.stopService()
        finally:
            if overdue.active():
                overdue.cancel()

    async def mqks(self):
        """A connected MQKS line client."""
        return await LineClient.connect(self.mqks_port)

    async def malamute_raw(self, address=None):
        """A raw DEALER on the Malamute door; opened with `address` unless None."""
        peer = RawPeer(self.endpoint("malamute"))
        self.malamute_peers.append(peer)
        return peer if address is None else await peer.open(address)

    async def malamute(self, address="", **kwargs):
        """A connected Malamute client (bridge.clients.malamute), calls run in threads."""
        client = await AsyncMalamute.connect(self.endpoint("malamute"), address, **kwargs)
        self.malamute_clients.append(client)
        return client

    async def twino(self, **kwargs):
        """A connected Twino client: the blocking client, each call run in a thread."""
        client = await AsyncTwino.connect(self.port("twino"), **kwargs)
        self.twino_clients.append(client)
        return client


@pytest.fixture
def server():
    running = RunningBroker()
    pytest_twisted.blockon(defer.ensureDeferred(running.start()))
    yield running
    pytest_twisted.blockon(defer.ensureDeferred(running.stop()))


@pytest.fixture
def running():
    """Start a RunningBroker with overrides: `await running(overrides)`; stopped after."""
    made = []

    async def start(overrides):
        broker = RunningBroker(overrides)
        made.append(broker)
        return await broker.start()
    yield start
    for broker in made:
        pytest_twisted.blockon(defer.ensureDeferred(broker.stop()))


@pytest.fixture
def harness():
    """The fast layer (tests.support.wire): every door on StringTransports, a task.Clock."""
    built = Harness()
    yield built
    built.stop()


@pytest.fixture
def logged_failures():
    """Every failure logged (log.failure) while the test runs."""
    seen = []

    def observer(event):
        if event.get("log_failure") is not None:
            seen.append(event["log_failure"])
    globalLogPublisher.addObserver(observer)
    yield seen
    globalLogPublisher.removeObserver(observer)


def pytest_sessionfinish(session, exitstatus):
    process.stop_all()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A non-daemon thread still alive after the session (and after pytest-twisted stopped
    the reactor) would keep the interpreter from exiting: CI would wait for its time limit
    after a green summary. Name the threads and end the process with a failure instead."""
    stuck = [t.name for t in threading.enumerate()
             if t.is_alive() and not t.daemon and t is not threading.main_thread()]
    if stuck:
        sys.stderr.write(f"\nthreads left running after the tests: {stuck}\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(3)
