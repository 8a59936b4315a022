"""The blocking client against a scripted server thread that speaks through the sans-IO side."""
import json
import socket
import threading
from collections import deque
from contextlib import contextmanager
from pathlib import Path

import pytest

from mqksbridge.bridge.clients import twino
from mqksbridge.protocols.twino import codec
from mqksbridge.protocols.twino.codec import Frame, Header, MessageType, NoContent, ResultCode
from mqksbridge.protocols.twino.handshake import (
    FrameReceived, Hello, PingReceived, PongReceived, TwinoServerConnection,
)

VECTORS = {vector["name"]: vector for vector in json.loads(
    (Path(__file__).parents[1] / "data" / "twino_vectors.json").read_text())["vectors"]}
PRODUCER = "7f1c2a9e4b3d4e5f8a6b7c8d9e0f1a2b"


class Peer:
    """The server end of one test connection."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.raw = b""
        self.conn = TwinoServerConnection(id_factory=lambda: "server-" + codec.new_id()[:8])
        self.events = deque()

    def event(self):
        while not self.events:
            data = self.sock.recv(65536)
            assert data, "client closed"
            self.raw += data
            self.events.extend(self.conn.receive_data(data))
        return self.events.popleft()

    def frame(self) -> Frame:
        event = self.event()
        assert isinstance(event, FrameReceived), event
        return event.frame

    def welcome(self) -> Hello:
        hello = self.event()
        self.sock.sendall(self.conn.accept())
        return hello

    def send(self, frame: Frame) -> None:
        self.sock.sendall(self.conn.send(frame))

    def wait_closed(self) -> None:
        """Keep the socket open until the client hangs up."""
        while self.sock.recv(65536):
            pass


@contextmanager
def server(script):
    """Run `script(peer)` on the accepted connection; re-raise its failure in the test."""
    listener = socket.create_server(("127.0.0.1", 0))
    failure = []

    def run():
        sock, _ = listener.accept()
        with sock:
            try:
                script(Peer(sock))
            except BaseException as exc:  # handed to the test thread
                failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        thread.join(10)
        listener.close()
        if failure:  # the server's view explains a client-side error best
            raise failure[0]


def test_handshake_sends_what_the_real_client_sends():
    seen = {}

    def script(peer):
        seen["hello"] = peer.welcome()
        seen["raw"] = peer.raw

    want = VECTORS["hello_connection_info"]["decoded"]
    with server(script) as port:
        with twino.connect(port=port, client_id=PRODUCER, name="order-producer",
                           type="producer", token="secret") as client:
            assert client.client_id == PRODUCER
    assert seen["raw"].startswith(codec.PROTOCOL)
    hello = codec.decode(seen["raw"][8:])
    expected = codec.decode(bytes.fromhex(VECTORS["hello_connection_info"]["hex"]))
    assert hello.copy(message_id=want["message_id"]) == expected
    assert seen["hello"].token == "secret"


def test_server_chosen_id_is_adopted():
    chosen = {}

    def script(peer):
        hello = peer.welcome()
        assert hello.client_id is None
        chosen["id"] = peer.conn.client_id

    with server(script) as port:
        with twino.connect(port=port) as client:
            adopted = client.client_id
    assert adopted == chosen["id"] and adopted.startswith("server-")


@pytest.mark.parametrize("code", [ResultCode.BUSY, ResultCode.UNAUTHORIZED])
def test_refusal_raises(code):
    def script(peer):
        peer.event()
        peer.sock.sendall(peer.conn.refuse(code))

    with server(script) as port:
        with pytest.raises(twino.TwinoRefused) as caught:
            twino.connect(port=port, client_id="dup")
    assert caught.value.code == code


def test_wrong_echo_raises():
    def script(peer):
        peer.sock.sendall(b"HTTP/1.1 400\r\n")

    with server(script) as port:
        with pytest.raises(twino.TwinoError, match="unexpected server response"):
            twino.connect(port=port)


def test_join_with_ping_and_a_delivery_in_between():
    def script(peer):
        peer.welcome()
        join = peer.frame()
        assert (join.type, join.content_type, join.target) == (MessageType.SERVER, 601, "orders")
        assert join.pending_response and join.source == "me"
        peer.sock.sendall(codec.PING_BYTES)
        assert isinstance(peer.event(), PongReceived)
        peer.send(Frame(MessageType.QUEUE_MESSAGE, message_id="m1", target="orders",
                        content_type=1001, content=b"early"))
        peer.send(codec.response(join, target="me"))
        leave = peer.frame()
        assert leave.content_type == 602 and not leave.pending_response

    with server(script) as port:
        with twino.connect(port=port, client_id="me") as client:
            assert client.join("orders") == 0
            client.leave("orders", wait_response=False)
            assert client.recv(timeout=5).content == b"early"


def test_push_ack_nack_and_error_response():
    def script(peer):
        peer.welcome()
        for answer in ("ack", "nack", "error"):
            push = peer.frame()
            assert push.type == MessageType.QUEUE_MESSAGE and push.pending_ack
            assert push.target == "orders" and push.content_type == 1001
            if answer == "ack":
                assert push.headers == [("Subject", "s")] and push.high_priority
                peer.send(codec.server_ack(push.message_id, "orders", 1001))
            elif answer == "nack":
                peer.send(codec.server_ack(push.message_id, "orders", 1001, "no-consumers"))
            else:
                peer.send(codec.response(push, ResultCode.UNAUTHORIZED, target="orders"))

    with server(script) as port:
        with twino.connect(port=port, client_id="me") as client:
            ok = client.push("orders", 1001, "body", {"Subject": "s"}, wait_ack=True,
                             high_priority=True)
            assert ok.ok and ok.reason is None
            nack = client.push("orders", 1001, b"body", wait_ack=True)
            assert not nack.ok and nack.reason == "no-consumers"
            error = client.push("orders", 1001, b"body", wait_ack=True)
            assert not error.ok and error.frame.content_type == ResultCode.UNAUTHORIZED


def test_consume_ack_and_nack():
    delivery = codec.decode(bytes.fromhex(VECTORS["queue_message_to_consumer"]["hex"]))

    def script(peer):
        peer.welcome()
        peer.send(delivery)
        peer.send(delivery.copy(message_id="second"))
        assert peer.frame() == codec.acknowledge(delivery.copy(ttl=15), "me").copy(ttl=15)
        nack = peer.frame()
        assert nack.message_id == "second" and codec.nack_reason(nack) == "error"

    with server(script) as port:
        with twino.connect(port=port, client_id="me") as client:
            first = client.recv()
            assert first.content == b'{"OrderId":42}' and first.pending_ack
            client.ack(first)
            client.nack(client.recv(), "error")


def test_pull_collects_until_end_and_sends_the_options():
    def script(peer):
        peer.welcome()
        request = peer.frame()
        assert request.type == MessageType.QUEUE_PULL_REQUEST
        assert request.headers == [("Count", "2"), ("Clear", "all"), ("Info", "yes"),
                                   ("Order", "LIFO")]
        for index, body in enumerate([b"p1", b"p2"], 1):
            stored = Frame(MessageType.QUEUE_MESSAGE, message_id=f"m{index}", target="orders",
                           content_type=1001, content=body)
            peer.send(codec.pull_item(stored, request.message_id, 2, index, (0, 2 - index)))
        peer.send(codec.pull_status(request, NoContent.END))
        for status in (NoContent.EMPTY, NoContent.UNACCEPTABLE):
            peer.send(codec.pull_status(peer.frame(), status))

    with server(script) as port:
        with twino.connect(port=port, client_id="me") as client:
            pulled = client.pull("orders", 1001, 2, clear=True, order_lifo=True, info=True)
            assert [frame.content for frame in pulled] == [b"p1", b"p2"]
            assert pulled[1].header(Header.INDEX) == "2"
            assert client.pull("orders", 1001, 1) == []
            with pytest.raises(twino.TwinoError, match="Unacceptable"):
                client.pull("orders", 1001, 1)


def test_direct_request_respond_and_direct_ack():
    def script(peer):
        peer.welcome()
        request = peer.frame()
        assert request.type == MessageType.DIRECT_MESSAGE and request.pending_response
        assert request.target == "@name:mailer"
        peer.send(codec.response(request, content=b"pong", source="other"))
        peer.send(Frame(MessageType.DIRECT_MESSAGE, pending_response=True, message_id="q",
                        source="other", target="me", content=b"ping"))
        answer = peer.frame()
        assert answer == codec.response(Frame(MessageType.DIRECT_MESSAGE, message_id="q",
                                              source="other"),
                                        content=b"yes", source="me").copy(ttl=15)
        direct = peer.frame()
        assert direct.pending_ack and direct.content_type == 7
        peer.send(codec.acknowledge(direct, "other"))

    with server(script) as port:
        with twino.connect(port=port, client_id="me") as client:
            reply = client.request("@name:mailer", "ping")
            assert reply.content == b"pong" and reply.content_type == 0
            incoming = client.recv()
            client.respond(incoming, "yes")
            result = client.send_direct("other", b"hi", content_type=7, wait_ack=True)
            assert result.ok and result.frame.high_priority


def test_ping_round_trip_and_timeout():
    def script(peer):
        peer.welcome()
        assert isinstance(peer.event(), PingReceived)
        peer.sock.sendall(codec.PONG_BYTES)
        assert peer.frame().content_type == 601  # never answered
        peer.wait_closed()

    with server(script) as port:
        with twino.connect(port=port, client_id="me") as client:
            assert client.ping() >= 0
            with pytest.raises(TimeoutError):
                client.join("orders", timeout=0.2)


def test_raw_frames_and_wire_ttl():
    def script(peer):
        peer.welcome()
        peer.sock.sendall(codec.encode(Frame(MessageType.QUEUE_MESSAGE, ttl=0, content=b"old")))
        peer.sock.sendall(codec.PING_BYTES)
        assert peer.frame().content == b"raw"

    with server(script) as port:
        with twino.connect(port=port, client_id="me", keep_wire_ttl=True) as client:
            assert client.recv_frame().ttl == 0
            assert client.recv_frame().type == MessageType.PING
            client.send_frame(Frame(MessageType.QUEUE_MESSAGE, content=b"raw"))
