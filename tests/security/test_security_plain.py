"""Malamute with ZMTP PLAIN (RFC 24), against libzmq PLAIN clients (pyzmq): a good login
gets a session as its user; a wrong one gets, byte for byte, the ERROR a libzmq PLAIN
server with a ZAP handler sends (ZAP status "400"), then the close, and never a session:
libzmq clients report it as a failed login (EVENT_HANDSHAKE_FAILED_AUTH, 400); and the
handshake codec under hypothesis (arbitrary chunking, garbage)."""
import socket

import pytest
import pytest_twisted
import zmq
from hypothesis import given, settings, strategies as st
from twisted.internet import defer
from twisted.internet.threads import deferToThread
from zmq.utils.monitor import recv_monitor_message

from mqksbridge.protocols.malamute import codec
from mqksbridge.protocols.zmtp import codec as zmtp
from tests.conftest import RunningBroker
from tests.security.test_security_users import users_file
from tests.support.malamute import RawPeer
from tests.support.waits import received, until


class PlainPeer(RawPeer):
    """A DEALER that logs in with PLAIN; `monitor` sees its handshake failures."""

    def __init__(self, endpoint, user, password):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.plain_username = user.encode()
        self.sock.plain_password = password.encode()
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                                    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                                    | zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.sock.connect(endpoint)

    async def handshake(self, timeout=10.0):
        """The first handshake event: (event, value)."""
        event = await until(received(lambda: recv_monitor_message(self.monitor, zmq.NOBLOCK),
                                     zmq.Again), timeout, what="a handshake event")
        return event["event"], event["value"]

    def close(self):
        self.sock.disable_monitor()
        self.monitor.close(0)
        self.sock.close(0)


@pytest.fixture
def plain(tmp_path):
    made = []

    async def start(anonymous=False):
        broker = RunningBroker({"security": {"users": users_file(tmp_path / "u.toml",
                                                                 anonymous)},
                                "malamute": {"mechanism": "plain"}})
        made.append(broker)
        return await broker.start()
    yield start
    for broker in made:
        for peer in broker.malamute_peers:
            peer.close()
        broker.malamute_peers.clear()
        pytest_twisted.blockon(defer.ensureDeferred(broker.stop()))


@pytest_twisted.ensureDeferred
async def test_plain_login_opens_a_session_as_the_user(plain):
    broker = await plain()
    ops = PlainPeer(broker.endpoint(), "ops", "ops-secret")
    broker.malamute_peers.append(ops)
    assert await ops.handshake() == (zmq.EVENT_HANDSHAKE_SUCCEEDED, 0)
    assert await ops.call(codec.ConnectionOpen("opsbox")) == codec.Ok(200, "")
    owner = broker.broker.mailboxes["opsbox"].owner
    assert owner.principal.user == "ops"
    app = PlainPeer(broker.endpoint(), "app", "app-secret")     # may not read that mailbox
    broker.malamute_peers.append(app)
    reply = await app.call(codec.ConnectionOpen("opsbox"))
    assert isinstance(reply, codec.Error) and reply.code == 300, reply
    assert broker.broker.mailboxes["opsbox"].owner is owner


@pytest.mark.parametrize("user, password", [("ops", "wrong"), ("nobody", "ops-secret"),
                                            ("app", "ops-secret")])
@pytest_twisted.ensureDeferred
async def test_wrong_password_gets_zap_error_400_and_no_session(plain, user, password):
    broker = await plain()
    peer = PlainPeer(broker.endpoint(), user, password)
    broker.malamute_peers.append(peer)
    assert await peer.handshake() == (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400)
    assert not broker.doors["malamute"].peers
    assert broker.doors["malamute"].transport.refused >= 1


