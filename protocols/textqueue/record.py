"""The journal record's definition: its variables, how values are escaped and decoded,
and its checksum. specs/textqueue.md, section 5, is what this module implements.

Every encoder and decoder of journal records takes its knowledge of the record from here:
the plain path (journal.py: encode_message, decode, decode_fields) and its named fast
paths in this package (journal.encode_plain and encode_batch, columns.decode_columns,
queued.scan_queued and decode_fresh, arrow_columns.Fields). A new variable goes into
VARIABLES and the plain path; each fast path either reads it or leaves records that hold
it to the plain path, and tests/textqueue/test_textqueue_fast_paths.py holds every fast
path equal to the plain one.
"""
import binascii
import re
import urllib.parse
import zlib
from operator import methodcaller
from typing import NamedTuple, Optional

from mqksbridge.protocols.textqueue.records import Reason, TextQueueError

LAYOUT = 1
RETRY_WIDTH = 3
SETTLE_WIDTH = 8
RETRY_MAX = 10 ** RETRY_WIDTH - 1
CHECKSUM_WIDTH = 6


class VariableDef(NamedTuple):
    """One variable of the record: its `name`, and for text values the bytes they
    percent-encode beyond the usual ones (None: not escaped text)."""
    name: bytes
    escapes: Optional[bytes] = None


# The variables in the order encode_message writes them: the immutable ones (optional
# from `ttl` on), then the mutable retry counter and settle field, then the checksum.
VARIABLES = (
    VariableDef(b"i", b""),             # id
    VariableDef(b"s", b""),             # subject
    VariableDef(b"f", b":"),            # origin ':' sender
    VariableDef(b"t"),                  # created, ms after the segment's base
    VariableDef(b"ttl"),                # expires, ms after created
    VariableDef(b"priority"),           # 1 when set
    VariableDef(b"tracker", b""),       # Malamute's tracker
    VariableDef(b"headers", b"&="),     # key=value&key=value
    VariableDef(b"enc"),                # base64 when the body is not text
    VariableDef(b"frames"),             # frame count when not one
    VariableDef(b"moved"),              # segment.offset of a compaction copy's original
    VariableDef(b"r"),                  # retry counter (mutable)
    VariableDef(b"e"),                  # settle stamp (mutable)
    VariableDef(b"c"),                  # checksum
)
NAMES = tuple(v.name for v in VARIABLES)
OPTIONAL = NAMES[NAMES.index(b"ttl"):NAMES.index(b"r")]
# The envelope fields decode gives (decode_fields takes any of them by name).
FIELDS = ("status", "id", "subject", "frames", "headers", "sender", "origin", "tracker",
          "priority", "created_at", "expires_at", "retry", "settled", "body")

STATUSES = {"-": "queued", "=": "done", "!": "error", "#": "comment"}
# Settle codes: (reason, control character the record gets).
SETTLE_CODES = {
    "a": ("acked", "="),
    "d": ("dead-lettered", "!"),
    "x": ("expired", "!"),
    "r": ("removed", "!"),
    "m": ("moved", "#"),
    "n": ("nacked", "!"),
}
CODE_OF = {reason: (code, control) for code, (reason, control) in SETTLE_CODES.items()}
# The door of the consumer that settled a record, one capital letter after the settle
# code (`\\e=aT350`: acked by a Twino consumer 350 ms after it was published).
DOOR_LETTERS = {"K": "mqks", "M": "malamute", "T": "twino", "Q": "textqueue"}
LETTER_OF = {door: letter.encode() for letter, door in DOOR_LETTERS.items()}

# Bytes a variable value never holds literally: controls, space (trailing spaces are
# padding), '%', DEL and everything outside ASCII.
_ESCAPED = bytes(range(0x21)) + b"%\x7f" + bytes(range(0x80, 0x100))
_ESCAPE_SETS = {extra: (_ESCAPED + extra, re.compile(b"[%s]" % re.escape(_ESCAPED + extra)))
                for extra in {v.escapes for v in VARIABLES if v.escapes is not None}}
