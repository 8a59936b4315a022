"""The bulk TextQueue reader: a whole buffer in one pass, and record starts for splitting.

`scan(buffer)` splits the buffer once with a compiled regular expression at every
newline followed by a byte that begins a record (anything but a space or a backslash),
so a record costs one slice made in C; offsets come from the slice lengths and the
control bytes from one `itemgetter` over those offsets. When no piece starts with a
blank line, an orphan line or a CR and none is over-long (journals never contain any),
that is the whole work; otherwise one Python pass sorts the pieces out. It reports
exactly what the incremental `Parser` reports for the same bytes fed in one go (held
equal by a hypothesis property in tests/textqueue).

`record_start` finds the first record start at or after an offset. A file cut into
byte ranges at record starts (the first range from 0, each next from
`record_start(cut)`) is read whole by scanning each range: a record is never lost or
read twice at a cut. Every range but the last ends where a record starts, so its
`incomplete` record is whole.
"""
import heapq
import re
from itertools import accumulate
from operator import attrgetter, itemgetter
from typing import NamedTuple, Optional

from mqksbridge.protocols.textqueue.records import (
    DEFAULT_MAX_RECORD, ORPHAN, TOO_LONG, Damage, Incomplete, Reason, Record,
    TextQueueError)

_SPLIT = re.compile(rb"\n(?=[^ \\])")
# A line start whose first byte begins a record: not a space, backslash or blank line
# (LF, or CRLF; a CR followed by anything else is an unknown control character).
_START = re.compile(rb"(?m)^(?=[^ \\\n\r]|\r[^\n])")
_SPECIAL = b" \\\n\r"
_PLUS_ONE = (1).__add__
_OFFSET = attrgetter("offset")


class Scan(NamedTuple):
    """A scanned buffer: the records as parallel lists (`offsets` of their control
    characters, `raws`: their bytes without the newline ending the last line,
    `controls`: their first bytes), the `damages`, and the `incomplete` record at the
    end of the buffer (None when the buffer ends outside any record)."""
    offsets: list
    raws: list
    controls: bytes
    damages: list
    incomplete: Optional[Incomplete]

    def records(self):
        """The records as `Record` objects (an iterator: a buffer may hold millions)."""
        return map(Record, self.offsets, self.raws)

    def items(self) -> list:
        """Records and damages in file order, as `Parser.feed` returns them."""
        return list(heapq.merge(self.records(), self.damages, key=_OFFSET))


def scan(buffer: bytes, offset=0, max_record=DEFAULT_MAX_RECORD) -> Scan:
    """Every record of `buffer`, whose first byte is at file offset `offset`. The end
    of the buffer is taken as the end of the input (see the module docstring)."""
    if max_record < 2:
        raise TextQueueError(Reason.ARGUMENT, "max_record must be at least 2 bytes")
    if not buffer:
        return Scan([], [], b"", [], None)
    pieces = _SPLIT.split(buffer)
    last = pieces.pop()
    lengths = list(map(len, pieces))
    starts = list(accumulate(map(_PLUS_ONE, lengths), initial=0))
    last_start = offset + starts.pop()
    if not pieces:
        offsets, raws, controls, damages = [], [], b"", []
    else:
        firsts = itemgetter(*starts)(buffer)
        controls = bytes(firsts) if len(starts) > 1 else bytes((firsts,))
        if (len(controls.translate(None, _SPECIAL)) == len(controls)
                and max(lengths) < max_record):
            offsets = list(map(offset.__add__, starts)) if offset else starts
            raws, damages = pieces, []
        else:
            offsets, raws, controls, damages = _sort_out(pieces, starts, offset, max_record)
    return Scan(offsets, raws, controls, damages, _tail(last, last_start, max_record, damages))


def _sort_out(pieces, starts, base, max_record):
    """Pieces that are not all records: blank lines, orphans, over-long records."""
    offsets, raws, controls, damages = [], [], bytearray(), []
    for piece, start in zip(pieces, starts):
        offset = base + start
        if not piece or piece == b"\r":
            continue                                    # a blank line
        first = piece[0]
        if first == 0x0A:                               # a blank line, then orphan lines
            damages.append(Damage(offset + 1, ORPHAN))
        elif piece.startswith(b"\r\n"):                 # the same with CRLF
            damages.append(Damage(offset + 2, ORPHAN))
        elif first == 0x20 or first == 0x5C:
            damages.append(Damage(offset, ORPHAN))
        elif len(piece) >= max_record:                  # its size counts its newline
            damages.append(Damage(offset, TOO_LONG))
        else:
            offsets.append(offset)
            raws.append(piece)
            controls.append(first)
    return offsets, raws, bytes(controls), damages


def _tail(last, offset, max_record, damages):
    """What the bytes after the last split are: a record in progress, or not."""
    if not last:
        return None
    skip = 1 if last[0] == 0x0A else 2 if last.startswith(b"\r\n") else 0
    if skip:
        if len(last) > skip:
            damages.append(Damage(offset + skip, ORPHAN))
        return None
    if last[0] == 0x20 or last[0] == 0x5C:
        damages.append(Damage(offset, ORPHAN))
        return None
    if len(last) > max_record:
        damages.append(Damage(offset, TOO_LONG))
        return None
    return Incomplete(offset, last)


def record_start(buffer: bytes, pos=0):
    """Index in `buffer` of the first record start at or after `pos`, or None when the
    buffer does not show one (a start needs the byte before it, unless it is at index
    0, and the byte after a CR)."""
    found = _START.search(buffer, pos)
    return None if found is None else found.start()


def record_start_in(file, offset, chunk=1 << 16) -> int:
    """File offset of the first record start at or after `offset` in a binary file
    opened for reading, or the file's size when there is none."""
    if chunk < 3:
        raise TextQueueError(Reason.ARGUMENT, "chunk must be at least 3 bytes")
    base = max(offset - 1, 0)           # keep the byte before `offset`: is it a line end?
    pos = offset - base
    file.seek(base)
    buffer = file.read(chunk)
    while True:
        found = record_start(buffer, pos)
        if found is not None:
            return base + found
        more = file.read(chunk)
        if not more:
            return file.seek(0, 2)
        base += len(buffer) - 2         # overlap two bytes: a line end and a CR
        buffer = buffer[-2:] + more
        pos = 1
