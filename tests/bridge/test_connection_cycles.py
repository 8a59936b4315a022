"""Closed connections are freed by reference counting alone, on every door.

The broker raises the collector's thresholds (broker.gc_threshold) and collects only the
young generation on a timer (broker.gc_young_interval), so an object that survives a few
young collections waits for a full collection, which comes rarely. A closed connection
whose objects referred to each other (the protocol, its Input's `resumed`, its Traffic's
`goodbye`) was such garbage: in the soak, 30 garbage connections closed a second grew the
broker by about 7 MB a minute, found only at exit by the one full collection. Each door's
connectionLost now lets go of the references that closed those cycles; these tests run
with the collector off and fail if a closed connection is still alive.
"""
import gc
import socket
import weakref

import pytest
import pytest_twisted

from mqksbridge.protocols.malamute import codec as malamute
from mqksbridge.protocols.twino.codec import PROTOCOL, ContentType, Frame, MessageType
from mqksbridge.protocols.twino.codec import encode, new_id
from mqksbridge.protocols.zmtp import codec as zmtp
from tests.support.waits import turn, until

GARBAGE = bytes(range(256)) * 8
TWINO_HELLO = PROTOCOL + encode(Frame(MessageType.SERVER, first_acquirer=True,
                                      message_id=new_id(), content_type=ContentType.HELLO,
                                      content=b"CONNECT /\r\n"))
MALAMUTE_OPEN = zmtp.Connection("DEALER").preamble() + zmtp.message(
    malamute.encode(malamute.ConnectionOpen("cycles")))


def _factory(server, door):
    if door == "malamute":
        return server.doors["malamute"].transport       # the ROUTER is the factory
    return server.listeners[door][0].factory


def _watch(factory):
    """Weak references to the protocols `factory` builds from now on (observed only)."""
    made = []
    build = factory.buildProtocol

    def recording(addr):
        protocol = build(addr)
        made.append(weakref.ref(protocol))
        return protocol
    factory.buildProtocol = recording
    return made


@pytest.mark.parametrize("door,sent", [
    ("mqks", GARBAGE), ("mqks", b"c1 consume cycles --add e\nc2 ping x\n"),
    ("twino", GARBAGE), ("twino", TWINO_HELLO),
    ("malamute", GARBAGE), ("malamute", MALAMUTE_OPEN)],
    ids=["mqks-garbage", "mqks-consumer", "twino-garbage", "twino-hello", "malamute-garbage",
         "malamute-open"])
@pytest_twisted.ensureDeferred
async def test_a_closed_connection_is_freed_without_the_collector(server, door, sent):
    made = _watch(_factory(server, door))
    sock = socket.create_connection(("127.0.0.1", server.port(door)))
    sock.setblocking(False)
    await until(lambda: made and made[0]() is not None and made[0]().transport.connected,
                what="the connection")
    sock.send(sent)
    for _ in range(5):
        await turn()                     # the broker reads and answers what was sent
    gc.collect()
    gc.disable()
    try:
        sock.close()
        await until(lambda: made[0]() is None or not made[0]().transport.connected,
                    what="the broker to see the close")
        for _ in range(3):
            await turn()
        assert made[0]() is None, "a closed connection is still alive (a reference cycle)"
    finally:
        gc.enable()
