"""Hand codec vs construct schema, streaming decoder, limits and TTL."""
import struct
import tracemalloc
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.twino import codec, schema
from mqksbridge.protocols.twino.codec import (Frame, FrameDecoder, MessageType, Reason,
                                              TwinoProtocolError)

PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

names = st.none() | st.text(min_size=1, max_size=255).filter(lambda s: len(s.encode()) <= 255)
keys = st.text(min_size=1, max_size=20).filter(lambda k: ":" not in k and "\r\n" not in k)
values = st.text(max_size=40).filter(lambda v: "\r\n" not in v)
headers = st.none() | st.lists(st.tuples(keys, values), max_size=6)
contents = st.binary(max_size=300) | st.sampled_from([252, 253, 65535, 65536]).map(bytes)
data_types = st.integers(0, 63).filter(lambda t: t not in (MessageType.PING, MessageType.PONG))


@st.composite
def data_frames(draw, ttl=st.integers(0, 31)):
    return Frame(draw(data_types), draw(st.booleans()), draw(st.booleans()), draw(ttl),
                 draw(st.booleans()), draw(st.booleans()), draw(names), draw(names), draw(names),
                 draw(st.integers(0, 0xFFFF)), draw(headers), draw(contents))


ping_pong_bytes = st.builds(
    lambda kind, high, flags, rest: bytes([kind | high, flags]) + rest,
    st.sampled_from([0x09, 0x0A]), st.sampled_from([0, 0x40, 0x80, 0xC0]),
    st.integers(0, 255), st.binary(min_size=6, max_size=6))
any_frames = data_frames() | ping_pong_bytes.map(codec.decode)


@PROPERTY
@given(data_frames())
def test_codec_and_schema_build_the_same_bytes(frame):
    assert codec.encode(frame) == schema.build_frame(frame)


@PROPERTY
@given(data_frames())
def test_round_trip_through_both_parsers(frame):
    raw = codec.encode(frame)
    assert codec.decode(raw) == frame
    assert schema.parse_frame(raw) == frame


@PROPERTY
@given(ping_pong_bytes)
def test_ping_pong_parse_alike_and_build_fixed(raw):
    frame = codec.decode(raw)
    assert schema.parse_frame(raw) == frame
    fixed = codec.PING_BYTES if raw[0] & 0x3F == 9 else codec.PONG_BYTES
    assert codec.encode(frame) == schema.build_frame(frame) == fixed


def outcome(parse, raw):
    try:
        return parse(raw)
    except TwinoProtocolError:
        return "error"


@PROPERTY
@given(data_frames(), st.data())
def test_codec_and_schema_parse_damaged_frames_alike(frame, data):
    raw = bytearray(codec.encode(frame))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(raw[:data.draw(st.integers(0, len(raw) + 1))])
    assert outcome(codec.decode, raw) == outcome(schema.parse_frame, raw)


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted(cut % (len(stream) + 1) for cut in cuts), len(stream)]
    return [stream[a:b] for a, b in zip(points, points[1:])]


@PROPERTY
@given(st.lists(any_frames, max_size=8), st.lists(st.integers(0, 10**6), max_size=12))
def test_any_chunking_yields_the_same_frames(frames, cuts):
    stream = b"".join(codec.encode(frame) for frame in frames)
    decoder = FrameDecoder(apply_ttl=False)
    decoded = []
    for chunk in split(stream, cuts):
        decoded += decoder.feed(chunk)
    assert decoded == [codec.decode(codec.encode(frame)) for frame in frames]
    assert decoder.buffered == 0


@PROPERTY
@given(st.lists(data_frames(st.integers(0, 3)), max_size=8), st.lists(st.integers(0, 10**6)))
def test_reader_decrements_ttl_and_drops_ttl_zero(frames, cuts):
    stream = b"".join(codec.encode(frame) for frame in frames)
    decoder = FrameDecoder()
    decoded = []
    for chunk in split(stream, cuts):
        decoded += decoder.feed(chunk)
    assert decoded == [frame.copy(ttl=frame.ttl - 1) for frame in frames if frame.ttl]
    assert decoder.expired == sum(1 for frame in frames if not frame.ttl)


