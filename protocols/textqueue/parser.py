"""The incremental TextQueue reader: bytes in any chunking, records out.

A record ends where a line starts with anything but a space (continuation) or a
backslash (variable), so the parser hands a record out as soon as the first byte of
the following line arrives, and never before: the record at the end of the input stays
`incomplete()` however it ends, because a writer may still be appending continuation or
variable lines to it. Blank lines end the record before them and are otherwise ignored.

Nothing in the input makes it raise. Continuation or variable lines with no record
before them are reported as `Damage(offset, ORPHAN)`; a record that grows past
`max_record` bytes as `Damage(offset, TOO_LONG)`, and its bytes are dropped as they
arrive, so memory stays within `max_record` plus the chunk being fed. Either way the
parser skips to the next line that starts a record.

This is the simple path the bulk `scan` is held equal to (tests/textqueue).
"""
from mqksbridge.protocols.textqueue.records import (
    DEFAULT_MAX_RECORD, ORPHAN, TOO_LONG, Damage, Incomplete, Reason, Record,
    TextQueueError)

_SPACE, _BACKSLASH, _LF = 0x20, 0x5C, 0x0A


class Parser:
    """Feed bytes with `feed(data)`; it returns the records and damage they completed,
    in file order. `incomplete()` is the record still in progress (or None); `offset`
    is the byte offset just after the last byte fed."""

    def __init__(self, offset=0, max_record=DEFAULT_MAX_RECORD):
        if max_record < 2:
            raise TextQueueError(Reason.ARGUMENT, "max_record must be at least 2 bytes")
        self.max_record = max_record
        self.offset = offset          # absolute offset of the next byte to come
        self._start = None            # offset of the record in progress, None if none
        self._lines = []              # its complete lines, newlines removed
        self._line = bytearray()      # its current line so far
        self._line_begins = True      # the next byte is the first of a line
        self._skipping = False        # inside an orphan run or an over-long record

    def feed(self, data) -> list:
        out = []
        pieces = data.split(b"\n")             # one split per chunk
        last = len(pieces) - 1
        offset = self.offset
        for index, piece in enumerate(pieces):
            ended = index < last                # a LF follows the piece
            if not ended and not piece:
                break
            if self._line_begins:
                if not piece:                   # a blank line
                    self._finish(out)
                    self._skipping = False
                    offset += 1
                    continue
                self._line_begins = False
                first = piece[0]
                if first == _SPACE or first == _BACKSLASH:
                    if self._start is None and not self._skipping:
                        out.append(Damage(offset, ORPHAN))
                        self._skipping = True
                else:
                    self._finish(out)
                    self._skipping = False
                    self._start = offset
            size = len(piece) + ended
            if self._start is not None:
                if offset + size - self._start > self.max_record:
                    out.append(Damage(self._start, TOO_LONG))
                    self._drop()
                    self._skipping = True
                elif not ended:
                    self._line += piece
                else:
                    if self._line:
                        piece = bytes(self._line) + piece
                        self._line.clear()
                    if piece == b"\r" and not self._lines:
                        self._start = None      # a blank line ending in CRLF
                    else:
                        self._lines.append(piece)
            offset += size
            if ended:
                self._line_begins = True
        self.offset = offset
        return out

    def incomplete(self):
        """The record in progress at the end of what was fed, or None."""
        if self._start is None:
            return None
        data = b"".join([line + b"\n" for line in self._lines]) + bytes(self._line)
        return Incomplete(self._start, data)

    def _finish(self, out):
        if self._start is not None:
            out.append(Record(self._start, b"\n".join(self._lines)))
            self._drop()

    def _drop(self):
        self._start = None
        self._lines = []
        self._line.clear()
