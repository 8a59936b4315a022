"""Malamute sessions over loopback ZeroMQ: expiry, heartbeats, re-open and replay,
peers that vanish, and many sessions at once. The broker's time is a task.Clock the tests
advance (test_malamute_door_timers.py has the exact boundaries)."""
import pytest
import pytest_twisted
from twisted.internet import defer

from mqksbridge.protocols.malamute import codec
from tests.conftest import RunningBroker
from tests.support.malamute import RawPeer
from tests.support.waits import until


@pytest.fixture
def quick():
    """Sessions expire after 0.5 s of silence, checked every 0.1 s."""
    running = RunningBroker({"malamute": {"timeout": 0.5, "check_interval": 0.1}})
    pytest_twisted.blockon(defer.ensureDeferred(running.start()))
    yield running
    pytest_twisted.blockon(defer.ensureDeferred(running.stop()))


@pytest_twisted.ensureDeferred
async def test_silent_sessions_expire_and_pinging_ones_stay(quick):
    silent = await quick.malamute_raw("silent")
    await silent.call(codec.ServiceOffer("svc", ""))
    alive = await quick.malamute_raw("alive")
    router = quick.doors["malamute"].transport
    before = set(router.peers)
    for _ in range(8):
        quick.advance(0.1)
        assert await alive.call(codec.ConnectionPing()) == codec.ConnectionPong()
    door = quick.doors["malamute"]
    assert list(door.owners) == ["alive"] and door.counters["expired"] == 1
    assert quick.broker.queues["svc"].consumers == []
    await silent.nothing()                       # no command: the connection just closes
    await until(lambda: len(router.peers) == 2 and set(router.peers) != before,
                what="the DEALER to reconnect")
    assert await silent.call(codec.ConnectionPing()) == codec.Error(500, "")


@pytest_twisted.ensureDeferred
async def test_mail_for_an_expired_address_is_stored(quick):
    await quick.malamute_raw("bob")
    quick.advance(0.8)
    sender = await quick.malamute("alice")
    await sender.sendto("bob", "later", b"1")
    await sender.ping()
    assert len(quick.broker.mailboxes["bob"].stored) == 1


@pytest_twisted.ensureDeferred
async def test_error_500_then_reopen_and_replay_restores_everything(quick):
    """What mlm_client does after its session was dropped: re-OPEN, then replay every
    WRITE/READ/OFFER without waiting for each OK."""
    peer = await quick.malamute_raw("worker")
    replay = [codec.StreamWrite("out"), codec.StreamRead("in", ""), codec.ServiceOffer("svc", "")]
    for command in replay:
        assert await peer.call(command) == codec.Ok()
    router = quick.doors["malamute"].transport
    first = set(router.peers)
    quick.advance(0.8)                            # expired meanwhile: the broker hangs up,
    await until(lambda: router.peers and set(router.peers) != first,   # libzmq reconnects
                what="the DEALER to reconnect")
    assert await peer.call(codec.ConnectionPing()) == codec.Error(500, "")
    peer.send(codec.ConnectionOpen("worker"), *replay)
    assert [await peer.recv() for _ in range(4)] == [codec.Ok()] * 4
    other = await quick.malamute("other")
    await other.set_producer("in")
    await other.send("s", b"1")
    await other.sendfor("svc", "r", b"2")
    got = [await peer.recv(), await peer.recv()]
    assert sorted(type(g).__name__ for g in got) == ["ServiceDeliver", "StreamDeliver"]


@pytest_twisted.ensureDeferred
async def test_client_disconnecting_without_close_is_cleaned_up(server):
    gone = await server.malamute_raw("gone")
    await gone.call(codec.StreamRead("s", ""))
    gone.close()
    door = server.doors["malamute"]
    await until(lambda: door.counters["vanished"] == 1, what="the broker to see it gone")
    writer = await server.malamute("writer")
    await writer.set_producer("s")
    await writer.send("x", b"1")                 # the send finds the peer gone
    await writer.ping()
    door = server.doors["malamute"]
    assert "gone" not in door.owners and door.counters["vanished"] == 1
    assert server.broker.streams["s"].readers == []


@pytest_twisted.ensureDeferred
async def test_close_without_session_then_reopen(server):
    peer = await server.malamute_raw()
    assert await peer.call(codec.ConnectionClose()) == codec.Ok()
    assert await peer.call(codec.ConnectionClose()) == codec.Ok()
    await peer.open("back")
    assert await peer.call(codec.ConnectionPing()) == codec.ConnectionPong()


@pytest_twisted.ensureDeferred
async def test_a_thousand_concurrent_sessions(server):
    endpoint = server.endpoint()
    peers = [RawPeer(endpoint) for _ in range(1000)]
    server.malamute_peers.extend(peers)
    for i, peer in enumerate(peers):
        peer.send(codec.ConnectionOpen("p%d" % i), codec.StreamRead("s%d" % (i % 10), ""))
    for peer in peers:
        assert [await peer.recv(5), await peer.recv(5)] == [codec.Ok(), codec.Ok()]
    assert len(server.doors["malamute"].peers) == 1000
    writer = await server.malamute("writer")
    await writer.set_producer("s3")
    await writer.send("hello", b"x")
    for i in range(3, 1000, 10):
        assert (await peers[i].recv(5)).address == "s3"
    await writer.run(lambda c: [c.sendto("p%d" % i, "m", b"%d" % i) for i in range(1000)])
    for i, peer in enumerate(peers):
        assert (await peer.recv(5)).content == (b"%d" % i,)