@PROPERTY
@given(st.binary(max_size=3000), st.lists(st.integers(0, 10**6), max_size=10),
       st.integers(8, 5000))
def test_garbage_only_ever_raises_the_protocol_error(garbage, cuts, limit):
    decoder = FrameDecoder(max_frame_size=limit)
    try:
        for chunk in split(garbage, cuts):
            for frame in decoder.feed(chunk):
                assert isinstance(frame, Frame)
    except TwinoProtocolError as exc:
        assert exc.code is Reason.FRAME
    assert decoder.buffered <= max(limit, len(garbage))


HUGE_HEADS = [
    bytes([0x11, 0x10, 0, 0, 0, 0, 0, 0xFF]) + struct.pack("<Q", 2**63),
    bytes([0x11, 0x10, 0, 0, 0, 0, 0, 0xFE]) + struct.pack("<I", 0xFFFFFFFF),
    bytes([0x11, 0x30, 0, 0, 0, 0, 0, 0xFE]) + struct.pack("<I", 64 * 1024 * 1024 - 8),
]


@pytest.mark.parametrize("head", HUGE_HEADS)
def test_huge_declared_length_is_refused_before_allocation(head):
    decoder = FrameDecoder()  # 64 MiB
    tracemalloc.start()
    try:
        with pytest.raises(TwinoProtocolError, match="limit"):
            decoder.feed(head)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_length_at_the_limit_waits_for_the_body():
    decoder = FrameDecoder(max_frame_size=8 + 3 + 1000)
    assert decoder.feed(bytes([0x11, 0x10, 0, 0, 0, 0, 0, 0xFD]) + struct.pack("<H", 1000)) == []
    assert decoder.feed(b"x" * 1000)[0].content == b"x" * 1000


def test_header_block_counts_towards_the_limit():
    frame = Frame(MessageType.QUEUE_MESSAGE, headers=[("K", "v" * 50)], content=b"x" * 40)
    raw = codec.encode(frame)
    assert FrameDecoder(max_frame_size=len(raw)).feed(raw) == [frame.copy(ttl=15)]
    with pytest.raises(TwinoProtocolError):
        FrameDecoder(max_frame_size=len(raw) - 1).feed(raw[:12])


def test_frames_before_an_error_are_handed_over():
    good = codec.encode(Frame(MessageType.QUEUE_MESSAGE, content=b"ok"))
    bad = bytes([0x11, 0x10, 0, 0, 0, 0, 0, 0xFF]) + b"\xff" * 8
    with pytest.raises(TwinoProtocolError) as caught:
        FrameDecoder().feed(good + bad)
    assert [frame.content for frame in caught.value.done] == [b"ok"]
    assert caught.value.code is Reason.FRAME


@PROPERTY
@given(st.lists(st.binary(max_size=300), max_size=5), st.lists(st.integers(0, 10**6), max_size=8))
def test_every_frame_before_an_error_is_handed_over_under_any_chunking(contents, cuts):
    """specs/errors.md: the frames before the bad one come out in order (earlier reads plus
    the error's `done`), however the bytes are cut."""
    frames = [Frame(MessageType.QUEUE_MESSAGE, target="q", content=c) for c in contents]
    bad = bytes([0x11, 0x10, 0, 0, 0, 0, 0, 0xFF]) + b"\xff" * 8
    decoder, got = FrameDecoder(max_frame_size=1000), []
    with pytest.raises(TwinoProtocolError) as caught:
        for chunk in split(b"".join(map(codec.encode, frames)) + bad, cuts):
            got += decoder.feed(chunk)
    assert got + caught.value.done == [frame.copy(ttl=frame.ttl - 1) for frame in frames]


