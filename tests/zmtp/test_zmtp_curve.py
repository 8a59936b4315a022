"""The CURVE codec (protocols.zmtp.curve) against a client side written here from RFC 26
with libsodium's boxes (PyNaCl): the handshake and messages both ways under arbitrary
chunking, and the refusals: another server key, a replayed or forged MESSAGE, a cookie
that is not ours, garbage. (tests/security/test_security_curve.py talks to real libzmq.)"""
import os

import pytest
from hypothesis import given, settings, strategies as st
from nacl.bindings import (crypto_box_beforenm, crypto_box_easy, crypto_box_easy_afternm,
                           crypto_box_keypair, crypto_box_open_easy,
                           crypto_box_open_easy_afternm)

from mqksbridge.protocols.zmtp import codec
from mqksbridge.protocols.zmtp.codec import Ready, ZmtpError
from mqksbridge.protocols.zmtp.curve import CURVE_GREETING, CurveConnection, Reply

SERVER_PUBLIC, SERVER_SECRET = crypto_box_keypair()


class Client:
    """The DEALER end of a CURVE handshake, as libzmq's curve_client makes it."""

    def __init__(self, server_public=SERVER_PUBLIC):
        self.server = server_public
        self.public, self.secret = crypto_box_keypair()          # C, c
        self.tpublic, self.tsecret = crypto_box_keypair()        # C', c'
        self.nonce = 0
        self.k = None

    def next_nonce(self):
        self.nonce += 1
        return self.nonce.to_bytes(8, "big")

    def hello(self):
        nonce = self.next_nonce()
        box = crypto_box_easy(bytes(64), b"CurveZMQHELLO---" + nonce, self.server, self.tsecret)
        return CURVE_GREETING[:32] + b"\x00" + bytes(31) + codec.command(
            b"HELLO", b"\x01\x00" + bytes(72) + self.tpublic + nonce + box)

    def initiate(self, welcome, metadata=b"", cookie=None):
        body = welcome[2:] if welcome[0] == codec.COMMAND else welcome[10:]
        data = body[1 + body[0]:]
        plain = crypto_box_open_easy(data[16:], b"WELCOME-" + data[:16], self.server,
                                     self.tsecret)
        server_transient, welcome_cookie = plain[:32], plain[32:]
        self.k = crypto_box_beforenm(server_transient, self.tsecret)
        vouch_nonce = os.urandom(16)
        vouch = vouch_nonce + crypto_box_easy(self.tpublic + self.server,
                                              b"VOUCH---" + vouch_nonce, server_transient,
                                              self.secret)
        nonce = self.next_nonce()
        props = metadata or codec.metadata([(b"Socket-Type", b"DEALER"), (b"Identity", b"")])
        box = crypto_box_easy_afternm(self.public + vouch + props,
                                      b"CurveZMQINITIATE" + nonce, self.k)
        return codec.command(b"INITIATE", (cookie or welcome_cookie) + nonce + box)

    def message(self, frames, nonce=None):
        out = []
        for i, body in enumerate(frames):
            nonce_bytes = nonce or self.next_nonce()
            flags = b"\x01" if i < len(frames) - 1 else b"\x00"
            box = crypto_box_easy_afternm(flags + body, b"CurveZMQMESSAGEC" + nonce_bytes, self.k)
            out.append(codec.frame(b"\x07MESSAGE" + nonce_bytes + box))
        return b"".join(out)

    def open_sealed(self, wire):
        """Server output (READY, then MESSAGE frames) -> [(name or flags, body)]."""
        conn = codec.Connection("DEALER")
        conn.state, conn._need = "traffic", 2
        got = []
        pos = 0
        while pos < len(wire):
            flags = wire[pos]
            if flags & codec.LONG:
                n, start = codec._U64.unpack_from(wire, pos + 1)[0], pos + 9
            else:
                n, start = wire[pos + 1], pos + 2
            body = wire[start:start + n]
            pos = start + n
            if body[:6] == b"\x05READY":
                props = crypto_box_open_easy_afternm(body[14:], b"CurveZMQREADY---" + body[6:14],
                                                     self.k)
                got.append(("READY", codec.parse_metadata(props)))
                continue
            assert body[:8] == b"\x07MESSAGE"
            plain = crypto_box_open_easy_afternm(body[16:], b"CurveZMQMESSAGES" + body[8:16],
                                                 self.k)
            got.append((plain[0], plain[1:]))
        return got


def handshake(server, client, chunk=None):
    """Run HELLO/WELCOME/INITIATE/READY; returns what the server wrote, after the greeting."""
    welcome = feed(server, client.hello(), chunk)
    assert [type(e) for e in server.events] == [Reply]
    reply = server.events.pop().data
    initiate = client.initiate(reply)
    assert feed(server, initiate, chunk) == [] and welcome == []
    ready = server.events.pop()
    assert isinstance(ready, Ready) and ready.socket_type == "DEALER"
    assert server.client_key == client.public and server.state == "traffic"
    return server.ready_reply()


def feed(conn, data, chunk=None):
    out = []
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        out += conn.receive_data(data[i:i + step])
    return out


@settings(max_examples=40, deadline=None)
@given(chunk=st.integers(1, 300),
       frames=st.lists(st.lists(st.binary(max_size=600), min_size=1, max_size=4),
                       min_size=1, max_size=5))