BASE64URL = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
split_eq = methodcaller("split", b"=", 1)
ascii_text = methodcaller("decode", "utf-8", "surrogateescape")    # values with no '%' in them


class Settle(NamedTuple):
    """How and when a record was settled: `reason` (a SETTLE_CODES reason, or the code
    itself when unknown), `at` (seconds since the epoch) and `door`, the door of the
    consumer that settled it (a DOOR_LETTERS name, the letter itself when unknown, or
    None when not recorded)."""
    reason: str
    at: float
    door: Optional[str] = None


# -- values ---------------------------------------------------------------------------------

def is_text(body: bytes) -> bool:
    """Whether a body can be stored as text: UTF-8 without NUL or CR (what every
    TextQueue reader, the reference one included, reads back unchanged)."""
    if b"\x00" in body or b"\r" in body:
        return False
    if body.isascii():
        return True
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def escape(text, extra=b""):
    """The value of `text` in a variable: its UTF-8 (surrogateescape: strings that stand
    for bytes) with the bytes of _ESCAPED and `extra` percent-encoded."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise TextQueueError(Reason.VALUE,
                             f"{text!r} holds a lone surrogate that stands for no byte") from None
    escaped, pattern = _ESCAPE_SETS[extra]
    if len(data.translate(None, escaped)) == len(data):
        return data
    return pattern.sub(lambda m: b"%%%02X" % m.group()[0], data)


def checksum(data):
    """The `\\c` value of a record's immutable part: its CRC-32, big-endian, in base64url."""
    return binascii.b2a_base64(zlib.crc32(data).to_bytes(4, "big"),
                               newline=False)[:CHECKSUM_WIDTH].translate(TO_URLSAFE)


# The base64url of every 12 bits: a CRC-32 is three of them (the last padded with four
# zero bits), so `fast_checksum` is three lookups where `checksum` makes four objects.
_PAIRS = [bytes((a, b)) for a in BASE64URL for b in BASE64URL]


def fast_checksum(data, crc32=zlib.crc32, pairs=_PAIRS):
    """`checksum(data)` by table (tests hold the two equal)."""
    c = crc32(data)
    return pairs[c >> 20] + pairs[(c >> 8) & 0xFFF] + pairs[(c & 0xFF) << 4]


def to_ms(seconds):
    """Seconds as the integer milliseconds the record stores."""
    return round(seconds * 1000)


