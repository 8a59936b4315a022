"""Core Message <-> Twino frames for other doors, and appending pull headers to raw frames."""
from bridge.convert.twino import from_frame, queue_delivery, wire_id
from core import Message
from protocols.twino.codec import Frame, MessageType, append_headers, decode, encode


def test_foreign_message_becomes_a_queue_delivery_with_metadata_headers():
    message = Message("m1", "orders.new", (b"ab", b"cde"), {"h": "v"}, "alice", "malamute")
    frame = queue_delivery(message, "m1", "ch", 7, True, True, False)
    assert (frame.type, frame.target, frame.content_type, frame.source) == (
        MessageType.QUEUE_MESSAGE, "ch", 7, "alice")
    assert frame.content == b"abcde" and frame.first_acquirer and frame.pending_ack
    assert frame.headers == [("Subject", "orders.new"), ("X-Origin", "malamute"),
                             ("Frame-Lengths", "2,3"), ("h", "v")]
    assert decode(encode(frame)).headers == frame.headers
    hidden = queue_delivery(message, "m1", "ch", 7, False, False, True)
    assert hidden.source is None


def test_twino_push_subject_comes_from_the_header_or_the_queue():
    plain = Frame(MessageType.QUEUE_MESSAGE, target="ch", content_type=1, content=b"x")
    assert from_frame(plain, "i", "p", "ch/1", None, None, 0.0).subject == "ch/1"
    tagged = Frame(MessageType.QUEUE_MESSAGE, target="ch", content_type=1, content=b"x",
                   headers=[("subject", " a.b "), ("k", "1"), ("k", "2")])
    message = from_frame(tagged, "i", "p", "ch/1", None, None, 0.0)
    assert message.subject == "a.b" and message.headers == {"subject": " a.b ", "k": "1"}


def test_ids_that_cannot_travel_are_replaced():
    assert wire_id("abc") == "abc"
    assert wire_id("") is None and wire_id("x" * 256) is None


def test_append_headers_keeps_the_frame_and_sets_flags():
    for headers in (None, [("A", "1")]):
        original = Frame(MessageType.QUEUE_MESSAGE, pending_ack=True, message_id="id",
                         source="s", target="t", content_type=9, headers=headers,
                         content=b"y" * 300)
        raw = append_headers(encode(original), [("Request-Id", "r")], 0x80, 0x4000)
        frame = decode(raw)
        assert frame.headers == (headers or []) + [("Request-Id", "r")]
        assert frame.first_acquirer and not frame.pending_ack
        assert (frame.message_id, frame.source, frame.target, frame.content) == (
            "id", "s", "t", b"y" * 300)
