"""The ZeroMQ ROUTER (bridge/malamute/zmtp_router.py) through real Twisted listeners
(bridge/malamute/endpoints.py), with
real libzmq DEALER sockets (pyzmq) on the other end, and a small echo door on ours. The
slow-reader test uses a plain-socket DEALER instead (RawDealer says why).

Nothing here blocks the reactor: DEALERs are polled with NOBLOCK between reactor turns.
"""
import socket
import uuid

import pytest
import pytest_twisted
import zmq
from twisted.internet import defer, endpoints, error, protocol, reactor, task
from twisted.internet.testing import StringTransport
from twisted.python import failure

from mqksbridge.bridge.outbox import FlushScheduler
from mqksbridge.bridge.malamute.endpoints import EndpointError, ZmqListener, to_twisted
from mqksbridge.bridge.malamute.zmtp_router import ZmtpRouter
from mqksbridge.core.client import Client
from mqksbridge.protocols.zmtp import codec
from tests.support.waits import received, turn, until


async def recv(sock, timeout=10.0):
    """The next multipart message on a DEALER, polled without blocking the reactor."""
    return await until(received(lambda: sock.recv_multipart(zmq.NOBLOCK), zmq.Again),
                       timeout, what="a message")


class NoStopReactor:
    """The reactor, except that `stop()` is only counted: a listener that cannot bind
    stops its reactor (the daemon exits), which must not end the test session."""

    def __init__(self):
        self.stopped = 0

    def __getattr__(self, name):
        return getattr(reactor, name)

    def stop(self):
        self.stopped += 1


async def start(listener):
    """Start a listener; its port, or the bind failure raised."""
    outcome = []
    listener.ready.addCallbacks(outcome.append, outcome.append)   # before a swallowing errback
    listener.startService()
    await until(lambda: outcome, what="listening")
    if isinstance(outcome[0], failure.Failure):
        outcome[0].raiseException()
    return outcome[0]


class EchoDoor:
    """A ZmtpRouter whose door answers every message with b"re:" + its first frame."""

    def __init__(self, **options):
        self.received = []               # (routing id, frames)
        self.gone = []
        self.router = ZmtpRouter(FlushScheduler(reactor), self.on_message, self.gone.append,
                                 **options)
        self.listeners = []

    def on_message(self, rid, messages, held=()):
        for frames in messages:
            self.received.append((rid, frames))
            self.router.send(rid, [b"re:" + frames[0]])

    async def listen(self, *zmq_endpoints):
        for endpoint in zmq_endpoints:
            listener = ZmqListener(NoStopReactor(), endpoint, self.router)
            self.listeners.append(listener)
            await start(listener)
        return [e for listener in self.listeners for e in listener.endpoints]

    def rid_of(self, payload):
        return next(rid for rid, frames in self.received if frames[0] == payload)

    async def stop(self):
        for conn in list(self.router.peers.values()):
            conn.transport.loseConnection()
        for listener in self.listeners:
            await listener.stopService()


@pytest.fixture
def door():
    doors = []

    def make(**options):
        doors.append(EchoDoor(**options))
        return doors[-1]
    yield make
    for d in doors:
        pytest_twisted.blockon(defer.ensureDeferred(d.stop()))


@pytest.fixture
def dealers():
    sockets = []

    def make(endpoint, socket_type=zmq.DEALER, **options):
        sock = zmq.Context.instance().socket(socket_type)
        sock.setsockopt(zmq.LINGER, 0)
        for name, value in options.items():
            sock.setsockopt(getattr(zmq, name), value)
        sock.connect(endpoint)
        sockets.append(sock)
        return sock
    yield make
    for sock in sockets:
        sock.close(0)


async def echo(sock, payload, timeout=10.0):
    sock.send(payload)
    assert await recv(sock, timeout) == [b"re:" + payload]


# -- endpoints --------------------------------------------------------------------------------