@pytest.mark.parametrize("frame", [
    Frame(MessageType.QUEUE_MESSAGE, target="x" * 256),
    Frame(MessageType.QUEUE_MESSAGE, message_id="é" * 128),
    Frame(MessageType.QUEUE_MESSAGE, content_type=70000),
    Frame(64),
    Frame(MessageType.QUEUE_MESSAGE, headers=[("a:b", "c")]),
    Frame(MessageType.QUEUE_MESSAGE, headers=[("a", "c\r\nd:e")]),
    Frame(MessageType.QUEUE_MESSAGE, headers=[("", "c")]),
    Frame(MessageType.QUEUE_MESSAGE, headers=[("k", "v" * 70000)]),
])
def test_unencodable_frames_raise_the_protocol_error(frame):
    with pytest.raises(TwinoProtocolError):
        codec.encode(frame)


def test_ttl_is_clamped_like_the_real_writer():
    assert codec.encode(Frame(MessageType.QUEUE_MESSAGE, ttl=40))[1] == 31
    assert codec.encode(Frame(MessageType.QUEUE_MESSAGE, ttl=-1))[1] == 0


def test_empty_names_are_absent_and_empty_header_list_is_legal():
    raw = codec.encode(Frame(MessageType.QUEUE_MESSAGE, message_id="", headers=[]))
    assert raw == bytes([0x11, 0x30, 0, 0, 0, 0, 0, 0, 0, 0])
    assert codec.decode(raw) == Frame(MessageType.QUEUE_MESSAGE, headers=[])


def test_header_lookup_is_case_insensitive_first_match_and_untrimmed():
    block = b"CC: a;1\r\n\r\n:nokey\r\nnocolon\r\ncc:b\r\nX:1:2\r\n"
    raw = bytes([0x11, 0x30, 0, 0, 0, 0, 0, 0]) + struct.pack("<H", len(block)) + block
    frame = codec.decode(raw)
    assert schema.parse_frame(raw) == frame
    assert frame.headers == [("CC", " a;1"), ("cc", "b"), ("X", "1:2")]
    assert frame.header("cc") == " a;1"
    assert frame.header_values("CC") == [" a;1", "b"]
    assert frame.header("missing") is None


def test_invalid_utf8_is_replaced_like_the_dotnet_reader():
    raw = bytes([0x11, 0x10, 2, 0, 0, 0, 0, 0]) + b"\xff\xfe"
    assert codec.decode(raw).message_id == "\ufffd\ufffd"


def test_copy_does_not_share_the_header_list():
    frame = Frame(MessageType.QUEUE_MESSAGE, headers=[("a", "1")])
    frame.copy().headers.append(("b", "2"))
    assert frame.headers == [("a", "1")]


def test_decode_wants_exactly_one_frame():
    raw = codec.encode(Frame(MessageType.QUEUE_MESSAGE, content=b"x"))
    for bad in (raw[:-1], raw + raw, b""):
        with pytest.raises(TwinoProtocolError):
            codec.decode(bad)
        with pytest.raises(TwinoProtocolError):
            schema.parse_frame(bad)


def test_large_frame_in_many_chunks():
    content = bytes(range(256)) * 8192  # 2 MiB: goes through the in-place buffer path
    raw = codec.encode(Frame(MessageType.QUEUE_MESSAGE, content=content))
    decoder = FrameDecoder()
    frames = []
    for start in range(0, len(raw), 50_000):
        frames += decoder.feed(raw[start:start + 50_000])
    assert [frame.content for frame in frames] == [content] and decoder.buffered == 0


