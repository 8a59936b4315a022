"""Line framing for MQKS: bytes from the socket in, complete request lines out.

MQKS requests are `\\n`-terminated lines.  The framer does one `split` per
chunk so that a chunk holding hundreds of small lines costs one C call, and it
keeps the unterminated tail for the next chunk.  The original server read
lines of any length; we cap them so one client cannot grow our memory without
bound (see specs/mqks.md, "Where we differ").
"""

from .errors import MqksProtocolError, Reason

DEFAULT_MAX_LINE = 1 << 20


def _too_long(lines):
    """A line (or an unterminated tail) is longer than `max_line` bytes. `done` holds the
    complete lines that came before it in this chunk, so the door can still serve them
    before it answers the error and closes. The framer must not be fed again after this."""
    return MqksProtocolError(Reason.LINE_TOO_LONG, 'MQKS line longer than the limit',
                             done=lines)


class LineFramer:
    """Split a byte stream into lines (without their `\\n`)."""

    __slots__ = ('max_line', '_parts', '_size')

    def __init__(self, max_line=DEFAULT_MAX_LINE):
        self.max_line = max_line
        self._parts = []  # pieces of the unterminated tail; a list avoids quadratic joins
        self._size = 0    # total length of those pieces

    def feed(self, chunk):
        """Return the list of lines completed by `chunk`; MqksProtocolError (LINE_TOO_LONG)
        for a line over the limit."""
        lines = chunk.split(b'\n')
        tail = lines.pop()
        parts = self._parts
        scanned = self._size + len(chunk)
        if lines:
            if parts:
                parts.append(lines[0])
                lines[0] = b''.join(parts)
                parts.clear()
            size = len(tail)
        else:
            size = self._size + len(tail)
        if tail:
            parts.append(tail)
        self._size = size
        if scanned > self.max_line:  # only then can any line be over the limit
            self._check(lines, size)
        return lines

    def _check(self, lines, tail_size):
        limit = self.max_line
        if lines and max(map(len, lines)) > limit:
            for i, line in enumerate(lines):
                if len(line) > limit:
                    raise _too_long(lines[:i])
        if tail_size > limit:
            raise _too_long(lines)
