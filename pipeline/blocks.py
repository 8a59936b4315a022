"""A block of records as one buffer and two arrays: where each record starts and ends.

`split(buffer, offset)` finds the records of a buffer with a few numpy passes over
all its bytes instead of one Python object per record: a record starts after each
newline followed by a byte that is not a space or a backslash. It gives exactly what
`textqueue.scan` gives (held equal by a hypothesis property in
tests/pipeline/test_bulk.py); a buffer that is not all plain records (a blank line, a
CR after a newline, an orphan line at its start, an over-long record) is handed to
`scan` itself, whose damage the pipeline skips.

The records stay in the buffer: the bulk decoder (pipeline/bulk.py) works on the
buffer and the arrays, and `raws` slices out bytes only for the rows that need the
record-at-a-time codec.
"""
import numpy as np

from mqksbridge.protocols.textqueue import DEFAULT_MAX_RECORD, Incomplete, scan

_NL, _SPACE, _BACKSLASH, _CR = 10, 32, 92, 13
_SPECIAL = frozenset(b" \\\n\r")
_EMPTY = np.zeros(0, np.int64)


class Block:
    """Records of `buffer` (file offset `offset`): record i is
    `buffer[starts[i]:ends[i]]`, without the newline that ends it. `newlines` (the
    positions of every LF in the buffer) is kept when known, for the decoder."""

    __slots__ = ("buffer", "offset", "starts", "ends", "newlines", "_raws")

    def __init__(self, buffer, offset, starts, ends, newlines=None):
        self.buffer = buffer
        self.offset = offset
        self.starts = starts
        self.ends = ends
        self.newlines = newlines
        self._raws = None

    @classmethod
    def of_records(cls, buffer, offset, offsets, raws):
        """The Block of records given as file offsets and raw bytes (slices of `buffer`)."""
        starts = np.fromiter(offsets, np.int64, len(offsets)) - offset
        lengths = np.fromiter(map(len, raws), np.int64, len(raws))
        return cls(buffer, offset, starts, starts + lengths)

    def __len__(self):
        return len(self.starts)

    @property
    def offsets(self):
        """File offsets of the records (int64 array)."""
        return self.starts + self.offset

    @property
    def raws(self) -> list:
        """Every record's bytes (one Python object per record: the slow path)."""
        if self._raws is None:
            self._raws = self.raws_of(None)
        return self._raws

    def raws_of(self, rows) -> list:
        """The bytes of the records at indices `rows` (all when None)."""
        buffer = self.buffer
        starts, ends = (self.starts, self.ends) if rows is None else (self.starts[rows], self.ends[rows])
        return [buffer[s:e] for s, e in zip(starts.tolist(), ends.tolist())]

    @property
    def controls(self) -> bytes:
        """The first byte of each record."""
        return np.frombuffer(self.buffer, np.uint8)[self.starts].tobytes() if len(self) else b""

    def take(self, rows):
        """The block of the records at `rows` (indices or a boolean mask)."""
        return Block(self.buffer, self.offset, self.starts[rows], self.ends[rows], self.newlines)


def split(buffer: bytes, offset=0, max_record=DEFAULT_MAX_RECORD):
    """(Block of the whole records, Incomplete or None): what `scan(buffer, offset)`
    gives as offsets, raws and incomplete (damage is left out)."""
    size = len(buffer)
    if not size:
        return Block(buffer, offset, _EMPTY, _EMPTY, _EMPTY), None
    data = np.frombuffer(buffer, np.uint8)
    newlines = np.flatnonzero(data == _NL)
    inside = newlines[:-1] if len(newlines) and newlines[-1] == size - 1 else newlines
    follow = data[inside + 1]
    cuts = inside[(follow != _SPACE) & (follow != _BACKSLASH)]
    firsts = data[cuts + 1]
    starts = np.empty(len(cuts) + 1, np.int64)
    starts[0] = 0
    starts[1:] = cuts + 1
    ends = np.empty(len(cuts) + 1, np.int64)
    ends[:-1] = cuts
    ends[-1] = size
    lengths = ends - starts
    if (buffer[0] in _SPECIAL or (firsts == _NL).any() or (firsts == _CR).any()
            or lengths[:-1].max(initial=0) >= max_record or lengths[-1] > max_record):
        return _scanned(buffer, offset, max_record)
    tail = Incomplete(offset + int(starts[-1]), buffer[starts[-1]:])
    return Block(buffer, offset, starts[:-1], ends[:-1], newlines), tail


def _scanned(buffer, offset, max_record):
    result = scan(buffer, offset, max_record)
    return Block.of_records(buffer, offset, result.offsets, result.raws), result.incomplete
