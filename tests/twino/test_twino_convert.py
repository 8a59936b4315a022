"""Core Message <-> Twino frames for other doors, and appending pull headers to raw frames."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.bridge.convert import Unrepresentable
from mqksbridge.bridge.convert.twino import (
    frame_headers,
    from_frame,
    queue_delivery,
    refusal,
    wire_id,
)
from mqksbridge.core import Message
from mqksbridge.protocols.twino.codec import (
    Frame,
    MessageType,
    TwinoProtocolError,
    append_headers,
    decode,
    encode,
)

texts = st.text(max_size=12) | st.sampled_from(["jobs", "a\r\nb", "\udcff", "s" * 256])
bodies = st.binary(max_size=40) | st.sampled_from([252, 253, 65536]).map(bytes)
messages = st.builds(
    Message, texts, texts, st.lists(bodies, min_size=1, max_size=3).map(tuple),
    st.none() | st.dictionaries(st.text(min_size=1, max_size=5), texts, max_size=2), texts,
    st.sampled_from(["mqks", "malamute", "twino"]), st.just(""), st.booleans())


def reference_delivery(message, message_id, channel, queue_id, first, pending_ack, hide):
    """queue_delivery as one plain encode of the frame the mapping describes."""
    source = None if hide else message.sender or None
    if source is not None and len(source.encode("utf-8", "replace")) > 255:
        raise Unrepresentable("sender")
    try:
        return encode(Frame(MessageType.QUEUE_MESSAGE, first, message.priority, 16, False,
                            pending_ack, message_id, source, channel, queue_id,
                            frame_headers(message), message.body))
    except (TwinoProtocolError, UnicodeEncodeError) as exc:
        raise Unrepresentable(str(exc)) from None


def outcome(build, *args):
    try:
        return build(*args)
    except Unrepresentable:
        return Unrepresentable


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.none() | texts, st.sampled_from(["ch", "é" * 100, "x" * 256]),
       st.sampled_from([0, 1, 0xFFFF, 0x10000]), st.booleans(), st.booleans(), st.booleans())
def test_queue_delivery_is_the_plain_encode_of_its_frame(message, message_id, channel, queue_id,
                                                         first, pending_ack, hide):
    args = (message, message_id, channel, queue_id, first, pending_ack, hide)
    expected = outcome(reference_delivery, *args)
    assert outcome(queue_delivery, *args) == expected
    assert outcome(queue_delivery, *args) == expected       # again, from the cached parts


def test_foreign_message_becomes_a_queue_delivery_with_metadata_headers():
    message = Message("m1", "orders.new", (b"ab", b"cde"), {"h": "v"}, "alice", "malamute")
    frame = decode(queue_delivery(message, "m1", "ch", 7, True, True, False))
    assert (frame.type, frame.target, frame.content_type, frame.source) == (
        MessageType.QUEUE_MESSAGE, "ch", 7, "alice")
    assert frame.content == b"abcde" and frame.first_acquirer and frame.pending_ack
    assert frame.headers == [("Subject", "orders.new"), ("X-Origin", "malamute"),
                             ("Frame-Lengths", "2,3"), ("h", "v")]
    hidden = decode(queue_delivery(message, "m1", "ch", 7, False, False, True))
    assert hidden.source is None


def test_twino_push_subject_comes_from_the_header_or_the_queue():
    plain = Frame(MessageType.QUEUE_MESSAGE, target="ch", content_type=1, content=b"x")
    assert from_frame(plain, "i", "p", "ch/1", None, None, 0.0).subject == "ch/1"
    tagged = Frame(MessageType.QUEUE_MESSAGE, target="ch", content_type=1, content=b"x",
                   headers=[("subject", " a.b "), ("k", "1"), ("k", "2")])
    message = from_frame(tagged, "i", "p", "ch/1", None, None, 0.0)
    assert message.subject == "a.b" and message.headers == {"subject": " a.b ", "k": "1"}


def test_frame_lengths_split_the_body_back_into_frames_when_they_add_up():
    def frames(lengths, body=b"abcde"):
        frame = Frame(MessageType.QUEUE_MESSAGE, target="ch", content_type=1, content=body,
                      headers=[("Frame-Lengths", lengths)])
        return from_frame(frame, "i", "p", "ch/1", None, None, 0.0).frames
    assert frames("2,3") == (b"ab", b"cde")
    assert frames("0,5,0") == (b"", b"abcde", b"")
    assert frames("", b"") == ()
    assert frames("2,2") == frames("x,5") == frames("-1,6") == (b"abcde",)


def test_what_twino_cannot_carry_is_refused_not_cut():
    for message in (Message("m", "a\r\nb", (b"x",), None, "s", "mqks"),
                    Message("m", "\udcff", (b"x",), None, "s", "mqks"),
                    Message("m", "e", (b"x",), None, "s" * 256, "malamute"),
                    Message("m", "e" * 70000, (b"x",), None, "s", "mqks")):
        assert refusal(message)
        with pytest.raises(Unrepresentable):
            queue_delivery(message, "m", "ch", 1, True, False, False)
    assert refusal(Message("m", "a\rb\n", (b"x",), None, "s", "mqks")) is None


def test_ids_that_cannot_travel_are_replaced():
    assert wire_id("abc") == "abc"
    assert wire_id("") is None and wire_id("x" * 256) is None and wire_id("\udcff") is None


def test_append_headers_keeps_the_frame_and_sets_flags():
    for headers in (None, [("A", "1")]):
        original = Frame(MessageType.QUEUE_MESSAGE, pending_ack=True, message_id="id",
                         source="s", target="t", content_type=9, headers=headers,
                         content=b"y" * 300)
        raw = append_headers(encode(original), [("Request-Id", "r")], True, False)
        frame = decode(raw)
        assert frame.headers == (headers or []) + [("Request-Id", "r")]
        assert frame.first_acquirer and not frame.pending_ack
        assert (frame.message_id, frame.source, frame.target, frame.content) == (
            "id", "s", "t", b"y" * 300)
