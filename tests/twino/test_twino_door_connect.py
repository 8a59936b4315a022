"""Twino door over loopback: handshake, refusals, keep-alive, bad frames and garbage.

The broker's clock is a task.Clock: the keep-alive tests advance it and wait for what the
real sockets show (test_twino_door_timers.py has the exact boundaries)."""
import socket

import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, settings, strategies as st
from twisted.internet import defer
from twisted.internet.threads import deferToThread

from mqksbridge.bridge.clients import twino
from mqksbridge.protocols.twino.codec import (
    PROTOCOL, ContentType, Frame, FrameDecoder, MessageType, decode,
    encode, new_id,
)
from tests.conftest import RunningBroker
from tests.support.waits import until


def raw_hello(client_id=None, extra=""):
    lines = "CONNECT /\r\n" + extra + (f"Client-Id: {client_id}\r\n" if client_id else "")
    return encode(Frame(MessageType.SERVER, first_acquirer=True, message_id=new_id(),
                        content_type=ContentType.HELLO, content=lines.encode()))


def open_socket(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_until_closed(sock, limit=10.0):
    """Everything the server sends until it closes; raises if it stays open past `limit`."""
    sock.settimeout(limit)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def server_frames(data):
    return FrameDecoder(apply_ttl=False).feed(data)


@pytest.fixture
def quick_server():
    """Keep-alive and handshake timers shortened to fractions of a second."""
    running = RunningBroker({"twino": {"ping_interval": 0.6, "ping_timeout": 0.6,
                                       "check_interval": 0.1, "handshake_timeout": 0.6}})
    pytest_twisted.blockon(defer.ensureDeferred(running.start()))
    yield running
    pytest_twisted.blockon(defer.ensureDeferred(running.stop()))


@pytest_twisted.ensureDeferred
async def test_echo_and_accepted_arrive_in_one_write_with_the_hello_id(server):
    def run():
        sock = open_socket(server.port("twino"))
        sock.sendall(PROTOCOL + raw_hello("alice"))
        first = sock.recv(65536)      # the real client reads the echo with one read
        sock.close()
        return first
    data = await deferToThread(run)
    assert data[:8] == PROTOCOL
    accepted = decode(data[8:])
    assert (accepted.type, accepted.content_type, accepted.target) == (0x10, 202, "alice")
    assert accepted.first_acquirer and accepted.ttl == 16 and accepted.source is None
    assert len(accepted.message_id) == 32


@pytest_twisted.ensureDeferred
async def test_hello_without_id_gets_a_generated_id(server):
    c = await server.twino(name="n", type="t")
    assert len(c.client_id) == 32 and int(c.client_id, 16) >= 0
    assert server.broker.clients[c.client_id].name == "n"


@pytest_twisted.ensureDeferred
async def test_duplicate_live_id_is_refused_with_503(server):
    await server.twino(client_id="same")
    with pytest.raises(twino.TwinoRefused) as refused:
        await deferToThread(twino.connect, "127.0.0.1", server.port("twino"), client_id="same")
    assert refused.value.code == 503


@pytest_twisted.ensureDeferred
async def test_duplicate_detected_with_either_header_spacing(server):
    await server.twino(client_id="spaced")

    def run():
        sock = open_socket(server.port("twino"))
        sock.sendall(PROTOCOL + raw_hello(extra="Client-Id:spaced\r\n"))
        return read_until_closed(sock)
    data = await deferToThread(run)
    assert data[:8] == PROTOCOL and decode(data[8:]).content_type == 503


@pytest_twisted.ensureDeferred
async def test_token_is_checked_when_configured():
    running = await RunningBroker({"twino": {"token": "s3cret"}}).start()
    try:
        port = running.port("twino")
        with pytest.raises(twino.TwinoRefused) as refused:
            await deferToThread(twino.connect, "127.0.0.1", port, token="wrong")
        assert refused.value.code == 401
        ok = await deferToThread(twino.connect, "127.0.0.1", port, token="s3cret")
        ok.close()
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_wrong_protocol_bytes_close_without_a_reply(server):
    def run():
        sock = open_socket(server.port("twino"))
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        return read_until_closed(sock)
    assert await deferToThread(run) == b""


@pytest_twisted.ensureDeferred
async def test_silent_sockets_are_closed_after_the_handshake_timeout(quick_server):
    door = quick_server.doors["twino"]
    port = quick_server.port("twino")
    socks = await deferToThread(lambda: [open_socket(port) for _ in range(20)])
    await until(lambda: len(door.connections) == 20, what="20 connections")
    quick_server.advance(0.5)
    assert all(conn.connected for conn in door.connections)    # not yet
    quick_server.advance(0.2)                                   # past the 0.6 s

    def run():
        return [read_until_closed(sock, 10) for sock in socks]
    assert await deferToThread(run) == [b""] * 20
    await until(lambda: not door.connections, what="every connection gone")
    assert not quick_server.doors["twino"].connections


@pytest_twisted.ensureDeferred
async def test_idle_client_is_pinged_and_closed_without_pong(quick_server):
    def run():
        sock = open_socket(quick_server.port("twino"))
        sock.sendall(PROTOCOL + raw_hello())
        return read_until_closed(sock, 10)
    reading = deferToThread(run)
    await until(lambda: quick_server.broker.clients, what="the hello")
    quick_server.advance(0.7)                 # idle past ping_interval: PINGed
    quick_server.advance(0.7)                 # no answer within ping_timeout: closed
    data = await reading
    frames = server_frames(data[8:])
    assert [f.type for f in frames] == [0x10, 0x09]
    await until(lambda: not quick_server.broker.clients, what="the disconnect")
    assert quick_server.broker.clients == {}


@pytest_twisted.ensureDeferred
async def test_client_that_answers_pings_stays_connected(quick_server):
    c = await quick_server.twino()
    [conn] = quick_server.doors["twino"].connections
    reading = c.recv(10)                      # the client answers PINGs while it waits
    for _ in range(4):                        # 2.8 s: far past interval + timeout
        quick_server.advance(0.7)             # idle since the last answer: PINGed
        assert conn.ping_sent is not None and conn.connected
        await until(lambda: conn.last_seen >= conn.ping_sent, what="the PONG")
    quick_server.advance(0.5)
    assert conn.connected
    other = await quick_server.twino()
    await other.send_direct(c.client_id, b"bye")
    assert (await reading).content == b"bye"  # no frame but PINGs came meanwhile
    assert c.client_id in quick_server.broker.clients
    assert await c.join("still-here") == 0


@pytest_twisted.ensureDeferred
async def test_ping_is_answered_with_pong(server):
    c = await server.twino()
    assert await c.ping() < 5


@pytest_twisted.ensureDeferred
async def test_ttl_zero_frames_are_dropped_and_relays_decrement(server):
    consumer = await server.twino(keep_wire_ttl=True)
    producer = await server.twino()
    assert await consumer.join("ttl") == 0
    dead = Frame(MessageType.QUEUE_MESSAGE, ttl=0, message_id=new_id(), target="ttl",
                 content_type=1, content=b"dead")
    await producer.send_frame(dead)
    await producer.push("ttl", 1, b"alive")
    frame = await consumer.recv(5)
    assert (frame.content, frame.ttl) == (b"alive", 15)
    await consumer.nothing()


@pytest_twisted.ensureDeferred
async def test_oversize_frame_closes_only_that_connection():
    running = await RunningBroker({"twino": {"max_frame_size": 4096}}).start()
    try:
        other = await running.twino()
        big = await running.twino()
        header = encode(Frame(MessageType.QUEUE_MESSAGE, message_id="x", target="c",
                              content_type=1, content=b"x" * 5000))[:16]
        await big.send_frame(header)           # only the header: refused before the body
        with pytest.raises(ConnectionError):
            await big.recv(5)
        assert await other.join("c") == 0
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_frames_before_a_bad_frame_are_served_then_the_close(server):
    """specs/errors.md: one write of two pushes and then a frame over the size limit: both
    pushes are delivered, then the sender's connection closes."""
    consumer = await server.twino()
    assert await consumer.join("before") == 0
    producer = await server.twino()
    pushes = [encode(Frame(MessageType.QUEUE_MESSAGE, message_id=f"m{i}", source=producer.client_id,
                           target="before", content_type=1, content=b"%d" % i)) for i in (1, 2)]
    too_big = bytes([0x11, 0x10, 0, 0, 0, 0, 0, 0xFF]) + b"\xff" * 8
    await producer.send_frame(b"".join(pushes) + too_big)
    assert [(await consumer.recv(5)).content for _ in range(2)] == [b"1", b"2"]
    with pytest.raises(ConnectionError):
        await producer.recv(5)
    await consumer.close()


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(garbage=st.binary(min_size=1, max_size=300))
@pytest_twisted.ensureDeferred
async def test_garbage_after_handshake_never_hurts_the_broker_or_others(server, garbage):
    victim = await server.twino()
    bystander = await server.twino()
    assert await bystander.join("g") == 0
    await victim.send_frame(garbage)
    try:
        await victim.push("g", 1, b"after")
    except OSError:
        pass                                  # the broker may have closed the victim
    assert await bystander.ping() < 5
    late = await server.twino()
    assert await late.join("g") == 0
    for client in (victim, bystander, late):
        await client.close()


@pytest_twisted.ensureDeferred
async def test_connections_do_not_wait_for_delayed_acks(server):
    """TCP_NODELAY, as on the other doors: the outbox writes once per reactor turn, so Nagle
    would only hold a lone frame back until the client's delayed ACK."""
    c = await server.twino(name="n", type="t")
    [conn] = server.doors["twino"].connections
    assert conn.transport.getHandle().getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    await c.close()
