"""LineFramer: same lines for any chunking, and the line-length limit."""

import pytest
from hypothesis import given, settings, strategies as st

from mqksbridge.protocols.mqks.errors import MqksProtocolError, Reason
from mqksbridge.protocols.mqks.framing import DEFAULT_MAX_LINE, LineFramer

line_bytes = st.binary(max_size=12).map(lambda b: b.replace(b'\n', b'x'))
streams = st.tuples(st.lists(line_bytes, max_size=20), line_bytes).map(
    lambda t: b''.join(line + b'\n' for line in t[0]) + t[1])


def chunked(data, cuts):
    """Split `data` at the given cut points (sorted, deduplicated)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0] + points + [len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:])]


def feed_all(framer, chunks):
    """Collect lines until the end or a line too long; return (lines, overflowed)."""
    out = []
    for chunk in chunks:
        try:
            out.extend(framer.feed(chunk))
        except MqksProtocolError as exc:
            assert exc.code is Reason.LINE_TOO_LONG
            out.extend(exc.done)
            return out, True
    return out, False


@given(streams, st.lists(st.integers(min_value=0, max_value=400), max_size=30))
def test_mqks_framer_same_lines_for_any_chunking(data, cuts):
    lines, overflowed = feed_all(LineFramer(), chunked(data, cuts))
    assert not overflowed
    assert lines == data.split(b'\n')[:-1]


@given(streams)
def test_mqks_framer_one_byte_chunks(data):
    framer = LineFramer()
    lines, _ = feed_all(framer, [data[i:i + 1] for i in range(len(data))])
    assert lines == data.split(b'\n')[:-1]


@settings(max_examples=300)
@given(streams, st.lists(st.integers(min_value=0, max_value=400), max_size=30),
       st.integers(min_value=0, max_value=10))
def test_mqks_framer_limit_is_chunking_independent(data, cuts, limit):
    *complete, tail = data.split(b'\n')
    expected = []
    for line in complete:
        if len(line) > limit:
            break
        expected.append(line)
    should_overflow = len(expected) < len(complete) or len(tail) > limit
    lines, overflowed = feed_all(LineFramer(limit), chunked(data, cuts))
    assert overflowed == should_overflow
    assert lines == expected


def test_mqks_framer_keeps_cr_and_empty_lines():
    assert LineFramer().feed(b'a b c\r\n\n') == [b'a b c\r', b'']


def test_mqks_framer_default_limit_exact_and_over():
    framer = LineFramer()
    assert framer.max_line == DEFAULT_MAX_LINE == 1 << 20
    assert framer.feed(b'x' * DEFAULT_MAX_LINE) == []
    assert framer.feed(b'\n') == [b'x' * DEFAULT_MAX_LINE]
    with pytest.raises(MqksProtocolError) as info:
        LineFramer().feed(b'ok line\n' + b'y' * (DEFAULT_MAX_LINE + 1))
    assert info.value.done == [b'ok line']


def test_mqks_framer_overflow_detected_in_small_pieces():
    framer = LineFramer(max_line=1000)
    with pytest.raises(MqksProtocolError) as info:
        for _ in range(1001):
            framer.feed(b'z')
    assert info.value.done == []


def test_mqks_framer_complete_long_line_in_one_chunk():
    with pytest.raises(MqksProtocolError) as info:
        LineFramer(max_line=3).feed(b'abc\nabcd\nab\n')
    assert info.value.done == [b'abc']
