"""Malamute with ZMTP CURVE (RFC 26) on one endpoint, against real libzmq CURVE clients
(pyzmq): the handshake, Malamute messages both ways (short and long frames) between a
CURVE client and a NULL client of another endpoint, a client holding another server key
refused, a NULL client refused on the CURVE endpoint; the server key files as the
configuration reads them."""
import os

import pytest
import pytest_twisted
import zmq
import zmq.auth
from twisted.internet import defer

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.malamute.curve_keys import CurveKeyError, load
from mqksbridge.protocols.malamute import codec
from tests.conftest import RunningBroker
from tests.security.test_security_plain import PlainPeer
from tests.support.malamute import RawPeer

CURVE_ENDPOINT = "tcp://127.0.0.1:*"


class CurvePeer(PlainPeer):
    """A DEALER that handshakes with CURVE, knowing the server's public key `server`
    (Z85); `monitor` sees its handshake's end (success, or the close: a libzmq CURVE
    client reports a refused HELLO as a disconnection, as from a libzmq server)."""

    def __init__(self, endpoint, server):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.curve_publickey, self.sock.curve_secretkey = zmq.curve_keypair()
        self.sock.curve_serverkey = server
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                                    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                                    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                                    | zmq.EVENT_HANDSHAKE_SUCCEEDED
                                                    | zmq.EVENT_DISCONNECTED)
        self.sock.connect(endpoint)


@pytest.fixture
def keys(tmp_path):
    """(server public key Z85, its secret key file)."""
    public_file, secret_file = zmq.auth.create_certificates(str(tmp_path), "server")
    return zmq.auth.load_certificate(public_file)[0], secret_file


@pytest.fixture
def curve_broker(keys, tmp_path):
    """A broker whose first Malamute endpoint is CURVE, the second (ipc) NULL."""
    ipc = f"ipc://@mqksbridge-curve-{os.getpid()}-{os.urandom(4).hex()}"
    broker = RunningBroker({"malamute": {"listen": [CURVE_ENDPOINT, ipc],
                                         "curve": {CURVE_ENDPOINT: keys[1]}}})
    yield broker
    for peer in broker.malamute_peers:
        peer.close()
    broker.malamute_peers.clear()
    pytest_twisted.blockon(defer.ensureDeferred(broker.stop()))


def null_endpoint(broker):
    return broker.listeners["malamute"][1].endpoints[0]


@pytest_twisted.ensureDeferred
async def test_curve_client_handshakes_and_talks_both_ways(curve_broker, keys):
    broker = await curve_broker.start()
    secure = CurvePeer(broker.endpoint(), keys[0])
    broker.malamute_peers.append(secure)
    assert await secure.handshake() == (zmq.EVENT_HANDSHAKE_SUCCEEDED, 0)
    await secure.open("secure")
    plain = RawPeer(null_endpoint(broker))
    broker.malamute_peers.append(plain)
    await plain.open("plain")

    big = os.urandom(100_000)
    plain.send(codec.MailboxSend("secure", "hello", content=(b"short", big)))
    got = await secure.recv()
    assert got == codec.MailboxDeliver("plain", "secure", "hello", "", (b"short", big))
    secure.send(codec.MailboxSend("plain", "back", content=(b"x" * 300, b"")))
    got = await plain.recv()
    assert got == codec.MailboxDeliver("secure", "plain", "back", "", (b"x" * 300, b""))
    for i in range(50):                       # nonces keep growing on both sides
        secure.send(codec.MailboxSend("plain", f"n{i}", content=(str(i).encode(),)))
    assert [(await plain.recv()).subject for _ in range(50)] == [f"n{i}" for i in range(50)]
    for i in range(50):
        plain.send(codec.MailboxSend("secure", f"m{i}", content=(str(i).encode(),)))
    assert [(await secure.recv()).subject for _ in range(50)] == [f"m{i}" for i in range(50)]
    await secure.nothing()                    # CONNECTION-PING answered over CURVE
    assert broker.doors["malamute"].transport.refused == 0


@pytest_twisted.ensureDeferred
async def test_wrong_server_key_and_null_clients_are_refused(curve_broker, keys):
    broker = await curve_broker.start()
    other_public, _ = zmq.curve_keypair()
    wrong = CurvePeer(broker.endpoint(), other_public)
    broker.malamute_peers.append(wrong)
    event, _ = await wrong.handshake()          # libzmq: the close, with no detail
    assert event in (zmq.EVENT_DISCONNECTED, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                     zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    assert not broker.doors["malamute"].peers
    assert broker.doors["malamute"].transport.refused >= 1

    null = PlainPeer.__new__(PlainPeer)        # a NULL client with a monitor
    null.sock = zmq.Context.instance().socket(zmq.DEALER)
    null.sock.setsockopt(zmq.LINGER, 0)
    null.monitor = null.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                                | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                                | zmq.EVENT_HANDSHAKE_SUCCEEDED
                                                | zmq.EVENT_DISCONNECTED)
    null.sock.connect(broker.endpoint())
    broker.malamute_peers.append(null)
    event, _ = await null.handshake()
    assert event in (zmq.EVENT_DISCONNECTED, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                     zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    assert not broker.doors["malamute"].peers   # (which end hangs up first is a race)


def test_server_key_files_are_checked_when_the_configuration_is(keys, tmp_path):
    public, secret_file = keys
    assert len(load(secret_file)) == 32
    with pytest.raises(CurveKeyError, match="no secret-key"):
        load(secret_file.replace(".key_secret", ".key"))
    with pytest.raises(CurveKeyError):
        load(str(tmp_path / "missing.key_secret"))
    mismatched = tmp_path / "mismatched.key_secret"
    other_public, _ = zmq.curve_keypair()
    text = open(secret_file).read().replace(public.decode(), other_public.decode())
    mismatched.write_text(text)
    with pytest.raises(CurveKeyError, match="not the secret-key's"):
        load(str(mismatched))
    listen = {"listen": [CURVE_ENDPOINT]}
    configuration.load(overrides={"malamute": {**listen, "curve": {CURVE_ENDPOINT: secret_file}}})
    with pytest.raises(configuration.ConfigError, match="malamute.curve"):
        configuration.load(overrides={"malamute": {**listen,
                                                   "curve": {CURVE_ENDPOINT: str(mismatched)}}})
    with pytest.raises(configuration.ConfigError, match="not one of malamute.listen"):
        configuration.load(overrides={"malamute": {
            **listen, "curve": {"tcp://127.0.0.1:5555": secret_file}}})


@pytest_twisted.ensureDeferred
async def test_with_users_a_curve_session_acts_as_anonymous(keys, tmp_path):
    from tests.security.test_security_users import users_file
    broker = RunningBroker({"security": {"users": users_file(tmp_path / "u.toml")},
                            "malamute": {"listen": [CURVE_ENDPOINT],
                                         "curve": {CURVE_ENDPOINT: keys[1]}}})
    await broker.start()
    try:
        peer = CurvePeer(broker.endpoint(), keys[0])
        broker.malamute_peers.append(peer)
        assert await peer.handshake() == (zmq.EVENT_HANDSHAKE_SUCCEEDED, 0)
        await peer.open("curvebox")
        owner = broker.broker.mailboxes["curvebox"].owner
        assert owner.principal.anonymous
    finally:
        for peer in broker.malamute_peers:
            peer.close()
        broker.malamute_peers.clear()
        await broker.stop()
