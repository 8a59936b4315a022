"""Connections that never finish their handshake are closed after
`handshake_timeout`, and an expired Malamute session closes its TCP connection. Real
loopback sockets into the broker of the test reactor, whose time is a task.Clock: the
timeouts move only when the test advances it (one periodic sweep per door, no timer per
connection)."""
import pytest
import pytest_twisted
from twisted.internet import defer, protocol, reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

from mqksbridge.protocols.malamute import codec as malamute
from mqksbridge.protocols.twino.codec import PROTOCOL
from mqksbridge.protocols.zmtp import codec as zmtp
from tests.conftest import RunningBroker
from tests.support.waits import until

TIMEOUTS = {"malamute": {"handshake_timeout": 2.0, "timeout": 5.0, "check_interval": 0.5},
            "twino": {"handshake_timeout": 2.0, "check_interval": 0.5}}


class Raw(protocol.Protocol):
    """A client socket that records what it is sent and whether the broker hung up."""

    def __init__(self):
        self.data = b""
        self.lost = False

    def dataReceived(self, data):
        self.data += data

    def connectionLost(self, reason):
        self.lost = True


@pytest.fixture
def timed():
    running = RunningBroker(TIMEOUTS)
    pytest_twisted.blockon(defer.ensureDeferred(running.start()))
    yield running
    pytest_twisted.blockon(defer.ensureDeferred(running.stop()))


async def raw(broker, door, data=b""):
    traffic = broker.doors[door].traffic
    before = traffic.opened
    conn = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", broker.port(door)),
                                 Raw())
    await until(lambda: traffic.opened > before, what="the broker to see the connection")
    if data:
        conn.transport.write(data)
    return conn


async def opened(broker, address):
    """A ZMTP DEALER with an open Malamute session."""
    conn = await raw(broker, "malamute", zmtp.Connection("DEALER").preamble()
                     + zmtp.message(malamute.encode(malamute.ConnectionOpen(address))))
    door = broker.doors["malamute"]
    await until(lambda: address in door.owners, what="the session to open")
    return conn


@pytest_twisted.ensureDeferred
async def test_malamute_connections_without_an_open_session_are_closed_in_time(timed):
    silent = await raw(timed, "malamute")                    # not even a greeting
    greeted = await raw(timed, "malamute", zmtp.Connection("DEALER").preamble())
    router = timed.doors["malamute"].transport
    await until(lambda: len(router.peers) == 1, what="the ZMTP handshake")
    session = await opened(timed, "worker")
    timed.advance(1.5)
    assert not (silent.lost or greeted.lost or session.lost)
    timed.advance(1.0)
    await until(lambda: silent.lost and greeted.lost, what="both to be closed")
    assert greeted.data.endswith(zmtp.error("no OPEN in time"))
    assert not session.lost and "worker" in timed.doors["malamute"].owners
    assert timed.doors["malamute"].counters["handshake_timeouts"] == 2
    session.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_twino_connections_without_a_hello_are_closed_in_time(timed):
    silent = await raw(timed, "twino")
    half = await raw(timed, "twino", PROTOCOL)                # protocol bytes, no hello
    timed.advance(1.5)
    assert not (silent.lost or half.lost)
    timed.advance(1.0)
    await until(lambda: silent.lost and half.lost, what="both to be closed")


@pytest_twisted.ensureDeferred
async def test_an_expired_malamute_session_closes_its_connection(timed):
    quiet = await opened(timed, "quiet")
    talker = await opened(timed, "talker")
    ping = zmtp.message(malamute.encode(malamute.ConnectionPing()))
    for _ in range(12):                                       # 6 s; the timeout is 5 s
        talker.transport.write(ping)
        received = len(talker.data)
        await until(lambda: len(talker.data) > received, what="PONG")
        timed.advance(0.5)
    await until(lambda: quiet.lost, what="the expired session's connection to close")
    assert not talker.lost
    door = timed.doors["malamute"]
    assert door.counters["expired"] == 1 and list(door.owners) == ["talker"]
    talker.transport.loseConnection()