def duration(ms, width=7):
    """A duration in `width` characters: ms, else seconds or hours (7: the settle
    field less its code; 6 when a door letter takes one)."""
    ms = max(ms, 0)
    if ms < 10 ** width:
        return b"%d" % ms
    if ms < 10 ** (width + 2):
        return b"%ds" % (ms // 1000)
    return b"%dh" % min(ms // 3_600_000, 10 ** (width - 1) - 1)


def settle_value(reason, settled_at, created_ms, door=None):
    """The settle stamp: the reason's code, the door letter, the time since created."""
    code = CODE_OF.get(reason)
    if code is None:
        raise TextQueueError(Reason.ARGUMENT, f"unknown settle reason {reason!r}")
    if door is None:
        return code[0].encode() + duration(to_ms(settled_at) - created_ms)
    letter = LETTER_OF.get(door)
    if letter is None:
        raise TextQueueError(Reason.ARGUMENT,
                             f"unknown door {door!r}; doors are {sorted(LETTER_OF)}")
    return code[0].encode() + letter + duration(to_ms(settled_at) - created_ms, 6)


def raw_of(record):
    """A record's raw bytes with CRLF line ends made LF (an editor may have changed them)."""
    raw = record if type(record) is bytes else record.raw
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n")
        if raw.endswith(b"\r"):
            raw = raw[:-1]
    return raw


def unescape(value):
    """The text of an escaped value (bytes beyond UTF-8 as surrogates)."""
    if b"%" in value:
        value = urllib.parse.unquote_to_bytes(value)
    return value.decode("utf-8", "surrogateescape")


def integer(value, name):
    """int(value), or the codec's error naming the variable."""
    try:
        return int(value)
    except ValueError:
        raise TextQueueError(Reason.FIELD, f"{name} is not an integer: {value!r}") from None


def control_size(raw):
    """Bytes of the record's control character (one UTF-8 character)."""
    lead = raw[0] if raw else 0
    return 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def split_variables(raw):
    """(head, {name: value}): the control and body lines, and the variables (the
    first of a name wins). A continuation line after a variable stays in the body,
    as the readers have it."""
    parts = raw.split(b"\n\\")
    head = parts[0]
    variables = parts[1:]
    if b"\n " in raw[len(head):]:
        head, variables = _regroup(head, variables)
    variables.reverse()
    try:
        return head, dict(map(split_eq, variables))
    except ValueError:                      # a variable without '='
        return head, dict(split_eq(v) for v in variables if b"=" in v)


def _regroup(head, variables):
    lines = [head]
    names = []
    for part in variables:
        first, *rest = part.split(b"\n")
        names.append(first)
        lines += rest
    return b"\n".join(lines), names


def control_and_body(head):
    """(control character, body as stored) of a record's head (split_variables)."""
    size = control_size(head)
    return head[:size].decode("utf-8", "surrogateescape"), head[size:]


def head_of(raw):
    """(control character, body as stored) of a record: a continuation line after a
    variable still belongs to the body, as the readers have it."""
    end = raw.find(b"\n\\")
    if end < 0:
        return control_and_body(raw)
    return control_and_body(split_variables(raw)[0] if b"\n " in raw[end:] else raw[:end])


def frames_of(body, enc, count):
    """The frames of a body as stored, given the `enc` and `frames` values (or None)."""
    if enc is None:
        return (body.replace(b"\n ", b"\n") if b"\n" in body else body,)
    if enc != b"base64":
        raise TextQueueError(Reason.FIELD, f"unknown body encoding {enc!r}")
    try:
        if count is None:
            return (binascii.a2b_base64(body, strict_mode=True),)
        count = integer(count, "frames")
        if count == 0 and not body:
            return ()
        parts = body.split(b" ")
        if len(parts) != count:
            raise TextQueueError(Reason.FIELD, f"{len(parts)} base64 frames where frames={count}")
        return tuple(binascii.a2b_base64(part, strict_mode=True) for part in parts)
    except binascii.Error as e:
        raise TextQueueError(Reason.FIELD, f"body is not base64: {e}") from None


def headers_of(value):
    """The headers dict of a `headers` value (None: no headers)."""
    if value is None:
        return None
    headers = {}
    for pair in value.split(b"&"):
        key, eq, val = pair.partition(b"=")
        if not eq:
            raise TextQueueError(Reason.FIELD, f"header without '=': {pair!r}")
        headers[unescape(key)] = unescape(val)
    return headers


def settle_of(value, created_ms):
    """The Settle of an `e` value (None: blank, not settled)."""
    value = value.rstrip(b" ") if value else b""
    if not value:
        return None
    code = value[:1].decode("ascii", "replace")
    after = value[1:]
    door = None
    if after[:1].isupper():
        letter = after[:1].decode()
        door = DOOR_LETTERS.get(letter, letter)
        after = after[1:]
    unit = 1
    if after[-1:] == b"s":
        after, unit = after[:-1], 1000
    elif after[-1:] == b"h":
        after, unit = after[:-1], 3_600_000
    reason = SETTLE_CODES.get(code, (code,))[0]
    return Settle(reason, (created_ms + integer(after, "settle time") * unit) / 1000, door)


def value_of(raw, name):
    """The value of the first variable `name` in raw bytes, by search: no parsing."""
    needle = b"\n\\" + name + b"="
    start = raw.find(needle)
    if start < 0:
        return None
    start += len(needle)
    end = raw.find(b"\n", start)
    return raw[start:] if end < 0 else raw[start:end]


