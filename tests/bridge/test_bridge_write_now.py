"""bridge.outbox.write_now on real loopback TCP: bytes go to the socket in the call while
the transport holds nothing unsent, through the transport (in order) while it does, and
every byte arrives once, in order, either way. An Outbox flushes that way unless it has a
cut-off limit, which counts on the transport's own buffer filling up."""
import pytest
import pytest_twisted
from twisted.internet import defer, protocol, reactor
from twisted.internet.testing import StringTransport

from mqksbridge.bridge.outbox import FlushScheduler, Outbox, write_now
from tests.support.waits import until


class Sink(protocol.Protocol):
    def __init__(self):
        self.data = bytearray()

    def dataReceived(self, data):
        self.data += data


class Keep(protocol.Protocol):
    def connectionMade(self):
        self.factory.made.callback(self)


async def _connection():
    """(the server side's tcp transport, what the client side has received)."""
    server = protocol.Factory.forProtocol(Keep)
    server.made = defer.Deferred()
    port = reactor.listenTCP(0, server, interface="127.0.0.1")
    sink = Sink()
    reactor.connectTCP("127.0.0.1", port.getHost().port,
                       protocol.ClientFactory.forProtocol(lambda: sink))
    kept = await server.made
    return kept.transport, sink, port


def _unsent(transport):
    return len(transport.dataBuffer) - transport.offset + transport._tempDataLen


@pytest_twisted.ensureDeferred
async def test_an_idle_transport_hands_the_bytes_to_the_socket_in_the_call():
    transport, sink, port = await _connection()
    try:
        write_now(transport, b"hello")
        assert _unsent(transport) == 0 and transport not in reactor.getWriters()
        await until(lambda: bytes(sink.data) == b"hello", what="the bytes")
    finally:
        transport.loseConnection()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_while_output_is_buffered_bytes_queue_behind_it_in_order():
    transport, sink, port = await _connection()
    try:
        big = bytes(range(256)) * (64 << 10)            # 16 MB: more than the socket takes
        write_now(transport, big)
        assert _unsent(transport) > 0                   # the socket took part of it
        held = _unsent(transport)
        write_now(transport, b"tail")
        assert _unsent(transport) == held + 4           # behind the rest, not ahead of it
        await until(lambda: len(sink.data) == len(big) + 4, timeout=60, what="every byte")
        assert bytes(sink.data) == big + b"tail"
    finally:
        transport.loseConnection()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_closing_transport_and_one_without_a_socket_write_as_before():
    transport, sink, port = await _connection()
    try:
        transport.loseConnection()
        write_now(transport, b"late")                   # the transport's own rules apply
        assert _unsent(transport) == 4
    finally:
        await port.stopListening()
    memory = StringTransport()
    write_now(memory, b"x")
    assert memory.value() == b"x"


class Client:
    paused = False


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize("limit, direct", [(None, True), (1 << 20, False)])
async def test_an_outbox_flushes_to_the_socket_unless_it_has_a_cut_off_limit(limit, direct):
    transport, sink, port = await _connection()
    try:
        outbox = Outbox(transport, FlushScheduler(reactor), Client(), limit=limit)
        outbox.write(b"one ")
        outbox.write(b"turn")
        outbox.flush()
        assert (_unsent(transport) == 0) is direct
        assert (transport in reactor.getWriters()) is not direct
        await until(lambda: bytes(sink.data) == b"one turn", what="the turn's bytes")
    finally:
        transport.loseConnection()
        await port.stopListening()
