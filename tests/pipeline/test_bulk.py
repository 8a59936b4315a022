"""The bulk paths of the data source are held equal to the codec's record-at-a-time ones:
`blocks.split` to `textqueue.scan`, and each column `batches.record_batch` builds in bulk
(protocols/textqueue/arrow_columns.py) to `batches.codec_column` (columns.decode_columns, so
journal.decode_fields): same values, and an error where the codec raises one. The property
on arbitrary records is the codec's shared one (tests/textqueue/test_textqueue_fast_paths.py,
through `check_block`); here are the pipeline's cases: realistic traffic, row selection,
hand-made headers, variables and checksums."""
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.pipeline.batches import record_batch
from mqksbridge.pipeline.blocks import Block, split
from mqksbridge.protocols.textqueue import TextQueueError, journal, scan
from tests.pipeline import traffic
from tests.textqueue.strategies import soup
from tests.textqueue.test_textqueue_fast_paths import ARROW, NAMES, check_block, edited
from tests.textqueue.test_textqueue_journal import BASE


def _split_equals_scan(data, max_record=None):
    kwargs = {} if max_record is None else {"max_record": max_record}
    block, tail = split(data, 5, **kwargs)
    want = scan(data, 5, **kwargs)
    assert block.offsets.tolist() == want.offsets
    assert block.raws == want.raws
    assert block.controls == want.controls
    assert tail == want.incomplete
    return block, tail


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
        check_block(b, base, names)


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