def refusal_of(port, zap=None):
    """The bytes a PLAIN server at `port` sends after our greeting and a wrong HELLO, up
    to the close (ours) or to the end of its ERROR (libzmq, which leaves the close to the
    client). `zap`: a libzmq ZAP handler socket to answer "400" from, in this thread."""
    first, _ = client_side(b"ops", b"wrong")
    end = 64 + len(zmtp.zap_denied("400"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(first)
        if zap is not None:
            assert zap.poll(10_000), "no ZAP request"
            version, request_id, *_ = zap.recv_multipart()
            zap.send_multipart([version, request_id, b"400", b"No access", b"", b""])
        data = b""
        while len(data) < end and (chunk := s.recv(4096)):
            data += chunk
        return data + (s.recv(4096) if zap is None else b"")


def libzmq_plain_refusal():
    """A libzmq PLAIN ROUTER whose ZAP handler refuses everything: what it sends."""
    ctx = zmq.Context()
    try:
        zap = ctx.socket(zmq.REP)
        zap.linger = 0
        zap.bind("inproc://zeromq.zap.01")
        server = ctx.socket(zmq.ROUTER)
        server.linger = 0
        server.plain_server = True
        port = server.bind_to_random_port("tcp://127.0.0.1")
        return refusal_of(port, zap)
    finally:
        ctx.destroy(linger=0)


@pytest_twisted.ensureDeferred
async def test_wrong_password_on_the_wire_is_libzmq_zap_error_then_the_close(plain):
    broker = await plain()
    got = await deferToThread(refusal_of, broker.port("malamute"))
    libzmq = await deferToThread(libzmq_plain_refusal)
    assert got[64:] == libzmq[64:] == zmtp.zap_denied("400")
    assert got[64:] != zmtp.error("400")         # RFC 37's spelling: libzmq's clients
    assert got == zmtp.PLAIN_GREETING + libzmq[64:]   # see an unknown command there


@pytest_twisted.ensureDeferred
async def test_null_client_cannot_reach_a_plain_door(plain):
    broker = await plain(anonymous=True)
    peer = await broker.malamute_raw()
    peer.send(codec.ConnectionOpen("x"))
    with pytest.raises(TimeoutError):                 # no greeting agreement, no session
        await peer.recv(timeout=1.0)
    assert not broker.doors["malamute"].peers


def client_side(user=b"u", password=b"p"):
    """What a PLAIN client sends: greeting, HELLO, then (after WELCOME) INITIATE."""
    greeting = zmtp.GREETING[:12] + b"PLAIN".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
    hello = zmtp.command(b"HELLO", bytes((len(user),)) + user + bytes((len(password),))
                         + password)
    initiate = zmtp.command(b"INITIATE", zmtp.metadata([(b"Socket-Type", b"DEALER")]))
    return greeting + hello, initiate


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40), st.binary(max_size=40), st.lists(st.integers(1, 30),
                                                                max_size=20))
def test_plain_handshake_survives_any_chunking(user, password, cuts):
    user, password = user[:255], password[:255]
    first, initiate = client_side(user, password)
    conn = zmtp.Connection("ROUTER", mechanism=zmtp.PLAIN)
    assert conn.preamble() == zmtp.PLAIN_GREETING
    pos = 0
    for cut in cuts + [len(first)]:
        conn.receive_data(first[pos:pos + cut])
        pos += cut
        if pos >= len(first):
            break
    assert conn.events == [zmtp.PlainHello(user, password)]
    conn.events.clear()
    refused = zmtp.Connection("ROUTER", mechanism=zmtp.PLAIN)
    refused.receive_data(first)
    assert refused.deny() == zmtp.zap_denied("400") and refused.state == "closed"
    assert conn.welcome() == zmtp.command(b"WELCOME")
    assert conn.receive_data(initiate + zmtp.message([b"a", b"b"])) == [[b"a", b"b"]]
    assert conn.events[0].socket_type == "DEALER"
    assert conn.ready_reply().startswith(b"\x04")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_plain_handshake_garbage_is_a_clean_error(garbage):
    first, _ = client_side()
    for data in (garbage, first[:64] + garbage, first + garbage):
        conn = zmtp.Connection("ROUTER", mechanism=zmtp.PLAIN)
        try:
            conn.receive_data(data)
        except zmtp.ZmtpError:
            continue
        assert conn.state in ("greeting", "hello", "authenticating")
        assert all(isinstance(e, zmtp.PlainHello) for e in conn.events)


@pytest_twisted.ensureDeferred
async def test_mail_to_a_mailbox_the_user_may_not_publish_to_is_error_300(tmp_path):
    """A SEND refused by permissions is a refusal (ERROR 300: the client stops), not a
    broker failure (ERROR 500: it would reopen and resend for ever); nothing is stored."""
    from mqksbridge.bridge.security.users import hash_password
    from tests.security.test_security_users import FAST
    users = tmp_path / "u.toml"
    users.write_text(f'''
[users.bob]
password = "{hash_password("bob-secret", **FAST)}"
publish = ["mailbox:bob"]
consume = ["mailbox:bob"]
''')
    broker = RunningBroker({"security": {"users": str(users)},
                            "malamute": {"mechanism": "plain"}})
    await broker.start()
    bob = PlainPeer(broker.endpoint(), "bob", "bob-secret")
    broker.malamute_peers.append(bob)
    try:
        assert await bob.call(codec.ConnectionOpen("bob")) == codec.Ok(200, "")
        bob.send(codec.MailboxSend("alice", "hi", content=(b"x",)))
        reply = await bob.recv()
        assert isinstance(reply, codec.Error) and reply.code == 300, reply
        assert "alice" not in broker.broker.mailboxes or not broker.broker.mailboxes["alice"].stored
    finally:
        bob.close()
        broker.malamute_peers.clear()
        await broker.stop()
