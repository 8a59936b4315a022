"""Every fast path of the journal record held equal to the plain path, by one property.

The plain path is record.py's definition as journal.py applies it one record at a time:
`encode_message`, and `decode` in its general form (`_decode_any`: split, dict, value
codecs). Each fast path below gets arbitrary input of its kind: records as the broker
writes them (escapes, non-ASCII text, empty and big values, every settle and door), hand
edited, damaged, forged under a valid checksum, plain TextQueue records and any bytes;
messages in batches as a broker turn makes them. Input is cut anywhere into chunks (lists
of records, byte ranges cut at record starts, batches), and each chunk's answer must be
the plain path's, values and errors (TextQueueError) alike.
"""
import dataclasses
import random
import re

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from mqksbridge.pipeline import schema
from mqksbridge.pipeline.batches import codec_column, record_batch
from mqksbridge.pipeline.blocks import Block

from mqksbridge.protocols.textqueue import (
    Record, TextQueueError, journal, record, record_start, scan, scan_queued)
from mqksbridge.protocols.textqueue.columns import FIELDS as COLUMNS, decode_columns
from mqksbridge.protocols.textqueue.journal import Envelope, Settle
from mqksbridge.protocols.textqueue.queued import decode_fresh
from tests.textqueue.strategies import chunked, parse_chunks, records, soup, write
from tests.textqueue.test_textqueue_journal import (
    BASE, _ms, _strings, batches, envelopes, plain_envelopes, segment)

DOORS = [None, *sorted(record.DOOR_LETTERS.values())]
NAMES = [n for n in schema.COLUMNS if n not in ("file", "queue", "offset")]
ARROW = to_arrow_schema(schema.spark_schema(NAMES), timezone="UTC")


def outcome(fn):
    """What `fn()` gives, or TextQueueError when it raises the codec's error."""
    try:
        return fn()
    except TextQueueError:
        return TextQueueError


# -- input -----------------------------------------------------------------------------------

@st.composite
def with_doors(draw):
    """Envelopes, the settled ones with a consumer's door or none."""
    return [e if e.settled is None else dataclasses.replace(
        e, settled=e.settled._replace(door=draw(st.sampled_from(DOORS))))
        for e in draw(st.lists(envelopes(), max_size=6))]