def test_to_twisted():
    assert to_twisted("tcp://*:9999") == "tcp:9999:backlog=1024"
    assert to_twisted("tcp://*:*") == "tcp:0:backlog=1024"
    assert to_twisted("tcp://0.0.0.0:5") == "tcp:5:backlog=1024"
    assert to_twisted("tcp://127.0.0.1:*") == "tcp:0:interface=127.0.0.1:backlog=1024"
    assert to_twisted("tcp://[::1]:5555") == r"tcp:5555:interface=\:\:1:backlog=1024"
    assert to_twisted("ipc:///tmp/x.sock") == "unix:/tmp/x.sock:backlog=1024"
    assert to_twisted("ipc://rel:ative") == r"unix:rel\:ative:backlog=1024"
    assert to_twisted("ipc://@name") == "unix:\0name:lockfile=0:backlog=1024"


@pytest.mark.parametrize("bad", ["", "tcp://", "tcp:9999", "9999", "tcp://host", "tcp://h:",
                                 "tcp://h:port", "tcp://h:-1", "udp://*:5", "inproc://x",
                                 "pgm://eth0;239.0.0.1:5", "ipc://"])
def test_to_twisted_refuses(bad):
    with pytest.raises(EndpointError):
        to_twisted(bad)
    with pytest.raises(EndpointError):
        ZmqListener(reactor, bad, protocol.Factory())


@pytest_twisted.ensureDeferred
async def test_bind_failure_errbacks_ready_without_crashing(door, dealers):
    """A port in use: `ready` errbacks, the listener asks its reactor to stop (the daemon
    exits), and nothing else breaks; here the reactor is a proxy that records the stop."""
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        d = door()
        proxy = NoStopReactor()
        listener = ZmqListener(proxy, f"tcp://127.0.0.1:{taken.getsockname()[1]}", d.router)
        with pytest.raises(error.CannotListenError):
            await start(listener)
        assert listener.endpoints == [] and proxy.stopped == 1
        listener.stopService()
        [bound] = await d.listen("tcp://127.0.0.1:*")    # the router itself is unharmed
        await echo(dealers(bound), b"still here")
    finally:
        taken.close()


# -- echo over every transport ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["tcp", "ipc-path", "ipc-abstract"])
@pytest_twisted.ensureDeferred
async def test_echo_over_each_transport(door, dealers, kind, tmp_path):
    endpoint = {"tcp": "tcp://127.0.0.1:*",
                "ipc-path": f"ipc://{tmp_path}/door.sock",
                "ipc-abstract": f"ipc://@mqksbridge-test-{uuid.uuid4().hex}"}[kind]
    d = door()
    [bound] = await d.listen(endpoint)
    if kind == "tcp":
        assert bound.startswith("tcp://127.0.0.1:") and int(bound.rsplit(":", 1)[1]) > 0
    else:
        assert bound == endpoint
    sock = dealers(bound)
    await echo(sock, b"hello")
    sock.send_multipart([b"a", b"", b"x" * 300])
    assert await recv(sock) == [b"re:a"]
    assert d.received[-1][1] == [b"a", b"", b"x" * 300]
    assert d.router.refused == 0
    [conn] = d.router.peers.values()
    if kind == "tcp":                # as libzmq: a small write never waits for an ACK
        assert conn.transport.getHandle().getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


@pytest_twisted.ensureDeferred
async def test_several_endpoints_at_once(door, dealers, tmp_path):
    d = door()
    bound = await d.listen("tcp://127.0.0.1:*", "tcp://*:*", f"ipc://{tmp_path}/s",
                           f"ipc://@mqksbridge-test-{uuid.uuid4().hex}")
    assert bound[0].startswith("tcp://127.0.0.1:") and bound[1].startswith("tcp://0.0.0.0:")
    ports = [int(b.rsplit(":", 1)[1]) for b in bound[:2]]
    assert all(ports) and ports[0] != ports[1]
    assert [listener.port.getHost().port for listener in d.listeners[:2]] == ports
    connect = [*bound[:1], f"tcp://127.0.0.1:{ports[1]}", *bound[2:]]
    socks = [dealers(e) for e in connect]
    for i, sock in enumerate(socks):
        await echo(sock, b"via %d" % i)
    assert len(d.router.peers) == 4


