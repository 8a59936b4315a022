"""Records to Arrow record batches: only the declared columns, only the selected rows.

A block of records (offsets, raw bytes, control bytes: what `scan` gives) becomes one
`pyarrow.RecordBatch` whose schema is exactly the one Spark expects. Fields are decoded
by the codec (`columns.decode_columns`, one list per field for the whole block) and
turned into Arrow arrays by pyarrow; rows are selected first, by control byte for the
status and by created/settled time, so rows nobody wants are not decoded either.
"""
from dataclasses import dataclass, field
from itertools import compress
from typing import Optional

import pyarrow as pa

from mqksbridge.protocols.textqueue import Record, journal
from mqksbridge.protocols.textqueue.columns import decode_columns

STATUS_OF = {"-": "queued", "=": "done", "!": "error", "#": "comment"}
CONTROL_OF = {name: control for control, name in STATUS_OF.items()}
_STATUS_NAMES = pa.array(["queued", "done", "error", "comment"])
_STATUS_INDEX = bytes.maketrans(b"-=!#", bytes([0, 1, 2, 3]))
_KNOWN = b"-=!#"

# Fields of decode_columns each column needs.
_FIELDS = {"status": (), "id": ("id",), "subject": ("subject",), "origin": ("origin",),
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


@dataclass
class Selection:
    """Rows the reader keeps (the filters Spark pushed down, all of them ANDed):
    controls (None: any), and created/settled bounds."""
    controls: Optional[frozenset] = None        # control characters (str)
    created: Bounds = field(default_factory=Bounds)
    settled: Bounds = field(default_factory=Bounds)
    offsets: Bounds = field(default_factory=Bounds)


def select(block, selection: Selection, base_ms):
    """(offsets, raws, controls) of the block's records the selection keeps."""
    offsets, raws, controls = block.offsets, block.raws, block.controls
    wanted = selection.controls
    if wanted is not None:
        if controls.isascii():
            table = bytes(1 if chr(b) in wanted else 0 for b in range(256))
            keep = controls.translate(table)
        else:
            keep = [c in wanted for c in decode_columns(raws, ["status"])["status"]]
        offsets, raws = list(compress(offsets, keep)), list(compress(raws, keep))
        controls = bytes(compress(controls, keep))
    masks = []
    if not selection.offsets.empty():
        masks.append(selection.offsets.mask(offsets))
    if not selection.created.empty():
        masks.append(selection.created.mask(decode_columns(raws, ["created_ms"], base_ms)["created_ms"]))
    if not selection.settled.empty():
        masks.append(selection.settled.mask(decode_columns(raws, ["settled_ms"], base_ms)["settled_ms"]))
    for keep in masks:
        offsets, raws = list(compress(offsets, keep)), list(compress(raws, keep))
        controls = bytes(compress(controls, keep))
    return offsets, raws, controls


def record_batch(names, arrow_schema, path, queue, base_ms, offsets, raws, controls):
    """One RecordBatch of the named columns for these records."""
    fields = []
    for name in names:
        for f in _FIELDS.get(name, ()):
            if f not in fields:
                fields.append(f)
    decoded = decode_columns(raws, fields, base_ms) if fields else {}
    n = len(raws)
    arrays = []
    for name, spec in zip(names, arrow_schema):
        arrays.append(_array(name, spec.type, n, path, queue, offsets, raws, controls, decoded))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _timestamps(ms, type_):
    return pa.array(ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(type_)


def _array(name, type_, n, path, queue, offsets, raws, controls, decoded):
    if name == "file":
        return pa.repeat(pa.scalar(path, type_), n)
    if name == "queue":
        return pa.repeat(pa.scalar(queue, type_), n)
    if name == "offset":
        return pa.array(offsets, type_)
    if name == "status":
        return _statuses(raws, controls, type_)
    if name in ("created", "expires", "settled"):
        return _timestamps(decoded[_FIELDS[name][0]], type_)
    if name == "consumer":
        return pa.array(decoded["settle_door"], type_)
    if name in ("id", "subject", "origin", "sender", "tracker"):
        return _texts(decoded[name], type_)
    if name in ("priority", "retry", "frame_count", "size", "settle_reason"):
        return pa.array(decoded[name], type_)
    if name == "headers":
        return pa.array(decoded["headers"], type_)
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


def _statuses(raws, controls, type_):
    """Status names from the control bytes, in C; records with another control
    character show it."""
    n = len(controls)
    if len(controls.translate(None, _KNOWN)) == 0:
        indices = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(controls.translate(_STATUS_INDEX))])
        return pa.DictionaryArray.from_arrays(indices, _STATUS_NAMES).cast(type_)
    statuses = decode_columns(raws, ["status"])["status"]
    return pa.array([STATUS_OF.get(s, s) for s in statuses], type_)


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

