"""The codec's properties: round trips in any chunking, the bulk scanner equal to the
incremental parser on any bytes, garbage never raising, byte ranges cut anywhere."""
import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import records as records_module
from mqksbridge.protocols.textqueue import (
    Damage, Parser, Record, record_start, record_start_in, scan)
from tests.textqueue.strategies import (
    as_tuples, chunked, parse_chunks, records, soup, write)

cuts = st.lists(st.integers(min_value=0, max_value=400), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(records, max_size=6), cuts)
def test_parse_of_write_is_identity_in_any_chunking(items, points):
    data = write(items)
    parsed, incomplete = parse_chunks(chunked(data, points))
    if items:                                  # the last record stays in progress ...
        assert incomplete is not None and incomplete.terminated
        parsed = parsed + [incomplete.record()]   # ... until the caller takes it as whole
    else:
        assert incomplete is None
    assert as_tuples(parsed) == [(c, body, list(variables)) for c, body, variables in items]
    assert all(isinstance(r, Record) for r in parsed)
    # Each record starts where the writer put it, and the control byte is there.
    offset = 0
    for (c, body, variables), record in zip(items, parsed):
        assert record.offset == offset
        offset += len(write([(c, body, variables)]))
        assert record.end == offset


@settings(max_examples=100, deadline=None)
@given(st.lists(records, max_size=6))
def test_scan_reads_what_the_writer_wrote(items):
    data = write(items)
    result = scan(data, 1000)
    whole = list(result.records()) + ([result.incomplete.record()] if result.incomplete else [])
    assert as_tuples(whole) == [(c, body, list(variables)) for c, body, variables in items]
    assert result.controls == bytes(data[o - 1000] for o in result.offsets)
    assert not result.damages


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(soup, cuts, st.integers(min_value=2, max_value=40) | st.none(), st.integers(0, 10**9))
def test_scan_equals_the_parser_on_any_bytes(data, points, max_record, base):
    kwargs = {} if max_record is None else {"max_record": max_record}
    items, incomplete = parse_chunks(chunked(data, points), base, max_record)
    result = scan(data, base, **kwargs)
    assert result.items() == items
    assert result.incomplete == incomplete
    assert result.controls == bytes(r.raw[0] for r in result.records())
    # The parser is the simple path: one byte at a time gives the same answer.
    assert parse_chunks([data[i:i + 1] for i in range(len(data))], base, max_record) == (items, incomplete)


@settings(max_examples=500, deadline=None)
@given(soup, cuts)
def test_garbage_never_raises_and_every_byte_is_accounted_for(data, points):
    items, incomplete = parse_chunks(chunked(data, points))
    for item in items + ([incomplete.record()] if incomplete else []):
        if isinstance(item, Record):
            item.control, item.body, item.body_bytes, item.problems
            for variable in item.variables:
                variable.name, variable.value, variable.width, variable.value_offset
        else:
            assert isinstance(item, Damage)
    # Records never overlap and come in file order.
    ends = [0]
    for item in items:
        assert item.offset >= ends[-1]
        if isinstance(item, Record):
            assert data[item.offset:item.end - 1] == item.raw and data[item.end - 1:item.end] == b"\n"
            ends.append(item.end)


def test_parser_memory_stays_bounded_on_a_line_without_end():
    parser = Parser(max_record=1000)
    out = parser.feed(b"-" + b"x" * 500)
    chunk = b"y" * 4096
    for _ in range(2000):                      # 8 MB of one line
        out += parser.feed(chunk)
        assert len(parser._line) <= 1000
    assert out == [Damage(0, "too-long")]
    assert parser.incomplete() is None
    tail = b"\n continued\n\\v=1\n"
    out = parser.feed(tail + b"-next\n=after\n")
    assert out == [Record(1 + 500 + 2000 * 4096 + len(tail), b"-next")]
    assert parser.incomplete().data == b"=after\n"


# -- byte ranges ---------------------------------------------------------------------------

def _windows(data, cuts):
    """Read `data` as ranges cut at record starts, as the pipeline does."""
    starts = [0] + [record_start(data, cut) for cut in cuts if cut > 0]
    starts = sorted({len(data) if s is None else s for s in starts} | {len(data)})
    items, incomplete = [], None
    for begin, end in zip(starts, starts[1:]):
        result = scan(data[begin:end], begin)
        items += result.items()
        if result.incomplete is not None:
            if end < len(data):                 # a record starts at `end`: this one is whole
                items.append(result.incomplete.record())
            else:
                incomplete = result.incomplete
    return items, incomplete


_SMALL = (b"#header\n\\queue=q\n-one\n two\n\\i=1\n\\r=0  \n\n=done\n\\e=a1\n"
          b"!bad\r\n\\x=1\r\n\r\n \\orphan\n-\xc3\xa9t\xc3\xa9\n\\v\n?unknown\n-last\n")


def test_every_cut_of_a_small_file_reads_each_record_once():
    whole = scan(_SMALL)
    expected = (whole.items(), whole.incomplete)
    for cut in range(len(_SMALL) + 1):
        assert _windows(_SMALL, [cut]) == expected, cut
    for a in range(0, len(_SMALL) + 1, 3):
        for b in range(a, len(_SMALL) + 1, 5):
            assert _windows(_SMALL, [a, b]) == expected, (a, b)


@settings(max_examples=300, deadline=None)
@given(soup, st.lists(st.integers(0, 200), max_size=4))
def test_any_cuts_of_any_bytes_read_like_the_whole(data, cuts):
    whole = scan(data)
    assert _windows(data, cuts) == (whole.items(), whole.incomplete)


@settings(max_examples=300, deadline=None)
@given(soup, st.integers(0, 120), st.integers(3, 9))
def test_record_start_in_a_file_matches_the_buffer(data, offset, chunk):
    found = record_start(data, offset)
    in_file = record_start_in(io.BytesIO(data), offset, chunk)
    if found is not None:
        assert in_file == found
    else:                                       # none the buffer can show: the end of the file
        assert in_file == len(data)
    if in_file < len(data):
        assert in_file >= offset and (in_file == 0 or data[in_file - 1] == 0x0A)


@settings(max_examples=300, deadline=None)
@given(records, st.integers(0, 10**6), st.booleans())
def test_the_fast_record_parse_equals_the_line_by_line_one(record, offset, late):
    def ascii(text):
        return text.encode("ascii", "replace").decode().replace("\x00", "0")
    control, body, variables = record
    raw = write([(ascii(control), ascii(body), [ascii(v) for v in variables])])[:-1]
    raw += b"\n late" if late else b""
    clean = records_module._parse_clean(offset, raw)
    if clean is None:
        assert late and variables
    else:
        assert clean == records_module._parse_lines(offset, raw, True)
