"""The bulk paths of the data source are held equal to the codec's record-at-a-time ones:
`blocks.split` to `textqueue.scan`, and each column `batches.record_batch` builds in bulk
(protocols/textqueue/arrow_columns.py) to `batches.codec_column` (columns.decode_columns, so
journal.decode_fields): same values for journal records, hand-edited ones, plain
TextQueue records and garbage, and an error where the codec raises one."""
import dataclasses
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from mqksbridge.pipeline import schema
from mqksbridge.pipeline.batches import codec_column, record_batch
from mqksbridge.pipeline.blocks import Block, split
from mqksbridge.protocols.textqueue import TextQueueError, journal, scan
from tests.pipeline import traffic
from tests.textqueue.strategies import records, soup, write
from tests.textqueue.test_textqueue_journal import BASE, envelopes, segment

NAMES = [n for n in schema.COLUMNS if n not in ("file", "queue", "offset")]
ARROW = to_arrow_schema(schema.spark_schema(NAMES), timezone="UTC")
DOORS = [None, "mqks", "malamute", "twino", "textqueue"]

# Values a variable may hold after people and tools had their way with a file.
_VALUES = st.sampled_from([
    b"", b"0", b"7", b"12  ", b"   ", b" 5", b"5 ", b"+5", b"-3", b"-0", b"0x10", b"1_0", b"x",
    b"%41%42", b"a%3Ab", b"\xc3\xa9", b"\xff", b"99999999999999999999", b"999999999999999",
    b"aK5", b"a5s", b"aK5h", b"dT9271  ", b"x60000  ", b"z5", b"aZ5", b"as", b"a", b"m",
    b"a-5", b"aK-5s", b"aKs", b"a999999999999h", b"base64", b"base6", b"base64 ", b"QUJD",
    b"QR==", b"QUJ=", b"=", b"mqks:host:1", b"twino", b":x", b"k=v&a=b", b"k=v&k=w", b"novalue",
    b"1", b"2", b"10"]) | st.binary(max_size=8) | st.text(
    "0123456789adxrmKMTQsh -+=:%&", max_size=12).map(str.encode)
_NAMES = st.sampled_from([b"i", b"s", b"f", b"t", b"r", b"e", b"c", b"ttl", b"enc", b"frames",
                          b"tracker", b"priority", b"headers", b"note", b"t2", b""])
_BODIES = st.text("ABCDQRUJabc0123+/= \n", max_size=20).map(lambda t: t.replace("\n", "\n ").encode())


@st.composite
def edited(draw):
    """A journal segment with lines changed, added and moved by hand."""
    envs = draw(st.lists(envelopes(), min_size=1, max_size=4))
    envs = [e if e.settled is None else dataclasses.replace(e, settled=e.settled._replace(
        door=draw(st.sampled_from(DOORS)))) for e in envs]
    lines = segment(envs).split(b"\n")
    for _ in range(draw(st.integers(0, 6))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["value", "insert", "continuation", "body", "base64"]))
        line = lines[i]
        if op == "value" and line.startswith(b"\\") and b"=" in line:
            lines[i] = line.partition(b"=")[0] + b"=" + draw(_VALUES)
        elif op == "insert":
            lines.insert(i, b"\\" + draw(_NAMES) + b"=" + draw(_VALUES))
        elif op == "continuation":
            lines.insert(i, b" " + draw(st.binary(max_size=6)).replace(b"\n", b""))
        elif op == "body" and line[:1] in (b"-", b"=", b"!", b"#"):
            lines[i] = line[:1] + draw(_BODIES)
        elif op == "base64" and line[:1] in (b"-", b"=", b"!", b"#"):
            frames = draw(st.sampled_from([b"", b"\n\\frames=1", b"\n\\frames=2", b"\n\\frames=0",
                                           b"\n\\frames=x"]))
            lines[i] = line[:1] + draw(_BODIES) + b"\n\\enc=base64" + frames
    return b"\n".join(lines)


def _split_equals_scan(data, max_record=None):
    kwargs = {} if max_record is None else {"max_record": max_record}
    block, tail = split(data, 5, **kwargs)
    want = scan(data, 5, **kwargs)
    assert block.offsets.tolist() == want.offsets
    assert block.raws == want.raws
    assert block.controls == want.controls
    assert tail == want.incomplete
    return block, tail


def _codec_batch(names, base, raws):
    """Each column the codec's way, or the error it raises."""
    try:
        return [codec_column(name, ARROW.field(name).type, base, raws) for name in names], None
    except Exception as e:          # noqa: BLE001 - the kind is compared below
        return None, e


