"""Every verified Twino 3.7.2 wire vector: decoded field by field and rebuilt byte for byte."""
import hashlib
import json
import re
from pathlib import Path

import pytest

from mqksbridge.protocols.twino import codec, models, schema
from mqksbridge.protocols.twino.codec import MessageType, NoContent, ResultCode

DATA = json.loads((Path(__file__).parents[1] / "data" / "twino_vectors.json").read_text())
VECTORS = DATA["vectors"]
BY_NAME = {vector["name"]: bytes.fromhex(vector["hex"]) for vector in VECTORS}
FRAME_VECTORS = [vector for vector in VECTORS if "type" in vector["decoded"]]

PRODUCER = "7f1c2a9e4b3d4e5f8a6b7c8d9e0f1a2b"
CONSUMER = "0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f"
RECEIVER = "5e4d3c2b1a09f8e7d6c5b4a392817060"


def message_type(name: str) -> MessageType:
    return MessageType[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]


def check_fields(frame: codec.Frame, want: dict) -> None:
    assert frame.type == message_type(want["type"])
    assert frame.type == want.get("type_code", frame.type)
    assert frame.ttl == want["ttl_on_wire"]
    for key in ("first_acquirer", "high_priority", "pending_response", "pending_ack",
                "message_id", "source", "target", "content_type"):
        if key in want:
            assert getattr(frame, key) == want[key], key
    if "has_header" in want:
        assert (frame.headers is not None) == want["has_header"]
    if "headers" in want:
        expected = None if want["headers"] is None else [tuple(pair) for pair in want["headers"]]
        assert frame.headers == expected
    assert len(frame.content) == want["length"]
    if "content_utf8" in want:
        assert frame.content.decode("utf-8") == want["content_utf8"]
    if "content_sha256" in want:
        assert hashlib.sha256(frame.content).hexdigest() == want["content_sha256"]


def test_the_vector_file_is_complete():
    assert len(VECTORS) == 32 and len(FRAME_VECTORS) == 30


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_vector(vector):
    raw = bytes.fromhex(vector["hex"])
    want = vector["decoded"]
    if "ascii" in want:
        assert raw == want["ascii"].encode("ascii") == codec.PROTOCOL
        assert schema.PROTOCOL_BYTES.parse(raw) == raw
        return
    hand, spec = codec.decode(raw), schema.parse_frame(raw)
    check_fields(hand, want)
    assert spec == hand
    assert codec.encode(hand) == raw
    assert schema.build_frame(hand) == raw


def test_all_frame_vectors_as_one_stream_byte_by_byte():
    stream = b"".join(BY_NAME[vector["name"]] for vector in FRAME_VECTORS)
    decoder = codec.FrameDecoder(apply_ttl=False)
    frames = []
    for index in range(len(stream)):
        frames += decoder.feed(stream[index:index + 1])
    assert frames == [codec.decode(BY_NAME[vector["name"]]) for vector in FRAME_VECTORS]
    assert decoder.buffered == 0


def test_ping_and_pong_constants():
    assert codec.PING_BYTES == BY_NAME["ping"]
    assert codec.PONG_BYTES == BY_NAME["pong"]
    assert codec.encode(codec.Frame(MessageType.PING)) == BY_NAME["ping"]


def test_accepted_and_refused_builders():
    assert codec.encode(codec.accepted(PRODUCER, "2" * 32)) == BY_NAME["accepted"]
    busy = codec.refused(ResultCode.BUSY, "2" * 32)
    assert codec.encode(busy) == BY_NAME["busy_duplicate_client_id"]


def test_response_builder():
    join = codec.decode(BY_NAME["join_channel_601"])
    assert codec.encode(codec.response(join)) == BY_NAME["response_ok"]
    create = codec.decode(BY_NAME["create_queue_610"])
    duplicate = codec.response(create, ResultCode.DUPLICATE)
    assert codec.encode(duplicate) == BY_NAME["response_duplicate_481"]
    request = codec.decode(BY_NAME["direct_request"])
    answer = codec.response(request, content=b"pong", source=RECEIVER)
    assert codec.encode(answer) == BY_NAME["direct_response"]


def test_ack_builders():
    delivered = codec.decode(BY_NAME["queue_message_to_consumer"])
    assert codec.encode(codec.acknowledge(delivered, CONSUMER)) == BY_NAME["ack_from_consumer"]
    nack = codec.acknowledge(delivered, CONSUMER, codec.NackReason.NONE)
    assert codec.encode(nack) == BY_NAME["nack_with_reason"]
    assert codec.nack_reason(nack) == "none" and codec.nack_reason(delivered) is None
    direct = codec.Frame(MessageType.DIRECT_MESSAGE, message_id="6" * 32, source=PRODUCER,
                         target=RECEIVER, content_type=5557)
    assert codec.encode(codec.acknowledge(direct, RECEIVER)) == BY_NAME["direct_ack"]
    own = codec.decode(BY_NAME["ack_from_consumer"]).copy(source=None)
    assert codec.encode(codec.server_ack("4" * 32, "orders", 1001)) == codec.encode(own)


def test_relays_carry_ttl_minus_one():
    """Read with the real reader's TTL rule, then written back unchanged: 16 becomes 15."""
    ack = codec.decode(BY_NAME["ack_from_consumer"], apply_ttl=True)
    assert codec.encode(ack) == BY_NAME["ack_relayed_to_producer"]
    push = codec.decode(BY_NAME["queue_push_pending_ack"], apply_ttl=True)
    delivery = push.copy(first_acquirer=True, pending_ack=True)
    assert codec.encode(delivery) == BY_NAME["queue_message_to_consumer"]


def test_pull_builders():
    request = codec.decode(BY_NAME["pull_request_count"])
    assert codec.encode(codec.pull_status(request, NoContent.END)) == BY_NAME["pull_end"]
    stored = codec.Frame(MessageType.QUEUE_MESSAGE, first_acquirer=True, ttl=15,
                         pending_ack=True, message_id="4" * 32, source=PRODUCER,
                         target="orders", content_type=1001, content=b"p1")
    item = codec.pull_item(stored, request.message_id, 2, 1, left=(0, 1))
    assert codec.encode(item) == BY_NAME["pulled_message"]
    assert stored.headers is None


def test_event_notification_builder():
    body = models.subscription_event(channel="orders", client_id=CONSUMER, client_name="c1",
                                     client_type="consumer")
    frame = models.event_frame(models.CLIENT_JOINED, body, "orders")
    assert codec.encode(frame) == BY_NAME["event_notification"]


def test_event_subscription_numbers():
    subscribe = codec.decode(BY_NAME["event_subscribe"])
    assert subscribe.content_type == codec.EVENT_SUBSCRIBE != codec.EVENT_UNSUBSCRIBE
    assert subscribe.target in models.QUEUE_EVENTS
