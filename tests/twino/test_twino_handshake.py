"""Server-side connection state machine, driven with bytes alone."""
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.twino import codec
from mqksbridge.protocols.twino.codec import Frame, MessageType, ResultCode
from mqksbridge.protocols.twino.handshake import (
    FrameReceived, Hello, PingReceived, PongReceived, ProtocolError, State,
    TwinoServerConnection, parse_hello,
)

VECTORS = {vector["name"]: bytes.fromhex(vector["hex"]) for vector in json.loads(
    (Path(__file__).parents[1] / "data" / "twino_vectors.json").read_text())["vectors"]}
PRODUCER = "7f1c2a9e4b3d4e5f8a6b7c8d9e0f1a2b"
HELLO = VECTORS["hello_connection_info"]
JOIN = VECTORS["join_channel_601"]
PUSH = VECTORS["queue_push_pending_ack"]
PIPELINED = codec.PROTOCOL + HELLO + JOIN + codec.PING_BYTES + PUSH + codec.PONG_BYTES

EXPECTED = [
    Hello(PRODUCER, "order-producer", "producer", "secret",
          {"Client-Name": "order-producer", "Client-Type": "producer", "Client-Token": "secret",
           "Client-Id": PRODUCER}, "CONNECT", "/"),
    FrameReceived(codec.decode(JOIN, apply_ttl=True)),
    PingReceived(),
    FrameReceived(codec.decode(PUSH, apply_ttl=True)),
    PongReceived(),
]


def connection() -> TwinoServerConnection:
    return TwinoServerConnection(id_factory=lambda: "2" * 32)


def hello_frame(content: bytes) -> bytes:
    return codec.encode(Frame(MessageType.SERVER, first_acquirer=True, message_id="1" * 32,
                              content_type=codec.ContentType.HELLO, content=content))


def test_pipelined_stream_in_one_chunk():
    conn = connection()
    assert conn.receive_data(PIPELINED) == EXPECTED
    assert conn.state is State.DECIDING
    assert conn.accept() == codec.PROTOCOL + VECTORS["accepted"]
    assert conn.state is State.OPEN and conn.client_id == PRODUCER


@pytest.mark.parametrize("cut", range(len(PIPELINED) + 1))
def test_split_at_every_byte(cut):
    conn = connection()
    events = conn.receive_data(PIPELINED[:cut]) + conn.receive_data(PIPELINED[cut:])
    assert events == EXPECTED


def test_one_byte_at_a_time():
    conn = connection()
    events = list(itertools.chain.from_iterable(
        conn.receive_data(PIPELINED[index:index + 1]) for index in range(len(PIPELINED))))
    assert events == EXPECTED


@settings(max_examples=200)
@given(st.lists(st.integers(0, len(PIPELINED)), max_size=10))
def test_any_split(cuts):
    points = [0, *sorted(cuts), len(PIPELINED)]
    conn = connection()
    events = []
    for start, end in zip(points, points[1:]):
        events += conn.receive_data(PIPELINED[start:end])
    assert events == EXPECTED


def test_nothing_to_write_before_the_hello():
    conn = connection()
    assert conn.receive_data(codec.PROTOCOL + HELLO[:-1]) == []
    assert conn.state is State.HELLO
    with pytest.raises(RuntimeError):
        conn.accept()


def test_legacy_protocol_is_echoed():
    conn = connection()
    conn.receive_data(codec.PROTOCOL_V1 + HELLO)
    assert conn.accept().startswith(b"TMQ/1.01\x90")


def test_unknown_protocol_is_an_error_and_the_connection_stays_closed():
    conn = connection()
    assert conn.receive_data(b"GET / HTTP/1.1\r\n") == [ProtocolError(
        "unknown protocol bytes b'GET / HT'")]
    assert conn.state is State.CLOSED
    assert conn.receive_data(HELLO) == []


def test_first_frame_must_be_a_hello():
    conn = connection()
    events = conn.receive_data(codec.PROTOCOL + JOIN + HELLO)
    assert len(events) == 1 and isinstance(events[0], ProtocolError)
    assert conn.state is State.CLOSED


def test_missing_client_id_is_generated_at_accept():
    ids = iter(["generated-client", "accepted-message"])
    conn = TwinoServerConnection(id_factory=lambda: next(ids))
    [hello] = conn.receive_data(codec.PROTOCOL + hello_frame(b"GET /\r\n"))
    assert hello.client_id is None and (hello.method, hello.path) == ("GET", "/")
    accepted = codec.decode(conn.accept()[8:])
    assert accepted == codec.accepted("generated-client", "accepted-message")
    assert conn.client_id == "generated-client"