@pytest_twisted.ensureDeferred
async def test_ipv6_loopback(door, dealers):
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback")
    d = door()
    [bound] = await d.listen("tcp://[::1]:*")
    assert bound.startswith("tcp://[::1]:")
    await echo(dealers(bound, IPV6=1), b"six")


# -- routing ids --------------------------------------------------------------------------------

@pytest_twisted.ensureDeferred
async def test_routing_id_is_the_dealers_identity(door, dealers):
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    sock = dealers(bound, ROUTING_ID=b"alice")
    await echo(sock, b"hi")
    assert d.rid_of(b"hi") == b"alice" and set(d.router.peers) == {b"alice"}
    assert d.router.send(b"alice", [b"pushed", b"", b"two"])
    assert await recv(sock) == [b"pushed", b"", b"two"]


@pytest_twisted.ensureDeferred
async def test_duplicate_identity_refused_first_keeps_working(door, dealers):
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    first = dealers(bound, ROUTING_ID=b"same")
    await echo(first, b"one")
    conn = d.router.peers[b"same"]
    second = dealers(bound, ROUTING_ID=b"same")
    second.send(b"from second")
    await until(lambda: d.router.refused >= 1, what="refusal")
    await echo(first, b"still one")
    assert d.router.peers[b"same"] is conn and d.gone == []
    assert all(frames[0] != b"from second" for _, frames in d.received)
    with pytest.raises(TimeoutError):
        await recv(second, 0.1)
    # the first leaves: the identity is free, and libzmq's reconnecting second gets it
    # (the message it sent on a refused connection is lost: libzmq does not resend)
    first.close(0)
    await until(lambda: d.gone == [b"same"], what="first gone")
    await until(lambda: b"same" in d.router.peers, what="second reconnected")
    await echo(second, b"second, connected")
    assert d.rid_of(b"second, connected") == b"same" and d.gone == [b"same"]


@pytest_twisted.ensureDeferred
async def test_generated_ids_are_five_bytes_from_zero_and_distinct(door, dealers):
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    socks = [dealers(bound) for _ in range(5)]
    for i, sock in enumerate(socks):
        await echo(sock, b"n%d" % i)
    rids = [d.rid_of(b"n%d" % i) for i in range(5)]
    assert all(len(rid) == 5 and rid[0] == 0 for rid in rids)
    assert len(set(rids)) == 5 and set(rids) == set(d.router.peers)


@pytest_twisted.ensureDeferred
async def test_on_gone_fires_once_when_a_dealer_closes(door, dealers):
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    stay, leave = dealers(bound), dealers(bound)
    await echo(stay, b"stay")
    await echo(leave, b"leave")
    rid = d.rid_of(b"leave")
    leave.close(0)
    await until(lambda: d.gone, what="on_gone")
    await echo(stay, b"stay again")          # the reactor went on: still only once
    assert d.gone == [rid]
    assert rid not in d.router.peers and d.router.send(rid, [b"late"]) is False


@pytest_twisted.ensureDeferred
async def test_send_to_unknown_routing_id(door):
    d = door()
    await d.listen("tcp://127.0.0.1:*")
    assert d.router.send(b"nobody", [b"x"]) is False
    assert d.router.send(b"\x00\x00\x00\x00\x01", [b"x"]) is False
    assert d.router.busy(b"nobody")          # no such peer: droppable traffic is dropped


# -- heartbeats ----------------------------------------------------------------------------------

@pytest.mark.parametrize("answer", [True, False], ids=["pong", "no-pong-control"])
@pytest_twisted.ensureDeferred
async def test_heartbeating_dealer_stays_connected(door, dealers, monkeypatch, answer):
    """A DEALER with ZMQ_HEARTBEAT_IVL drops a peer that does not answer its PINGs within
    ZMQ_HEARTBEAT_TIMEOUT: ours answers, so it stays (the control without PONGs is dropped,
    which shows the test can fail)."""
    pongs = []
    real_pong = codec.pong
    monkeypatch.setattr(codec, "pong",
                        lambda context: pongs.append(context) or (real_pong(context) if answer
                                                                  else b""))
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    sock = dealers(bound, HEARTBEAT_IVL=40, HEARTBEAT_TIMEOUT=200)
    await echo(sock, b"beat")
    rid = d.rid_of(b"beat")
    conn = d.router.peers[rid]
    if not answer:
        await until(lambda: d.gone, timeout=3, what="heartbeat timeout")
        assert d.gone[0] == rid and pongs
        return
    # libzmq's own timers: 10 PINGs at 40 ms outlast two heartbeat timeouts of 200 ms
    await until(lambda: len(pongs) >= 10, what="ten heartbeats")
    assert len(pongs) >= 5
    assert d.gone == [] and d.router.peers.get(rid) is conn
    await echo(sock, b"after")
    assert d.rid_of(b"after") == rid


