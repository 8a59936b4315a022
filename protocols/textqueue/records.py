"""What the TextQueue readers report: records, their variables, damage, the incomplete tail.

A `Record` is its byte offset and its raw bytes; everything else (control character,
body, variables, problems) is derived from the raw bytes by one function, on first use,
so both readers (the incremental `Parser` and the bulk `scan`) hand out the same objects
and a reader that only needs offsets or raw bytes pays nothing more. See
specs/textqueue.md for the format and for why each decision was taken.
"""
import enum
import re
from typing import NamedTuple

from mqksbridge.protocols.errors import ProtocolError

DEFAULT_MAX_RECORD = 128 << 20      # a 64 MiB message as base64 plus its variables fits

# Problem kinds: the record is still reported, the caller decides.
NUL = "nul"              # a NUL byte (text tools and the journal never write one)
UTF8 = "utf8"            # bytes that are not UTF-8 (the reference reader then fails the file)
CR = "cr"                # a carriage return that does not end a line (a line break to the reference)
ORDER = "order"          # a continuation line after a variable line (kept in the body)

# Damage kinds: bytes that form no record, skipped up to the next record start.
ORPHAN = "orphan"        # continuation or variable lines with no record before them
TOO_LONG = "too-long"    # a record longer than the reader's maximum record size

_SURROGATES = re.compile("[\udc80-\udcff]+")


class Reason(enum.Enum):
    """What the writer, an edit or the journal could not take (TextQueueError.code)."""
    ARGUMENT = "argument"    # a setting or name outside what the function takes
    VALUE = "value"          # a body, variable or text the format cannot hold
    FIT = "fit"              # an edit that does not fit the bytes it is to change
    FIELD = "field"          # a journal field that does not decode


class TextQueueError(ProtocolError):
    """The one error of this package (`code` a Reason): a value the writer, an edit or the
    journal cannot take, or journal fields that do not decode. The readers never raise it
    on input: they report damage and go on (specs/errors.md)."""


class Problem(NamedTuple):
    """Something in a record that other readers may trip over: kind and byte offset."""
    offset: int
    kind: str


class Damage(NamedTuple):
    """Bytes at `offset` that were skipped (kind ORPHAN or TOO_LONG)."""
    offset: int
    kind: str


class Variable(NamedTuple):
    """A `\\` line: `offset` of the backslash, `text` after it (line end removed,
    trailing spaces kept). By our convention `name=value`; trailing spaces are room
    reserved for a longer value, so `value` drops them and `width` counts them."""
    offset: int
    text: str

    @property
    def name(self):
        """The text before the first `=`, or None when there is no `=`."""
        name, eq, _ = self.text.partition("=")
        return name if eq else None

    @property
    def value(self):
        """The text after the first `=` without its trailing spaces, or None."""
        _, eq, value = self.text.partition("=")
        return value.rstrip(" ") if eq else None

    @property
    def value_offset(self):
        """Byte offset where the value starts (the whole text when there is no `=`)."""
        name, eq, _ = self.text.partition("=")
        return self.offset + 1 + (len(_utf8(name)) + 1 if eq else 0)

    @property
    def width(self):
        """Bytes an in-place rewrite of the value may use (reserved spaces included)."""
        return self.offset + 1 + len(_utf8(self.text)) - self.value_offset


class Record:
    """One record: `offset` of its control character and `raw`, its bytes up to but not
    including the newline that ends its last line. `end` is where the next line starts
    (offset + len(raw) + 1), or offset + len(raw) for a record whose last line has no
    newline yet (one taken from an `Incomplete`)."""

    __slots__ = ("offset", "raw", "end", "_parts")

    def __init__(self, offset, raw, end=None):
        self.offset = offset
        self.raw = raw
        self.end = offset + len(raw) + 1 if end is None else end
        self._parts = None

    def _parsed(self):
        parts = self._parts
        if parts is None:
            parts = self._parts = _parse(self.offset, self.raw, self.end > self.offset + len(self.raw))
        return parts

    @property
    def control(self) -> str:
        """The control character: `-` queued, `=` done, `!` error, `#` comment, or any
        other character (kept: the format reserves them for future use)."""
        return self._parsed()[0]

    @property
    def body_bytes(self) -> bytes:
        """The body as stored: continuation lines joined with `\\n`."""
        return self._parsed()[1]

    @property
    def body(self) -> str:
        """The body as text (bytes that are not UTF-8 become lone surrogates, the
        project's surrogateescape convention, and are listed in `problems`)."""
        return self._parsed()[1].decode("utf-8", "surrogateescape")

    @property
    def variables(self) -> tuple:
        """The record's `Variable`s in file order."""
        return self._parsed()[2]

    @property
    def problems(self) -> tuple:
        """`Problem`s found in the record, in file order."""
        return self._parsed()[3]

    def variable(self, name):
        """The first variable called `name`, or None."""
        for variable in self._parsed()[2]:
            if variable.name == name:
                return variable
        return None

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return self.offset == other.offset and self.end == other.end and self.raw == other.raw

    def __hash__(self):
        return hash((self.offset, self.end, self.raw))

    def __repr__(self):
        return f"Record(offset={self.offset}, raw={self.raw!r}, end={self.end})"