def _check(data, base, rows=None, names=NAMES):
    block, tail = _split_equals_scan(data)
    if tail is not None:
        record = tail.record()
        blocks = [block, Block.of_records(record.raw, record.offset, [record.offset], [record.raw])]
    else:
        blocks = [block]
    for b in blocks:
        if rows is not None and len(b):
            b = b.take(np.array([rows.random() < 0.6 for _ in range(len(b))]))
        want, error = _codec_batch(names, base, b.raws)
        arrow = pa.schema([ARROW.field(n) for n in names])
        if error is not None:
            with pytest.raises(type(error)):
                record_batch(names, arrow, "f", "q", base, b)
            continue
        got = record_batch(names, arrow, "f", "q", base, b)
        for name, column, expected in zip(names, got.columns, want):
            assert _values(column) == _values(expected), name


def _values(array):
    """The array's values; timestamps as integers (a hand-edited time may lie beyond
    the years Python's datetime holds)."""
    if pa.types.is_timestamp(array.type):
        array = array.cast(pa.int64())
    return array.to_pylist()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), max_size=6), st.integers(0, BASE * 2), st.lists(st.sampled_from(DOORS)))
def test_bulk_columns_equal_the_codec_on_journal_records(envs, base, doors):
    envs = [e if e.settled is None or not doors else
            dataclasses.replace(e, settled=e.settled._replace(door=doors[i % len(doors)]))
            for i, e in enumerate(envs)]
    _check(segment(envs, base), base)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edited(), st.randoms(use_true_random=False))
def test_bulk_columns_equal_the_codec_on_hand_edited_records(data, rows):
    _check(data, BASE)
    _check(data, BASE, rows)


@settings(max_examples=60, deadline=None)
@given(st.lists(records, max_size=5))
def test_bulk_columns_equal_the_codec_on_plain_textqueue_records(items):
    _check(write(items), 0)


@settings(max_examples=100, deadline=None)
@given(soup, st.sampled_from([0, BASE, 1 << 60]))
def test_bulk_columns_on_garbage_raise_only_what_the_codec_raises(data, base):
    _check(data, base)


@settings(max_examples=150, deadline=None)
@given(soup | edited(), st.integers(2, 40))
def test_split_equals_scan_with_any_record_limit(data, max_record):
    _split_equals_scan(data, max_record)


def test_bulk_columns_on_realistic_traffic_and_subsets():
    """Thousands of records of every kind (tests/pipeline/traffic.py), whole and
    filtered; only rows the bulk rules leave out take the codec's path."""
    items = list(traffic.envelopes(3000, seed=3))
    data = b"".join(traffic.encode(item, BASE) for item in items)
    _check(data, BASE)
    _check(data, BASE, random.Random(1))
    block, _ = split(data)
    from mqksbridge.protocols.textqueue.arrow_columns import Fields
    fields = Fields(block, BASE)
    for name in ("status", "subject", "origin", "consumer", "settle_reason", "retry", "size",
                 "created", "settled", "id", "sender", "frame_count", "expires", "priority",
                 "variables", "checksum", "headers"):
        assert fields.column(name, ARROW.field(name).type)[1] is None, name


def test_columns_nobody_selected_are_not_decoded():
    good = journal.encode_message(journal.Envelope("ok", "s", (b"x",), created_at=5.0))
    bad = good.replace(b"\\t=5000", b"\\t=soon")
    block, _ = split(good + bad + good + b"-")
    arrow = pa.schema([ARROW.field(n) for n in ("id", "subject")])
    assert record_batch(["id", "subject"], arrow, "f", "q", 0, block).num_rows == 3
    with pytest.raises(TextQueueError, match="t is not an integer"):
        record_batch(["created"], pa.schema([ARROW.field("created")]), "f", "q", 0, block)


@pytest.mark.parametrize("headers", [b"k=v&a=b", b"k=v&k=w", b"novalue", b"k=v&", b"", b"=", b"a=b=c",
                                     b"%41=%42", b"k=caf\xc3\xa9", b"k=v&a=b&k=x"])
def test_headers_variables_and_checksums_in_bulk_equal_the_codec(headers):
    """The map and checksum columns on the shapes a hand may leave: each value of a
    `\\headers` line (a key twice, a pair without '=', escapes, non-ASCII) beside records
    the broker wrote, a variable twice, a name the broker does not write, an edited and
    a broken checksum."""
    envs = [journal.Envelope("a", "s", (b"x",), {"k": "v", "t": "1"}, created_at=1.0),
            journal.Envelope("b", "s", (b"y",), created_at=2.0)]
    data = b"".join(journal.encode_message(e) for e in envs)
    edits = data.replace(b"\\headers=k=v&t=1\n", b"\\headers=" + headers + b"\n", 1)
    twice = data.replace(b"\\i=b\n", b"\\i=b\n\\i=c\n\\note=hand\n\\bare\n")
    signed = data.replace(b"\\c=", b"\\c=-  \n\\c=", 1)
    broken = data.replace(b"\\s=s\n", b"\\s=z\n", 1)
    names = ["headers", "variables", "checksum"]
    for each in (data, edits, twice, signed, broken):
        _check(each + each, BASE, names=names)