# -- refusals --------------------------------------------------------------------------------------

@pytest.mark.parametrize("socket_type", [zmq.PUB, zmq.PUSH, zmq.PULL, zmq.PAIR],
                         ids=["PUB", "PUSH", "PULL", "PAIR"])
@pytest_twisted.ensureDeferred
async def test_incompatible_socket_types_closed(door, dealers, socket_type):
    """libzmq checks our READY (Socket-Type ROUTER) and drops the connection before its
    own READY is out; our side of the check is in test_raw_garbage_closed_others_unharmed
    and the codec tests. Either way: closed, no peer, no message, no on_gone."""
    d = door()
    made = []
    build = d.router.buildProtocol
    d.router.buildProtocol = lambda addr: made.append(build(addr)) or made[-1]
    [bound] = await d.listen("tcp://127.0.0.1:*")
    good = dealers(bound)
    sock = dealers(bound, socket_type)
    if socket_type != zmq.PULL:
        try:
            sock.send(b"should not arrive", zmq.NOBLOCK)
        except zmq.Again:
            pass
    await until(lambda: any(conn.transport.disconnected for conn in made), what="close")
    await echo(good, b"good")
    assert d.received == [(d.rid_of(b"good"), [b"good"])]
    assert list(d.router.peers) == [d.rid_of(b"good")] and d.gone == []


class RawClient(protocol.Protocol):
    def __init__(self):
        self.data = b""
        self.closed = False

    def dataReceived(self, data):
        self.data += data

    def connectionLost(self, reason):
        self.closed = True


PREAMBLE = codec.Connection("ROUTER").preamble()
PEER_GREETING = codec.GREETING[:11] + b"\x01" + codec.GREETING[12:]      # a ZMTP 3.1 peer

RAW_CASES = {
    "http": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", PREAMBLE),
    "zmtp 2.0 greeting": (bytes.fromhex("ff00000000000000017f0105" "0000"), PREAMBLE),
    "zmtp 3.0 CURVE": (PEER_GREETING[:12] + b"CURVE".ljust(20, b"\0") + PEER_GREETING[32:],
                       PREAMBLE),
    "message before READY": (PEER_GREETING + b"\x00\x03abc",
                             PREAMBLE + codec.error("message before the handshake completed")),
    "READY from a PUB": (PEER_GREETING + codec.ready("PUB"),
                         PREAMBLE + codec.error("socket type PUB cannot talk to ROUTER")),
}


@pytest.mark.parametrize("case", RAW_CASES.values(), ids=RAW_CASES.keys())
@pytest_twisted.ensureDeferred
async def test_raw_garbage_closed_others_unharmed(door, dealers, case):
    """A refused peer sees our greeting and READY, then an ERROR if its greeting was
    ZMTP 3 (none otherwise), then the close; a DEALER on the same router carries on."""
    sent, expected = case
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    good = dealers(bound)
    await echo(good, b"before")
    raw = RawClient()
    port = int(bound.rsplit(":", 1)[1])
    await endpoints.connectProtocol(
        endpoints.TCP4ClientEndpoint(reactor, "127.0.0.1", port), raw)
    raw.transport.write(sent)
    await until(lambda: raw.closed, what="raw client closed")
    assert raw.data == expected
    assert d.router.refused == 1 and d.gone == []
    await echo(good, b"after")
    assert len(d.router.peers) == 1