def test_door_may_choose_the_id():
    conn = connection()
    conn.receive_data(codec.PROTOCOL + HELLO)
    assert codec.decode(conn.accept("chosen")[8:]).target == "chosen"


@pytest.mark.parametrize("code", [ResultCode.BUSY, ResultCode.UNAUTHORIZED])
def test_refusal_is_echo_plus_server_frame(code):
    conn = connection()
    conn.receive_data(codec.PROTOCOL + HELLO)
    written = conn.refuse(code)
    assert written == codec.PROTOCOL + codec.encode(codec.refused(code, "2" * 32))
    if code == ResultCode.BUSY:
        assert written[8:] == VECTORS["busy_duplicate_client_id"]
    assert conn.state is State.CLOSED
    with pytest.raises(RuntimeError):
        conn.send(Frame(MessageType.RESPONSE))


def test_hello_parsing_trims_and_ignores_case():
    hello = parse_hello(b"tmq://remote-host CONNECT\r\nclient-id:abc \r\nCLIENT-NAME:  n\r\n"
                        b"X-Custom: v w\r\nno colon line\r\n\r\n")
    assert (hello.client_id, hello.name, hello.type, hello.token) == ("abc", "n", None, None)
    assert hello.properties == {"client-id": "abc", "CLIENT-NAME": "n", "X-Custom": "v w"}
    assert hello.method == "tmq://remote-host" and hello.path == "CONNECT"


def test_repeated_hello_key_is_a_protocol_error():
    conn = connection()
    events = conn.receive_data(
        codec.PROTOCOL + hello_frame(b"CONNECT /\r\nClient-Id: a\r\nclient-id: b\r\n"))
    assert [type(event) for event in events] == [ProtocolError]


def test_ttl_zero_frames_are_dropped_and_others_relay_with_ttl_minus_one():
    conn = connection()
    dead = codec.encode(codec.decode(PUSH).copy(ttl=0))
    events = conn.receive_data(codec.PROTOCOL + HELLO + dead + PUSH)
    assert conn.expired == 1
    conn.accept()
    relayed = events[1].frame
    assert relayed.ttl == 15 and conn.send(relayed)[1] & 0x1F == 15


def test_frames_before_garbage_are_delivered_then_the_error():
    conn = TwinoServerConnection(max_frame_size=1000)
    oversize = bytes([0x11, 0x10, 0, 0, 0, 0, 0, 0xFD]) + (5000).to_bytes(2, "little")
    events = conn.receive_data(codec.PROTOCOL + HELLO + JOIN + oversize)
    assert [type(event) for event in events] == [Hello, FrameReceived, ProtocolError]
    assert conn.state is State.CLOSED


def test_send_needs_an_open_connection():
    conn = connection()
    frame = Frame(MessageType.QUEUE_MESSAGE, content=b"x")
    with pytest.raises(RuntimeError):
        conn.send(frame)
    conn.receive_data(codec.PROTOCOL + HELLO)
    conn.accept()
    assert conn.send(frame) == codec.encode(frame)


def test_a_stranger_may_leave_only_max_hello_bytes_of_an_incomplete_hello():
    hello = codec.encode(Frame(MessageType.SERVER, content_type=codec.ContentType.HELLO,
                               content=b"CONNECT /\r\n" + b"X-Pad: " + b"p" * 5000 + b"\r\n"))
    conn = TwinoServerConnection(max_hello=1000)
    events = conn.receive_data(codec.PROTOCOL + hello[:900])
    assert events == [] and conn.state is State.HELLO
    events = conn.receive_data(hello[900:1100])
    assert [type(event) for event in events] == [ProtocolError]
    assert "no hello in the first 1000 bytes" in events[0].reason
    assert conn.state is State.CLOSED
    # a whole hello of any size that arrives in one read is read; so is what follows it
    conn = TwinoServerConnection(max_hello=1000)
    events = conn.receive_data(codec.PROTOCOL + hello + JOIN)
    assert [type(event) for event in events] == [Hello, FrameReceived]
    # after the hello, a partial frame is held up to max_frame_size
    conn.accept()
    assert conn.receive_data(codec.encode(Frame(MessageType.QUEUE_MESSAGE,
                                                content=b"x" * 5000))[:4000]) == []
    assert conn.state is State.OPEN