def test_handshake_and_messages_under_any_chunking(chunk, frames):
    server, client = CurveConnection(SERVER_SECRET), Client()
    ready = handshake(server, client, chunk)
    assert client.open_sealed(ready)[0] == ("READY", {"socket-type": b"ROUTER",
                                                      "identity": b""})
    wire = b"".join(client.message(message) for message in frames)
    assert feed(server, wire, chunk) == frames
    out = server.seal(b"".join(codec.message(message) for message in frames))
    opened = client.open_sealed(out)
    expected = [(1 if i < len(m) - 1 else 0, body) for m in frames for i, body in enumerate(m)]
    assert opened == expected


def test_ping_is_a_sealed_command_and_pong_goes_back_sealed():
    server, client = CurveConnection(SERVER_SECRET), Client()
    handshake(server, client)
    nonce = client.next_nonce()
    box = crypto_box_easy_afternm(b"\x02\x04PING\x00\x0aab", b"CurveZMQMESSAGEC" + nonce,
                                  client.k)
    assert server.receive_data(codec.frame(b"\x07MESSAGE" + nonce + box)) == []
    (ping,) = server.events
    assert (ping.ttl, ping.context) == (10, b"ab")
    assert client.open_sealed(server.seal(codec.pong(b"ab"))) == [(2, b"\x04PONGab")]


def test_another_server_key_is_refused_at_hello():
    other_public, _ = crypto_box_keypair()
    server = CurveConnection(SERVER_SECRET)
    with pytest.raises(ZmtpError, match="HELLO"):
        server.receive_data(Client(other_public).hello())
    assert server.state == "closed"


def test_replayed_forged_and_unsealed_messages_are_refused():
    for attack in ("replay", "forged", "plain", "old nonce"):
        server, client = CurveConnection(SERVER_SECRET), Client()
        handshake(server, client)
        first = client.message([b"one"])
        assert server.receive_data(first) == [[b"one"]]
        if attack == "replay":
            wire = first
        elif attack == "forged":
            wire = bytearray(client.message([b"two"]))
            wire[-1] ^= 1
            wire = bytes(wire)
        elif attack == "plain":
            wire = codec.frame(b"two")
        else:
            wire = client.message([b"two"], nonce=(1).to_bytes(8, "big"))
        with pytest.raises(ZmtpError, match="CURVE"):
            server.receive_data(wire)
        assert server.state == "closed"


def test_messages_sealed_before_a_violation_are_handed_over_with_it():
    """specs/errors.md: the messages a chunk completes before the violation are `done`."""
    for attack in ("forged", "plain"):
        server, client = CurveConnection(SERVER_SECRET), Client()
        handshake(server, client)
        good = client.message([b"one", b"1"]) + client.message([b"two"])
        bad = codec.frame(b"three") if attack == "plain" else client.message([b"x"])[:-1] + b"?"
        with pytest.raises(ZmtpError, match="CURVE") as info:
            server.receive_data(good + bad)
        assert info.value.done == [[b"one", b"1"], [b"two"]], attack
        assert server.state == "closed"


def test_a_cookie_not_ours_and_a_false_vouch_are_refused():
    server, client = CurveConnection(SERVER_SECRET), Client()
    server.receive_data(client.hello())
    welcome = server.events.pop().data
    with pytest.raises(ZmtpError, match="cookie"):
        server.receive_data(client.initiate(welcome, cookie=os.urandom(96)))

    server, client = CurveConnection(SERVER_SECRET), Client()
    server.receive_data(client.hello())
    welcome = server.events.pop().data
    client.server = crypto_box_keypair()[0]      # vouches for another server's key...
    body = welcome[2:]
    data = body[1 + body[0]:]
    plain = crypto_box_open_easy(data[16:], b"WELCOME-" + data[:16], SERVER_PUBLIC,
                                 client.tsecret)
    server_transient, cookie = plain[:32], plain[32:]
    client.k = crypto_box_beforenm(server_transient, client.tsecret)
    vouch_nonce = os.urandom(16)
    vouch = vouch_nonce + crypto_box_easy(client.tpublic + client.server,
                                          b"VOUCH---" + vouch_nonce, server_transient,
                                          client.secret)
    nonce = client.next_nonce()
    box = crypto_box_easy_afternm(client.public + vouch, b"CurveZMQINITIATE" + nonce, client.k)
    with pytest.raises(ZmtpError, match="vouch"):
        server.receive_data(codec.command(b"INITIATE", cookie + nonce + box))


@settings(max_examples=200, deadline=None)
@given(garbage=st.binary(max_size=400), chunk=st.integers(1, 64))
def test_garbage_after_the_greeting_is_a_clean_refusal(garbage, chunk):
    server = CurveConnection(SERVER_SECRET)
    try:
        feed(server, CURVE_GREETING[:32] + b"\x00" + bytes(31) + garbage, chunk)
    except ZmtpError:
        assert server.state == "closed"
    else:
        assert server.state in ("hello", "initiate")


def test_a_huge_handshake_frame_is_refused_before_it_is_buffered():
    server = CurveConnection(SERVER_SECRET)
    head = CURVE_GREETING[:32] + b"\x00" + bytes(31)
    with pytest.raises(ZmtpError, match="too large"):
        server.receive_data(head + bytes((codec.COMMAND | codec.LONG,)) +
                            codec._U64.pack(1 << 20))