@pytest_twisted.ensureDeferred
async def test_messages_before_a_violation_are_served_then_the_error(door):
    """specs/errors.md: the messages a read completes before a violation are handed to the
    door and answered, then the ERROR and the close."""
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    raw = RawClient()
    port = int(bound.rsplit(":", 1)[1])
    await endpoints.connectProtocol(
        endpoints.TCP4ClientEndpoint(reactor, "127.0.0.1", port), raw)
    raw.transport.write(PEER_GREETING + codec.ready("DEALER") + codec.message([b"one"])
                        + codec.message([b"two", b"2"]) + b"\x08\x01x")
    await until(lambda: raw.closed, what="the refused client closed")
    assert [frames for _, frames in d.received] == [[b"one"], [b"two", b"2"]]
    assert raw.data == (PREAMBLE + codec.message([b"re:one"]) + codec.message([b"re:two"])
                        + codec.error("reserved frame flags set (0x08)"))
    assert d.router.refused == 1
    await until(lambda: d.gone == [d.rid_of(b"one")], what="the peer reported gone")


@pytest_twisted.ensureDeferred
async def test_message_over_max_message_closes_that_connection(door, dealers):
    d = door(max_message=1000 + codec.FRAME_COST)       # one frame of 1000 bytes fits
    [bound] = await d.listen("tcp://127.0.0.1:*")
    other = dealers(bound)
    await echo(other, b"other")
    for frames in ([b"x" * 1001], [b"y" * 400, b"y" * 400, b"y" * 201]):
        sock = dealers(bound, RECONNECT_IVL=-1)          # no reconnection once refused
        await echo(sock, b"fits" + b"." * 996)
        rid = d.rid_of(b"fits" + b"." * 996)
        refused = d.router.refused
        sock.send_multipart(frames)
        await until(lambda rid=rid: rid in d.gone, what="oversize connection closed")
        assert d.router.refused == refused + 1
        assert all(f[0] != frames[0] for _, f in d.received)
        d.received.clear()
    await echo(other, b"other again")


# -- volume ----------------------------------------------------------------------------------------

@pytest_twisted.ensureDeferred
async def test_pipelined_requests_answered_in_order(door, dealers):
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    sock = dealers(bound, SNDHWM=0, RCVHWM=0)
    total = 3000
    for i in range(total):
        sock.send(b"%d" % i)
    replies = [await recv(sock, 5) for _ in range(total)]
    assert replies == [[b"re:%d" % i] for i in range(total)]
    assert len({rid for rid, _ in d.received}) == 1


@pytest_twisted.ensureDeferred
async def test_many_dealers_at_once(door, dealers):
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    socks = [dealers(bound) for _ in range(60)]
    for i, sock in enumerate(socks):
        for j in range(5):
            sock.send(b"%d.%d" % (i, j))
    for i, sock in enumerate(socks):
        assert [await recv(sock, 5) for _ in range(5)] == [[b"re:%d.%d" % (i, j)]
                                                           for j in range(5)]
    rids = {d.rid_of(b"%d.0" % i) for i in range(60)}
    assert len(rids) == 60 and rids == set(d.router.peers)


# -- flow control ----------------------------------------------------------------------------------

class RawDealer:
    """A DEALER on a plain socket, speaking ZMTP with our own codec: when it reads nothing,
    nothing at all drains (libzmq's I/O thread keeps pulling from the kernel on its own,
    so "the peer reads nothing" would only be true once that thread caught up)."""

    def __init__(self, endpoint, rcvbuf):
        host, port = endpoint[len("tcp://"):].rsplit(":", 1)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)   # before connect
        self.sock.connect((host, int(port)))
        self.sock.setblocking(False)
        self.zmtp = codec.Connection("DEALER")
        self.got = []
        self.sock.sendall(self.zmtp.preamble())

    def send(self, *frames):
        self.sock.sendall(codec.message(list(frames)))

    def _messages(self):
        """What has arrived, read without blocking."""
        if not self.got:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                return None
            assert data, "the broker closed the connection"
            self.got.extend(self.zmtp.receive_data(data))
        return self.got

    async def recv(self, timeout=10.0):
        await until(self._messages, timeout, what="a message")
        return self.got.pop(0)

    def close(self):
        self.sock.close()


