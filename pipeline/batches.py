"""Records to Arrow record batches: only the declared columns, only the selected rows.

A block of records (pipeline/blocks.py) becomes one `pyarrow.RecordBatch` whose schema
is exactly the one Spark expects. Rows are selected first, by control byte for the
status and by offset and created/settled time, so rows nobody wants are not decoded.
Each column is then built in bulk (pipeline/bulk.py); the rows the bulk rules leave
out are decoded by the codec (`columns.decode_columns`) and put in their places.
`codec_column` is that record-at-a-time path for any column, the definition the bulk
one is held equal to.
"""
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pyarrow as pa

from mqksbridge.pipeline.bulk import Fields
from mqksbridge.protocols.textqueue import Record, journal
from mqksbridge.protocols.textqueue.columns import decode_columns

STATUS_OF = {"-": "queued", "=": "done", "!": "error", "#": "comment"}
CONTROL_OF = {name: control for control, name in STATUS_OF.items()}
_INT64 = (-(1 << 63), (1 << 63) - 1)

# Fields of decode_columns each column needs.
_FIELDS = {"status": ("status",), "id": ("id",), "subject": ("subject",), "origin": ("origin",),
           "sender": ("sender",), "consumer": ("settle_door",), "tracker": ("tracker",),
           "priority": ("priority",), "created": ("created_ms",),
           "expires": ("expires_ms",), "settled": ("settled_ms",),
           "settle_reason": ("settle_reason",), "retry": ("retry",), "headers": ("headers",),
           "frame_count": ("frame_count",), "size": ("size",), "body": ("body",),
           "body_bytes": ("frames",), "frames": ("frames",)}


@dataclass
class Bounds:
    """A time interval in milliseconds since the epoch; None: unbounded. Comparisons
    are on milliseconds, what the journal stores, with the bound's sub-millisecond
    part kept by `low_open`/`high_open`."""
    low: Optional[float] = None
    low_open: bool = False
    high: Optional[float] = None
    high_open: bool = False

    def empty(self):
        return self.low is None and self.high is None

    def mask(self, values):
        """Which values (ints or None) lie in the interval."""
        low, high = self.low, self.high
        out = []
        for v in values:
            ok = v is not None
            if ok and low is not None:
                ok = v > low if self.low_open else v >= low
            if ok and high is not None:
                ok = v < high if self.high_open else v <= high
            out.append(ok)
        return out

    def mask_array(self, values):
        """`mask` of an int64 array, exactly: the bounds become integer limits."""
        ok = np.ones(len(values), bool)
        if self.low is not None:
            least = math.floor(self.low) + 1 if self.low_open else math.ceil(self.low)
            ok &= values >= min(max(least, _INT64[0]), _INT64[1]) if least <= _INT64[1] else False
        if self.high is not None:
            most = math.ceil(self.high) - 1 if self.high_open else math.floor(self.high)
            ok &= values <= max(min(most, _INT64[1]), _INT64[0]) if most >= _INT64[0] else False
        return ok


@dataclass
class Selection:
    """Rows the reader keeps (the filters Spark pushed down, all of them ANDed):
    controls (None: any), and created/settled bounds."""
    controls: Optional[frozenset] = None        # control characters (str)
    created: Bounds = field(default_factory=Bounds)
    settled: Bounds = field(default_factory=Bounds)
    offsets: Bounds = field(default_factory=Bounds)


def select(block, selection: Selection, base_ms):
    """The block of the records the selection keeps."""
    wanted = selection.controls
    if wanted is not None and len(block):
        controls = np.frombuffer(block.buffer, np.uint8)[block.starts]
        table = np.array([chr(b) in wanted for b in range(128)] + [False] * 128)
        keep = table[controls]
        beyond = np.flatnonzero(controls >= 0x80)
        if len(beyond):
            statuses = decode_columns(block.raws_of(beyond), ["status"])["status"]
            keep[beyond] = [s in wanted for s in statuses]
        block = block.take(keep)
    if not selection.offsets.empty() and len(block):
        block = block.take(selection.offsets.mask_array(block.offsets))
    for name in ("created", "settled"):
        bounds = getattr(selection, name)
        if not bounds.empty() and len(block):
            block = block.take(_time_mask(block, name, bounds, base_ms))
    return block


def _time_mask(block, name, bounds, base_ms):
    ms, present, fast = Fields(block, base_ms).times(name)
    keep = bounds.mask_array(ms) & present
    slow = np.flatnonzero(~fast)
    if len(slow):
        values = decode_columns(block.raws_of(slow), [f"{name}_ms"], base_ms)[f"{name}_ms"]
        keep[slow] = bounds.mask(values)
    return keep


def record_batch(names, arrow_schema, path, queue, base_ms, block):
    """One RecordBatch of the named columns for the records of `block`."""
    n = len(block)
    fields = Fields(block, base_ms)
    arrays = []
    for name, spec in zip(names, arrow_schema):
        if name == "file":
            array = pa.repeat(pa.scalar(path, spec.type), n)
        elif name == "queue":
            array = pa.repeat(pa.scalar(queue, spec.type), n)
        elif name == "offset":
            array = pa.array(block.offsets, spec.type)
        else:
            array, slow = fields.column(name, spec.type)
            if slow is not None:
                rows = np.flatnonzero(slow)
                codec = codec_column(name, spec.type, base_ms, block.raws_of(rows))
                array = _put(array, rows, codec)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _put(array, rows, values):
    """`array` with its elements at `rows` replaced by `values`."""
    n = len(array)
    order = np.arange(n)
    order[rows] = n + np.arange(len(rows))
    return pa.concat_arrays([array, values]).take(pa.array(order))


def codec_column(name, type_, base_ms, raws):
    """A decoded column (not file, queue or offset) of these records, record by record
    with the codec."""
    decoded = decode_columns(raws, _FIELDS.get(name, ()), base_ms)
    if name == "status":
        return pa.array([STATUS_OF.get(s, s) for s in decoded["status"]], type_)
    if name in ("created", "expires", "settled"):
        return _timestamps(decoded[_FIELDS[name][0]], type_)
    if name == "consumer":
        return pa.array(decoded["settle_door"], type_)
    if name in ("id", "subject", "origin", "sender", "tracker"):
        return _texts(decoded[name], type_)
    if name in ("priority", "retry", "frame_count", "size", "settle_reason", "headers"):
        return pa.array(decoded[name], type_)
    if name == "body":
        return pa.array([b.decode("utf-8", "replace") for b in decoded["body"]], type_)
    if name == "body_bytes":
        return pa.array([f[0] if len(f) == 1 else b"".join(f) for f in decoded["frames"]], type_)
    if name == "frames":
        return pa.array(decoded["frames"], type_)
    if name == "variables":
        return pa.array([_variables(raw) for raw in raws], type_)
    if name == "checksum":
        return pa.array(list(map(journal.checksum_state, raws)), type_)
    raise AssertionError(name)


def _timestamps(ms, type_):
    return pa.array(ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(type_)


def _texts(values, type_):
    """Text that may hold lone surrogates (bytes that were not UTF-8) shows U+FFFD."""
    try:
        return pa.array(values, type_)
    except (UnicodeEncodeError, pa.ArrowInvalid):
        return pa.array([v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                         for v in values], type_)


def _variables(raw):
    out = {}
    for v in reversed(Record(0, raw).variables):
        name = v.name
        text = v.text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        if name is None:
            out[text] = None
        else:
            out[name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")] = (
                text.partition("=")[2].rstrip(" "))
    return list(out.items())