@st.composite
def big(draw):
    """A message with values of thousands of bytes (escaped ones among them)."""
    size = draw(st.integers(1000, 40_000))
    text = draw(st.sampled_from(["x", "é", "%", " ", "\n", "a b"])) * (size // 3)
    return Envelope(text[:2000], draw(_strings), (draw(st.sampled_from(
        [text.encode(), b"\x00" * size, bytes(range(256)) * (size // 256 + 1)])),),
        {text[:50]: text[:3000]}, text[:500], "mqks", text[:100], created_at=draw(_ms) / 1000)


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
    lines = segment(draw(with_doors())).split(b"\n")
    for _ in range(draw(st.integers(0, 6))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["value", "insert", "continuation", "body", "base64", "crlf",
                                   "trim", "vouch"]))
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
        elif op == "crlf":
            lines[i] = line + b"\r"
        elif op == "trim":
            lines[i] = line.rstrip(b" ")
        elif op == "vouch" and line.startswith(b"\\c="):
            lines[i] = b"\\c=-     "
    return b"\n".join(lines)


@st.composite
def damaged(draw):
    """A journal segment with bit flips, tears, garbage and in-place edits."""
    raw = bytearray(segment(draw(st.lists(envelopes(), min_size=1, max_size=5))))
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "tear", "garbage", "retry", "settle", "ack"]))
        at = rng.randrange(len(raw)) if raw else 0
        if kind == "flip" and raw:
            raw[at] ^= 1 << rng.randrange(8)
        elif kind == "tear":
            del raw[at:]
        elif kind == "garbage":
            raw[at:at] = draw(soup)
        elif kind == "retry":
            raw = bytearray(bytes(raw).replace(b"\\r=", b"\\r=" + draw(
                st.sampled_from([b"7", b"x", b" ", b"12", b"", b"999"])), 1))
        elif kind == "settle":
            raw = bytearray(bytes(raw).replace(b"\\e=   ", b"\\e=aK5", 1))
        else:
            raw = bytearray(bytes(raw).replace(b"\n-", b"\n=", 1))
    return bytes(raw)


_line = st.binary(max_size=10) | st.sampled_from(
    [b"\\i=x", b"\\t=5", b"\\t=abc", b"\\r=1  ", b"\\e=aK1", b"\\c=-", b"\\enc=base64",
     b"\\priority=1", b"\\ttl=5", b"\\headers=a", b" more", b"\\moved=1.2", b"\\x", b""])


@st.composite
def forged(draw):
    """A record with any immutable part under a valid checksum and a fresh tail."""
    lines = [b"-" + draw(st.binary(max_size=8))] + draw(st.lists(_line, max_size=5))
    fixed = b"\n".join(lines)[1:] + b"\n"
    retry = draw(st.integers(0, 999))
    return (b"-" + fixed + b"\\r=%-3d\n\\e=        \n\\c=" % retry
            + record.checksum(fixed) + b"\n")


journals = st.one_of(
    st.tuples(with_doors(), st.integers(0, BASE * 2)).map(lambda a: (segment(*a), a[1])),
    st.lists(big(), min_size=1, max_size=2).map(lambda envs: (segment(envs), BASE)),
    st.tuples(edited() | damaged(), st.sampled_from([0, BASE])),
    st.lists(forged(), min_size=1, max_size=5).map(lambda rs: (b"".join(rs), 0)),
    st.lists(records, max_size=5).map(lambda items: (write(items), 0)),
    st.tuples(soup, st.sampled_from([0, BASE, 1 << 60])),
)
cuts = st.lists(st.integers(0, 3000), max_size=6)


def raws_of(data):
    """The raw bytes of every record of a buffer, its tail taken as whole."""
    found = scan(data)
    return found.raws + ([found.incomplete.record().raw] if found.incomplete else [])


def record_chunks(data, points):
    """The buffer's records cut into lists at the given record counts."""
    raws = raws_of(data)
    return [c for c in chunked(raws, [p % (len(raws) + 1) for p in points]) if c] if raws else []


def byte_ranges(data, points):
    """(offset, bytes) of the buffer cut at the record starts at or after the points."""
    starts = sorted({0, len(data)} | {s for s in (record_start(data, p) for p in points
                                                   if p < len(data)) if s is not None})
    return [(a, data[a:b]) for a, b in zip(starts, starts[1:])]


# -- the fast decoders ---------------------------------------------------------------------

_ENVELOPE = ("status", "id", "subject", "frames", "headers", "sender", "origin", "tracker",
             "priority", "created_at", "expires_at", "retry", "settled")


def check_decode(data, base, points):
    """journal.decode (the layout matched whole) and decode_fields (values found by
    search) against the general decode."""
    for chunk in record_chunks(data, points):
        for raw in chunk:
            plain = outcome(lambda: journal._decode_any(record.raw_of(raw), base))
            assert outcome(lambda: journal.decode(raw, base)) == plain
            fields = outcome(lambda: journal.decode_fields(raw, _ENVELOPE, base))
            if plain is TextQueueError:
                assert fields is TextQueueError
            else:
                assert fields == tuple(getattr(plain, name) for name in _ENVELOPE)


def _expected(raw, name, base):
    """One column of one record the plain way (decode_fields, the envelope's values)."""
    def field(name):
        return journal.decode_fields(raw, [name], base)[0]

    if name in record.FIELDS:
        return field(name)
    variables = record.split_variables(record.raw_of(raw))[1]

    def created_ms():
        t = variables.get(b"t")
        return base + record.integer(t, "t") if t is not None else 0

    if name == "created_ms":
        created = created_ms()
        assert created / 1000 == field("created_at")
        return created
    if name == "expires_ms":            # reads \t only when there is a \ttl, as the decoder
        expires = field("expires_at")
        return None if expires is None else created_ms() + int(variables[b"ttl"])
    if name in ("settle_reason", "settled_ms", "settle_door"):
        settled = field("settled")
        if settled is None:
            return None
        return {"settle_reason": settled.reason, "settle_door": settled.door,
                "settled_ms": round(settled.at * 1000)}[name]
    if name == "frame_count":
        return len(field("frames"))
    if name == "size":
        return sum(map(len, field("frames")))
    raise AssertionError(name)


def check_columns(data, base, points):
    """columns.decode_columns, a column of a list of records at once."""
    for chunk in record_chunks(data, points):
        for name in COLUMNS:
            want = outcome(lambda: [_expected(raw, name, base) for raw in chunk])
            got = outcome(lambda: decode_columns(chunk, [name], base)[name])
            assert got == want, name


def check_queued(data, offset, points):
    """queued.scan_queued (the fresh records of a buffer) and decode_fresh, against the
    Parser, checksum_state, places_of and decode, on byte ranges cut at record starts."""
    for start, chunk in byte_ranges(data, points):
        check_scan_queued(chunk, start + offset)


def check_scan_queued(data, offset=0, points=()):
    """scan_queued(data, offset) against the plain path; returns it."""
    found = scan_queued(data, offset)
    items, incomplete = parse_chunks(chunked(data, points), offset)
    assert found.scan.items() == items
    assert found.scan.incomplete == incomplete
    tail = journal.whole_tail(incomplete)
    assert found.tail == tail
    rs = [item for item in items if isinstance(item, Record)] + ([tail] if tail else [])
    queued = [r for r in rs if r.control == "-"]
    assert found.offsets == [r.offset for r in queued]
    assert found.raws == [r.raw for r in queued]
    assert len(found.retries) == len(found.sizes) == len(queued)
    for r, retry, size in zip(queued, found.retries, found.sizes):
        if retry is None:
            assert size is None
            continue
        # What a fresh record is, by the plain path.
        assert journal.checksum_state(r) == "ok"
        assert journal.places_of(r) == journal.fresh_places(r.offset, len(r.raw) + 1)
        assert int(r.variable("r").value) == retry
        assert r.variable("e").value == ""
        env = outcome(lambda: journal.decode(r))
        if env is TextQueueError:
            continue                    # only a forged checksum gets here (see forged())
        assert env.retry == retry and env.settled is None and env.status == "-"
        assert env.frames == (r.raw[1:1 + size],) and not env.priority
        assert env.expires_at is None
    check_decode_fresh(found, BASE)
    return found


def check_decode_fresh(found, base_ms):
    """decode_fresh over the fresh records of `found`, against journal.decode of each:
    equal, or None (a layout it leaves to decode); returns the columns."""
    fresh = [(raw, size) for raw, retry, size in zip(found.raws, found.retries, found.sizes)
             if retry is not None]
    columns = decode_fresh([raw for raw, _ in fresh], [size for _, size in fresh], base_ms)
    if columns is None:
        return None
    assert all(len(column) == len(fresh) for column in columns)
    for (raw, _), values in zip(fresh, zip(*columns)):
        env = journal.decode(raw, base_ms)
        assert values == (env.id, env.subject, env.frames[0], env.sender, env.origin,
                          env.created_at)
        assert env.frames == (values[2],) and env.headers is None and env.tracker == ""
        assert not env.priority and env.expires_at is None
    return columns


def check_arrow(data, base, points):
    """arrow_columns.Fields (numpy and pyarrow over a block's buffer), with the rows it
    leaves to the codec filled in as the pipeline does (batches.record_batch), against
    the codec column by column (batches.codec_column: columns.decode_columns, held equal
    to the plain path above)."""
    for chunk in record_chunks(data, points):
        buffer = b"\n".join(chunk)           # as pipeline.blocks has them: no LF after the last
        offsets, at = [], 7
        for raw in chunk:
            offsets.append(at)
            at += len(raw) + 1
        check_block(Block.of_records(buffer, 7, offsets, chunk), base)


def _codec_batch(names, base, raws):
    """Each column the codec's way, or the error it raises."""
    try:
        return [codec_column(name, ARROW.field(name).type, base, raws) for name in names], None
    except Exception as e:          # noqa: BLE001 - the kind is compared below
        return None, e


def check_block(block, base, names=NAMES):
    """record_batch (the bulk columns, the rows they leave out filled in by the codec)
    equal to codec_column, column by column, values and errors."""
    want, error = _codec_batch(names, base, block.raws)
    arrow = pa.schema([ARROW.field(n) for n in names])
    if error is not None:
        with pytest.raises(type(error)):
            record_batch(names, arrow, "f", "q", base, block)
        return
    got = record_batch(names, arrow, "f", "q", base, block)
    for name, column, expected in zip(names, got.columns, want):
        assert _values(column) == _values(expected), name


def _values(array):
    """The array's values; timestamps as integers (a hand-edited time may lie beyond
    the years Python's datetime holds)."""
    if pa.types.is_timestamp(array.type):
        array = array.cast(pa.int64())
    return array.to_pylist()


# -- the fast encoders ---------------------------------------------------------------------

def check_fast_checksum(data, _base, _points):
    """record.fast_checksum, by table, against checksum."""
    assert record.fast_checksum(data) == record.checksum(data)


def check_plain(envs, base, _points):
    """journal.encode_plain: None, or what encode_message writes."""
    for env in envs:
        fast = journal.encode_plain(env, base)
        if fast is not None:
            assert fast == journal.encode_message(env, base_ms=base)


def check_batch(batch, base, points):
    """journal.encode_batch, a batch at a time (cut anywhere), against encode_message one
    message at a time, settled as settle_edits leave a record."""
    envs, retries, settles = batch
    assert journal.settles_of(*journal.settle_runs(settles)) == settles
    settled = {i: Settle(reason, at, door) for i, reason, at, door in settles}
    one_by_one = []
    for i, env in enumerate(envs):
        r = journal.encode_message(env, base_ms=base, retry=retries[i])
        if i in settled:
            s = settled[i]
            edited_ = bytearray(r)
            for edit in journal.settle_edits(journal.fresh_places(0, len(r)), s.reason,
                                             s.at, env.created_at, s.door):
                edited_[edit.offset:edit.offset + len(edit.data)] = edit.data
            r = bytes(edited_)
        one_by_one.append(r)
    bounds = sorted({0, len(envs)} | {p % (len(envs) + 1) for p in points})
    for a, b in zip(bounds, bounds[1:]):
        mine = [(i - a, reason, at, door) for i, reason, at, door in settles if a <= i < b]
        data, sizes = journal.encode_batch(envs[a:b], base, retries[a:b],
                                           *journal.settle_runs(mine))
        assert data == b"".join(one_by_one[a:b])
        assert sizes == list(map(len, one_by_one[a:b]))


def equals_the_plain_path(inputs, check, examples=150):
    """The one property, for one fast path: on any input of its kind, cut anywhere, it
    answers what the plain path answers. (A test function per fast path, not one
    parametrised test: pytest-twisted wraps a hypothesis test's function in place, so a
    second parameter would run it wrapped twice.)"""
    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(inputs, cuts)
    def test(value_base, points):
        check(*value_base, points)
    return test


test_decode_and_decode_fields = equals_the_plain_path(journals, check_decode, 300)
test_columns_decode_columns = equals_the_plain_path(journals, check_columns, 300)
test_queued_scan_queued_and_decode_fresh = equals_the_plain_path(journals, check_queued, 300)
test_arrow_columns_fields = equals_the_plain_path(journals, check_arrow)
test_record_fast_checksum = equals_the_plain_path(
    st.tuples(st.binary(max_size=300), st.just(0)), check_fast_checksum)
test_journal_encode_plain = equals_the_plain_path(
    st.tuples(st.lists(plain_envelopes() | envelopes(), max_size=4), _ms), check_plain, 300)
test_journal_encode_batch = equals_the_plain_path(st.tuples(batches(), _ms), check_batch, 300)


# Inputs that once told two paths apart, run through every decoder.
KNOWN = [
    b"-\n\\e= \x00\n",              # a stamp after a space: blank to neither path
    b"-\n\\enc=\n",                 # an empty encoding is bad to both paths, not "none"
    b"-\n\\t=\n",                   # an empty time fails only the columns that read it
    b"-\n\\ttl=5\n\\t=1\n-\n\\t=\n",  # ... and expiry only for records with a ttl
    b"-\n\\ttl=\n",                 # an empty ttl is bad to both paths, not "no expiry"
]


@pytest.mark.parametrize("check", [check_decode, check_columns, check_queued, check_arrow])
@pytest.mark.parametrize("data", KNOWN)
def test_known_cases(check, data):
    check(data, 0, [])
    check(data, 0, [1, 2, 3])


def test_an_unknown_column_is_refused():
    with pytest.raises(TextQueueError):
        decode_columns([b"-x"], ["colour"])


def test_the_inputs_reach_the_fast_cases():
    """Not vacuous: what the broker writes takes the fast paths (the layout match, fresh
    records, the bulk batch encoder)."""
    env = Envelope("6f1c", "order.new", (b"hello",), None, "127.0.0.1:5.7", "mqks",
                   created_at=(BASE + 3200) / 1000)
    raw = journal.encode_message(env, base_ms=BASE)
    assert journal._LAYOUT.fullmatch(raw[:-1])
    found = check_scan_queued(journal.encode_header("q", 1, BASE) + raw * 3)
    assert found.retries == [0, 0, 0] and check_decode_fresh(found, BASE) is not None
    assert journal.encode_plain(env, BASE) == raw
    assert journal._plain_fixed([env] * 3, BASE) is not None
    assert re.fullmatch(rb"[A-Za-z0-9_-]{6}", record.fast_checksum(raw))