@pytest_twisted.ensureDeferred
async def test_slow_dealer_pauses_flow_and_busy_after_high_water(door):
    high_water = 5
    d = door(high_water=high_water)
    [bound] = await d.listen("tcp://127.0.0.1:*")
    dealer = RawDealer(bound, rcvbuf=4096)
    try:
        await _slow_dealer(d, dealer, high_water)
    finally:
        dealer.close()


async def _slow_dealer(d, dealer, high_water):
    dealer.send(b"slow")
    assert await dealer.recv() == [b"re:slow"]
    rid = d.rid_of(b"slow")
    conn = d.router.peers[rid]
    conn.transport.getHandle().setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client = Client("c1", "malamute")
    d.router.attach_client(rid, client)
    payload = b"p" * 65536
    sent = 0
    # the DEALER reads nothing: send until the kernel is full and stays so
    while not (conn.gate.paused and conn.outbox.transport_paused):
        assert sent < 400, "the transport never filled"
        assert not d.router.busy(rid)
        assert d.router.send(rid, [b"%d" % sent, payload])
        sent += 1
        await turn()
    assert client.paused and conn.gate.backlog < high_water   # counted since it filled
    late = Client("c2", "malamute")                      # attached while paused: paused
    d.router.attach_client(rid, late)
    assert late.paused
    d.router.attach_client(rid, client)
    for _ in range(high_water - conn.gate.backlog):
        assert not d.router.busy(rid)
        assert d.router.send(rid, [b"%d" % sent, payload])
        sent += 1
    assert d.router.busy(rid) and conn.gate.backlog == high_water
    for _ in range(20):                                  # still full turns later
        await turn()
    assert conn.gate.paused and client.paused and d.router.busy(rid)
    got = [await dealer.recv() for _ in range(sent)]     # reading again: all, in order
    assert [m[0] for m in got] == [b"%d" % i for i in range(sent)]
    assert all(m[1] == payload for m in got)
    await until(lambda: not conn.gate.paused and not client.paused, what="resume")
    assert not d.router.busy(rid)
    dealer.send(b"fast again")
    assert await dealer.recv() == [b"re:fast again"]


# -- isolation -------------------------------------------------------------------------------------

def test_each_fill_of_the_transport_allows_high_water_messages_again():
    """busy, and offer's drop, count what was written since the transport filled this
    time: after it drained and filled again a reader takes `high_water` copies again."""
    router = ZmtpRouter(FlushScheduler(task.Clock()), lambda *a: None, lambda rid: None,
                        high_water=3)
    conn = router.buildProtocol(None)
    conn.makeConnection(StringTransport())
    conn.dataReceived(codec.GREETING + codec.ready("DEALER", b"r"))
    assert router.link(b"r") is conn
    for fill in range(3):
        conn.outbox.pauseProducing()                  # the transport is full
        assert [conn.offer([b"%d" % i]) for i in range(4)] == [True, True, True, None]
        assert router.busy(b"r") and conn.busy()
        conn.outbox.resumeProducing()                 # drained: written, not busy
        assert not router.busy(b"r") and conn.offer([b"x"]) is True
    conn.connectionLost(None)
    assert conn.send([b"late"]) is False and conn.offer([b"late"]) is False


@pytest_twisted.ensureDeferred
async def test_a_door_that_raises_for_one_peer_costs_that_connection_only(door, dealers):
    """Whatever the door does with a peer's messages runs in that connection's read: an
    exception there (a door bug) closes that connection, and the ROUTER serves the rest."""
    d = door()
    [bound] = await d.listen("tcp://127.0.0.1:*")
    good, bad = dealers(bound), dealers(bound, RECONNECT_IVL=-1)
    await echo(good, b"good")
    await echo(bad, b"bad")
    bad_rid = d.rid_of(b"bad")
    deliver = d.router.deliver

    def buggy(rid, messages, held):
        if rid == bad_rid:
            raise RuntimeError("a door bug")
        return deliver(rid, messages, held)
    d.router.deliver = buggy
    bad.send(b"boom")
    await until(lambda: bad_rid in d.gone, what="that connection closed")
    await echo(good, b"still served")
    assert list(d.router.peers) == [d.rid_of(b"good")]