def test_same_name_bytes_split_differently_keep_their_own_names():
    pairs = [("ab", None), ("a", "b"), (None, "ab"), ("a", "b"), ("\ufffd", "b")]
    pairs += [(f"s{i}", "t") for i in range(100)] + [("a", "b")]
    frames = [Frame(MessageType.QUEUE_MESSAGE, source=s, target=t, content=b"x")
              for s, t in pairs]
    raw = b"".join(codec.encode(frame) for frame in frames)
    assert FrameDecoder(apply_ttl=False).feed(raw) == frames
    bad = bytes([0x11, 0x10, 0, 1, 1, 0, 0, 0]) + b"\xff\xfe"
    assert [(f.source, f.target) for f in FrameDecoder().feed(bad + bad)] == [
        ("\ufffd", "\ufffd")] * 2


def test_large_frames_with_names_in_many_chunks():
    frames = [Frame(MessageType.QUEUE_MESSAGE, message_id=f"m{i}", source="s", target="t",
                    content_type=i, headers=[("K", str(i))], content=bytes([i]) * 700_000)
              for i in range(3)]
    raw = b"".join(codec.encode(frame) for frame in frames)
    decoder = FrameDecoder(apply_ttl=False)
    got = []
    for start in range(0, len(raw), 900_001):
        got += decoder.feed(raw[start:start + 900_001])
    assert got == frames and decoder.buffered == 0


# -- changing encoded frames is decode, change, encode ------------------------------------

@PROPERTY
@given(data_frames(), st.booleans(), st.booleans())
def test_reflag_is_decode_change_encode(frame, first, ack):
    raw = codec.encode(frame)
    expected = codec.encode(replace(codec.decode(raw), first_acquirer=first, pending_ack=ack))
    assert codec.reflag(raw, first, ack) == expected
    assert codec.reflag(raw, first, ack) == expected          # the kept result, again
    assert codec.reflag(bytes(raw), not first, ack) == codec.encode(
        replace(frame, first_acquirer=not first, pending_ack=ack))


def made_or_refused(make):
    """What `make` gives, or the TwinoProtocolError class when it refuses."""
    try:
        return make()
    except TwinoProtocolError:
        return TwinoProtocolError


@PROPERTY
@given(data_frames(), names.filter(bool), st.integers(1, 10**6), st.integers(1, 10**6),
       st.none() | st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
       st.sampled_from([None, True, False]))
def test_pull_answer_is_pull_item_encoded(frame, request_id, count, index, left, ack):
    """Equal bytes, or the same refusal (a request id no header can carry, such as CRLF)."""
    raw = codec.encode(frame)

    def plain():
        item = codec.pull_item(codec.decode(raw), request_id, count, index, left)
        return codec.encode(replace(item, first_acquirer=True,
                                    pending_ack=frame.pending_ack if ack is None else ack))
    assert made_or_refused(
        lambda: codec.pull_answer(raw, request_id, count, index, left, ack)) \
        == made_or_refused(plain)


@PROPERTY
@given(data_frames(), st.booleans(), st.booleans(), st.booleans())
def test_frame_template_renders_what_encode_makes(frame, first, high, ack):
    template = codec.FrameTemplate(codec.encode(replace(frame, message_id=None, content=b"")))
    assert template.render(frame.message_id, frame.content, first, high, ack) == codec.encode(
        replace(frame, first_acquirer=first, high_priority=high, pending_ack=ack))


def test_frame_template_refuses_what_encode_refuses():
    template = codec.FrameTemplate(codec.encode(Frame(MessageType.QUEUE_MESSAGE, target="q")))
    with pytest.raises(TwinoProtocolError):
        template.render("x" * 256, b"", False, False, False)
    with pytest.raises(UnicodeEncodeError):
        template.render("\udcff", b"", False, False, False)
    with pytest.raises(TwinoProtocolError):
        codec.FrameTemplate(codec.encode(Frame(MessageType.QUEUE_MESSAGE, message_id="m")))


def test_queue_id_of_remove_and_info_content():
    assert codec.queue_id_of(b"\x07\x01") == 0x107
    assert codec.queue_id_of(b"\xff\xff\x00") == 0xFFFF
    assert codec.queue_id_of(b"\x07") is None