class Incomplete(NamedTuple):
    """The record in progress where the input ends: its `offset` and the bytes read so
    far. It may be whole (a writer that finished its last record) or torn; only the
    caller can tell (a checksum, a writer that closed the file, a grace time)."""
    offset: int
    data: bytes

    @property
    def terminated(self) -> bool:
        """Whether the bytes read so far end with a newline."""
        return self.data.endswith(b"\n")

    def record(self) -> Record:
        """The bytes read so far taken as a whole record."""
        data = self.data
        if data.endswith(b"\n"):
            return Record(self.offset, data[:-1])
        return Record(self.offset, data, self.offset + len(data))


def one_line_body(raw):
    """The body of the record `raw` (a record whose control character is ASCII) when it
    is one line not ended by a CR, else None: the inbox's hot path, which takes such a
    record's body without parsing it. Held equal to `Record.body_bytes` by tests."""
    if b"\n" in raw or raw[-1] == 13:
        return None
    return raw[1:]


def unpadded(raw):
    """The record `raw` with the room after each variable's value taken away (people
    reserve room with spaces; the journal's own variables never end in a space): same
    control, body and variable values. `raw` itself when it has no room."""
    if b" \n" not in raw and not raw.endswith(b" "):
        return raw
    return b"\n".join([line.rstrip(b" ") if line[:1] == b"\\" else line
                        for line in raw.split(b"\n")])


def _utf8(text):
    return text.encode("utf-8", "surrogateescape")


def _control_size(raw):
    """Bytes of the first character: one, or a whole UTF-8 sequence when it is valid."""
    lead = raw[0]
    if lead < 0xC2 or lead > 0xF4:
        return 1
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    try:
        raw[:size].decode("utf-8")
    except UnicodeDecodeError:
        return 1
    return size


def _parse(offset, raw, terminated):
    """(control, body bytes, variables, problems) of one record's raw bytes."""
    if raw.isascii() and b"\r" not in raw and b"\x00" not in raw:
        parsed = _parse_clean(offset, raw)
        if parsed is not None:
            return parsed
    return _parse_lines(offset, raw, terminated)


def _parse_lines(offset, raw, terminated):
    """The general case, line by line: CRLF, problems to report, any order of lines."""
    lines = raw.split(b"\n")
    last = len(lines) - 1
    body = []
    variables = []
    problems = []
    control = ""
    seen_variable = False
    position = offset
    for index, line in enumerate(lines):
        start = position
        position += len(line) + 1
        if line.endswith(b"\r") and (index < last or terminated):
            line = line[:-1]                        # CRLF ends the line like LF
        if index == 0:
            if not line:
                continue
            size = _control_size(line)
            control = line[:size].decode("utf-8", "surrogateescape")
            _check(line, start, problems)
            body.append(line[size:])
            continue
        _check(line, start, problems)
        if line[:1] == b"\\":
            seen_variable = True
            variables.append(Variable(start, line[1:].decode("utf-8", "surrogateescape")))
        else:
            if seen_variable:
                problems.append(Problem(start, ORDER))
            body.append(line[1:])
    return control, b"\n".join(body), tuple(variables), tuple(sorted(problems))


def _parse_clean(offset, raw):
    """_parse_lines for ASCII without CR or NUL (a journal record): nothing to report
    and one character per byte, so one split does. None when a continuation line
    follows a variable. Held equal to _parse_lines by tests/textqueue."""
    head, *rest = raw.split(b"\n\\")
    if not raw or b"\n " in raw[len(head):]:
        return None
    position = offset + len(head) + 1
    variables = []
    for text in rest:
        variables.append(Variable(position, text.decode("ascii")))
        position += len(text) + 2
    return head[:1].decode("ascii"), head[1:].replace(b"\n ", b"\n"), tuple(variables), ()


def _check(line, start, problems):
    """Problems of one line's content (its ending already removed)."""
    if b"\x00" in line:
        problems.extend(Problem(start + m.start(), NUL) for m in re.finditer(b"\x00", line))
    if b"\r" in line:
        problems.extend(Problem(start + m.start(), CR) for m in re.finditer(b"\r", line))
    if not line.isascii():
        text = line.decode("utf-8", "surrogateescape")
        for m in _SURROGATES.finditer(text):
            problems.append(Problem(start + len(_utf8(text[:m.start()])), UTF8))
