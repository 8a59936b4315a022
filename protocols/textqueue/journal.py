"""Our journal record layout: one message envelope as one TextQueue record.

The broker's durable queues append these records, the TextQueue door can write them,
and the data pipeline reads them back. A segment file starts with a header comment
record (queue, segment number, creation time: the time base of its records), then:

    -hello world, twenty!         body: UTF-8 text, or base64 with \\enc=base64
    \\i=6f1c2a9be03d4471           id
    \\s=order.new                  subject
    \\f=mqks:127.0.0.1:51012.7     origin door ':' sender
    \\t=3200                       created, ms after the segment's \\created
    \\r=0                          retry counter, 3 bytes reserved   } mutable, rewritten
    \\e=                           settle code + ms after created    } in place
    \\c=eWR2mg                     checksum of everything between the control
                                   character and \\r= (CRC-32, base64url)

Optional variables sit between \\t and \\r: ttl, priority, tracker, headers, enc,
frames, moved. Variables hold ASCII only (percent-encoded UTF-8). specs/textqueue.md
defines every variable, the checksum and the edits. record.py holds the definition (the
variables, escaping, value codecs, checksum); this module is the plain path over it
(encode_message, decode, decode_fields), the segment header, the in-place edits, and
the broker's encoders (encode_plain, encode_batch), fast paths held equal to
encode_message by tests/textqueue/test_textqueue_fast_paths.py.

Names and widths are chosen for a size budget of 1.5 x body + 100 bytes: a typical message
(20-byte body, 16-char id, 10-char subject, 25-char sender) costs 127 bytes.
Decoding works on a record's raw bytes (a `Record` or the `raws` of a `Scan`), so the
pipeline can decode just the columns it needs (`decode_fields`) without parsing the
record into objects.
"""
import binascii
import functools
import re
import struct
import zlib
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter, itemgetter, methodcaller, sub
from typing import NamedTuple, Optional

from mqksbridge.protocols.textqueue.record import DOOR_LETTERS, SETTLE_CODES  # noqa: F401 (API)
from mqksbridge.protocols.textqueue.record import (
    CODE_OF, FIELDS, LAYOUT, LETTER_OF, OPTIONAL, RETRY_MAX, RETRY_WIDTH,
    SETTLE_WIDTH, STATUSES, TO_URLSAFE, Settle, ascii_text, checksum,
    control_and_body, control_size, duration, escape, fast_checksum, frames_of, head_of,
    headers_of, integer, is_text, raw_of, settle_of, settle_value, split_eq,
    split_variables, to_ms, unescape, value_of)
from mqksbridge.protocols.textqueue.records import Reason, Record, TextQueueError
from mqksbridge.protocols.textqueue.writer import Edit

_TAIL = 7 + 4 + SETTLE_WIDTH + 10      # \r=NNN\n \e=........\n \c=cccccc\n


class Header(NamedTuple):
    """A segment's header record."""
    queue: str
    segment: int
    created_ms: int
    layout: int


class Places(NamedTuple):
    """File offsets an in-place edit of one record needs."""
    status: int
    retry: int
    retry_width: int
    settle: int
    settle_width: int


@dataclass(slots=True)
class Envelope:
    """A message as the journal stores it (the core Message's fields, plus the
    record's mutable state). `encode_message` takes any object with the message
    attributes, so a core Message goes in as it is."""
    id: str = ""
    subject: str = ""
    frames: tuple = (b"",)
    headers: Optional[dict] = None
    sender: str = ""
    origin: str = ""
    tracker: str = ""
    priority: bool = False
    created_at: float = 0.0
    expires_at: Optional[float] = None
    status: str = "-"
    retry: int = 0
    settled: Optional[Settle] = None


# -- encoding ------------------------------------------------------------------------------

def _b64(data):
    return binascii.b2a_base64(data, newline=False)


@functools.lru_cache(maxsize=4096)
def _sender_lines(subject, origin, sender):
    """The `s` and `f` lines of (subject, origin, sender), kept for the next message
    with the same ones (they repeat: a queue sees few subjects and senders)."""
    lines = b""
    if subject:
        lines += b"\\s=" + escape(subject) + b"\n"
    if origin or sender:
        lines += b"\\f=" + escape(origin, b":") + b":" + escape(sender) + b"\n"
    return lines


def encode_message(message, *, base_ms=0, status="-", retry=0, settled=None,
                   moved=None) -> bytes:
    """One journal record for `message` (a core Message, an Envelope, or anything with
    their attributes). `base_ms` is the segment's `created` (0: absolute times);
    `status`, `retry` and `settled` (a Settle) are the mutable state to start with.
    `moved`, a (segment, offset) pair, marks a copy that compaction carried forward from
    that place (see `moved_from`)."""
    if status not in STATUSES:
        raise TextQueueError(Reason.ARGUMENT, f"not a journal status: {status!r}")
    fixed = encode_fields(message, base_ms, moved)
    settle = b"" if settled is None else settle_value(settled.reason, settled.at,
                                                       to_ms(message.created_at), settled.door)
    return b"%s%s\\r=%-3d\n\\e=%-8s\n\\c=%s\n" % (
        status.encode(), fixed, min(max(retry, 0), RETRY_MAX), settle, checksum(fixed))


# The fresh record's tail before its checksum: retry 0, an empty settle field.
_FRESH_TAIL = b"\\r=0  \n\\e=        \n\\c="


def encode_plain(message, base_ms=0) -> Optional[bytes]:
    """`encode_message(message, base_ms=base_ms)` in one format for the message a
    broker journals most (one ASCII text frame, an ASCII id that needs no escape, no
    ttl, priority, tracker or headers); None for any other (take encode_message). The
    put of every durable message runs this, so it makes no lists, calls no helpers it
    can avoid and reuses the subject and sender lines; a property test holds it equal."""
    frames = message.frames
    if (len(frames) != 1 or message.expires_at is not None or message.priority
            or message.tracker or message.headers):
        return None
    body = frames[0]
    if not body.isascii() or b"\r" in body or b"\x00" in body:
        return None
    if b"\n" in body:
        body = body.replace(b"\n", b"\n ")
    ident = message.id          # printable ASCII but space and '%': what escape keeps
    if (not ident or not ident.isascii() or not ident.isprintable() or " " in ident
            or "%" in ident):
        return None
    ident = ident.encode()
    lines = _sender_lines(message.subject, message.origin, message.sender)
    fixed = b"%s\n\\i=%s\n%s\\t=%d\n" % (body, ident, lines,
                                             round(message.created_at * 1000) - base_ms)
    return b"-%s%s%s\n" % (fixed, _FRESH_TAIL, fast_checksum(fixed))


def encode_batch(messages, base_ms=0, retries=None, settled=(), runs=()) -> tuple:
    """(data, sizes): the records of `messages` one after the other, and the size of each.
    Record i is `encode_message(messages[i], base_ms=base_ms, retry=retries[i])` (retries
    None: all 0), written settled (the reason's control character and stamp, as
    settle_fresh makes them) when i is in `settled`: the indexes of the messages settled
    already, in the order they were, and `runs`, how (settle_runs: run-length coded, as
    a broker settles a turn's messages alike). The broker encodes each batch's records
    in one call: for plain messages (encode_plain's case, retry 0, settled with one
    reason and door) every step is a C-level pass over the batch, with the lines and
    stamps of repeated senders and times (messages of one turn) made once; any other
    batch takes the per-message encoders. Property tests hold it equal to
    encode_message and settle_edits."""
    if not messages:
        return b"", []
    if retries is None or not any(retries):
        fixed = _plain_fixed(messages, base_ms)
        if fixed is not None:
            found = _bulk_records(messages, fixed, settled, runs)
            if found is not None:
                return found
    records = _each_record(messages, base_ms, retries, settles_of(settled, runs))
    return b"".join(records), list(map(len, records))


def settle_runs(settles) -> tuple:
    """(settled, runs) for encode_batch from (index, reason, settled_at, door) tuples in
    the order settled: a run (start, reason, settled_at, door) says how settled[start:]
    were settled, up to the next run."""
    settled, runs = [], []
    for index, reason, at, door in settles:
        if not runs or runs[-1][1:] != (reason, at, door):
            runs.append((len(settled), reason, at, door))
        settled.append(index)
    return settled, runs


def settles_of(settled, runs) -> list:
    """The (index, reason, settled_at, door) tuples of encode_batch's `settled` and `runs`."""
    found = []
    for k, (start, reason, at, door) in enumerate(runs):
        end = runs[k + 1][0] if k + 1 < len(runs) else len(settled)
        found += [(index, reason, at, door) for index in settled[start:end]]
    return found


_FIXED_NUL = b"%s\n\\i=%s\n%s\x00"
_RECORD = b"%s%s%s%s\n".__mod__
_FRESH_RECORD = b"-%s" + _FRESH_TAIL + b"%s\n"
_FRAMES = attrgetter("frames")
_ID = attrgetter("id")
_KEY = attrgetter("subject", "origin", "sender", "created_at")
_CREATED = attrgetter("created_at")
_EXTRAS = attrgetter("expires_at", "priority", "tracker", "headers")
# what plain messages hold there (any falsy tracker, headers and priority, no expiry)
_PLAIN_EXTRAS = frozenset((None, priority, tracker, headers) for priority in (False, 0, None)
                          for tracker in ("", None) for headers in (None,))
_NO_ID = ("", "\n")
_FIRST = itemgetter(0)
_RUN_KIND = itemgetter(1, 3)
_RUN_AT = itemgetter(2)
_NEWLINE = methodcaller("replace", b"\n", b"\n ")
_TAIL_SIZE = len(_FRESH_TAIL) + 8        # + the checksum, the LF and the control character


class _Lines(dict):
    """(subject, origin, sender, created_at) -> their `s`, `f` and `t` lines on one time
    base (made on first use: a turn's messages share them)."""

    __slots__ = ("base",)

    def __missing__(self, key):
        line = self[key] = (_sender_lines(*key[:3])
                            + b"\\t=%d\n" % (round(key[3] * 1000) - self.base))
        return line


class _Tails(dict):
    """(created_at, settled_at) -> the settled tail of one settle kind, or None when the
    time does not fit the fast stamp (made on first use)."""

    __slots__ = ("prefix", "limit", "pattern")

    def __missing__(self, key):
        ms = round(key[1] * 1000) - round(key[0] * 1000)
        tail = self[key] = (self.pattern % ms) if 0 <= ms < self.limit else None
        return tail


def _plain_fixed(messages, base_ms):
    """The fixed parts of a batch of plain messages (encode_plain's case), in C-level
    passes: one format for the whole batch, split at NULs (no plain body or id holds
    one); None when any message is not plain."""
    n = len(messages)
    frames = list(map(_FRAMES, messages))
    try:
        extras = set(map(_EXTRAS, messages))
    except TypeError:                       # headers (a dict)
        return None
    if set(map(len, frames)) != {1} or not _PLAIN_EXTRAS.issuperset(extras):
        return None
    bodies = list(map(_FIRST, frames))
    joined = b"".join(bodies)
    if not joined.isascii() or b"\r" in joined or b"\x00" in joined:
        return None
    if b"\n" in joined:
        bodies = map(_NEWLINE, bodies)
    text = "\n".join(map(_ID, messages))
    if (not text.isascii() or text.count("\n") != n - 1 or "\n\n" in text
            or text[:1] in _NO_ID or text[-1:] in _NO_ID    # an empty id
            or not text.replace("\n", "").isprintable() or " " in text or "%" in text):
        return None
    lines = _Lines()
    lines.base = base_ms
    return ((_FIXED_NUL * n)[:-1] % tuple(chain.from_iterable(zip(
        bodies, text.encode().split(b"\n"), map(lines.__getitem__, map(_KEY, messages))
    )))).split(b"\x00")


def _bulk_records(messages, fixed, settled, runs):
    """(data, sizes) of fixed parts: checksums in one pack, one base64 pass and one
    unpack, the records in one format; None when the settles are not of one kind with
    times that fit (the per-message path then)."""
    n = len(fixed)
    # each CRC as 4 bytes and 2 zero bytes: 8 base64 characters, the first 6 its checksum
    sums = struct.unpack("6s2x" * n, binascii.b2a_base64(
        struct.pack(">" + "I2x" * n, *map(zlib.crc32, fixed)),
        newline=False).translate(TO_URLSAFE))
    sizes = list(map(_TAIL_SIZE.__add__, map(len, fixed)))
    if not settled:
        return (_FRESH_RECORD * n) % tuple(chain.from_iterable(zip(fixed, sums))), sizes
    kinds = set(map(_RUN_KIND, runs))
    known = _FRESH_STAMPS.get(kinds.pop()) if len(kinds) == 1 else None
    if known is None:
        return None
    control, prefix, width, limit = known
    tails = _Tails()
    tails.limit = limit
    tails.pattern = b"\\r=0  \n\\e=" + prefix + b"%-" + b"%d" % width + b"d\n\\c="
    created = list(map(_CREATED, messages))
    if len(runs) == 1:
        ats = repeat(runs[0][2])
    else:
        ats = list(map(_RUN_AT, runs))
        ats = chain.from_iterable(map(repeat, ats, map(sub, [*map(_FIRST, runs[1:]), len(settled)],
                                                       map(_FIRST, runs))))
    if len(settled) == n and settled == list(range(n)):    # all settled, in order
        if len(runs) == 1 and len(set(created)) == 1:        # one turn: one stamp
            tail = tails[created[0], runs[0][2]]
            if tail is None:
                return None
            record = control + b"%s" + tail.replace(b"%", b"%%") + b"%s\n"
            return (record * n) % tuple(chain.from_iterable(zip(fixed, sums))), sizes
        stamped = list(map(tails.__getitem__, zip(created, ats)))
        statuses = repeat(control, n)
    else:
        stamped = list(map(tails.__getitem__, zip(map(created.__getitem__, settled), ats)))
        statuses = [b"-"] * n
        ends = [_FRESH_TAIL] * n
        for i, tail in zip(settled, stamped):
            statuses[i] = control
            ends[i] = tail
        stamped = ends
    if None in stamped:
        return None
    return b"".join(map(_RECORD, zip(statuses, fixed, stamped, sums))), sizes


def _each_record(messages, base_ms, retries, settles):
    """The records of encode_batch, one message at a time (encode_plain where it can,
    then settle_fresh)."""
    settled = {i: (reason, at, door) for i, reason, at, door in settles}
    records = []
    for i, message in enumerate(messages):
        retry = retries[i] if retries is not None else 0
        record = encode_plain(message, base_ms) if not retry else None
        if record is None:
            record = encode_message(message, base_ms=base_ms, retry=retry)
        settle = settled.get(i)
        if settle is not None:
            record = settle_fresh(record, settle[0], settle[1], message.created_at, settle[2])
        records.append(record)
    return records


def encode_fields(message, base_ms=0, moved=None) -> bytes:
    """The immutable part of a journal record: the body after the control character and
    the variables `i` to `frames`, each line ending in LF. Other writers of message
    records (the TextQueue door's outbox) add their own control character and tail."""
    frames = message.frames
    if len(frames) == 1 and is_text(frames[0]):
        body = frames[0].replace(b"\n", b"\n ")
        coding = b""
    elif len(frames) == 1:
        body = _b64(frames[0])
        coding = b"\\enc=base64\n"
    else:
        body = b" ".join(map(_b64, frames))
        coding = b"\\enc=base64\n\\frames=%d\n" % len(frames)
    out = [body, b"\n"]
    if message.id:
        out += (b"\\i=", escape(message.id), b"\n")
    lines = _sender_lines(message.subject, message.origin, message.sender)
    out.append(lines)
    created = to_ms(message.created_at)
    out.append(b"\\t=%d\n" % (created - base_ms))
    if message.expires_at is not None:
        out.append(b"\\ttl=%d\n" % (to_ms(message.expires_at) - created))
    if message.priority:
        out.append(b"\\priority=1\n")
    if message.tracker:
        out += (b"\\tracker=", escape(message.tracker), b"\n")
    if message.headers:
        out += (b"\\headers=", b"&".join([escape(k, b"&=") + b"=" + escape(v, b"&=")
                                          for k, v in message.headers.items()]), b"\n")
    out.append(coding)
    if moved is not None:
        out.append(b"\\moved=%d.%d\n" % moved)
    return b"".join(out)


def encode_header(queue: str, segment: int, created_ms: int) -> bytes:
    """The header record that starts each segment file; `created_ms` is the time base
    of the segment's `t` variables."""
    return (b"#mqksbridge journal segment: one record per message, - queued, = acked,"
            b" ! dead-lettered, expired or removed.\n"
            b" Times in ms: \\t= after \\created= below; \\e= is a settle code and ms after \\t=."
            b" See specs/textqueue.md.\n"
            b"\\queue=%s\n\\segment=%d\n\\created=%d\n\\layout=%d\n"
            % (escape(queue), segment, created_ms, LAYOUT))


# -- decoding ------------------------------------------------------------------------------

# The layout encode_message writes, matched whole: a journal record decodes from one
# C-level match instead of a split and a dict. Anything else (hand edits, other variables,
# another order) takes the general path; tests hold the two equal.
_LAYOUT = re.compile(
    rb"([-=!#])([^\n]*(?:\n [^\n]*)*)"
    rb"(?:\n\\i=([^\n]*))?(?:\n\\s=([^\n]*))?(?:\n\\f=([^\n]*))?\n\\t=([^\n]*)"
    rb"((?:\n\\(?:%s)=[^\n]*)*)" % b"|".join(OPTIONAL) +
    rb"\n\\r=([^\n]*)\n\\e=([^\n]*)\n\\c=[^\n]*")
_NO_VARIABLES = {}.get


def decode(record, base_ms=0) -> Envelope:
    """The envelope of a journal record (a `Record` or raw bytes); `base_ms` is the
    segment header's `created_ms`. Missing variables take their defaults; values that
    do not decode raise TextQueueError."""
    raw = raw_of(record)
    match = _LAYOUT.fullmatch(raw)
    if match is None:
        return _decode_any(raw, base_ms)
    status, body, i, s, f, t, optional, r, e = match.groups()
    get = _NO_VARIABLES
    if optional:
        names = optional.split(b"\n\\")[1:]
        names.reverse()
        get = dict(map(split_eq, names)).get
    return _envelope(raw.find(b"%", 1 + len(body)) >= 0, status.decode(), body,
                     i, s, f, t, get, r, e, base_ms)


def _decode_any(raw, base_ms):
    """decode for any record: variables in any order, unknown ones, hand edits."""
    head, v = split_variables(raw)
    status, body = control_and_body(head)
    get = v.get
    return _envelope(raw.find(b"%", len(head)) >= 0, status, body,
                     get(b"i"), get(b"s"), get(b"f"), get(b"t"), get, get(b"r"), get(b"e"), base_ms)


def _envelope(pct, status, body, i, s, f, t, get, r, e, base_ms):
    """The Envelope of located values (None: absent); `get` finds the optional ones."""
    text = unescape if pct else ascii_text
    created = base_ms + integer(t, "t") if t is not None else 0
    origin, _, sender = f.partition(b":") if f is not None else (b"", b"", b"")
    ttl = get(b"ttl")
    tracker = get(b"tracker")
    headers = get(b"headers")
    retry = r.rstrip(b" ") if r is not None else b""
    return Envelope(
        "" if i is None else text(i), "" if s is None else text(s),
        frames_of(body, get(b"enc"), get(b"frames")),
        None if headers is None else headers_of(headers),
        text(sender), text(origin), "" if tracker is None else text(tracker),
        get(b"priority") == b"1", created / 1000,
        None if ttl is None else (created + integer(ttl, "ttl")) / 1000,
        status, integer(retry, "r") if retry else 0,
        None if e is None else settle_of(e, created))


def _field_readers():
    def origin_sender(raw, index):
        value = value_of(raw, b"f")
        return "" if value is None else unescape(value.partition(b":")[index])

    def text(name):
        return lambda raw, base: unescape(value_of(raw, name) or b"")

    def created(raw, base):
        t = value_of(raw, b"t")
        return base + integer(t, "t") if t is not None else 0

    def expires(raw, base):
        ttl = value_of(raw, b"ttl")
        return None if ttl is None else (created(raw, base) + integer(ttl, "ttl")) / 1000

    def retry(raw, base):
        value = (value_of(raw, b"r") or b"").rstrip(b" ")
        return integer(value, "r") if value else 0

    def body(raw, base):
        return head_of(raw)

    return {
        "status": lambda raw, base: body(raw, base)[0],
        "id": text(b"i"),
        "subject": text(b"s"),
        "frames": lambda raw, base: frames_of(body(raw, base)[1], value_of(raw, b"enc"),
                                            value_of(raw, b"frames")),
        "headers": lambda raw, base: headers_of(value_of(raw, b"headers")),
        "sender": lambda raw, base: origin_sender(raw, 2),
        "origin": lambda raw, base: origin_sender(raw, 0),
        "tracker": text(b"tracker"),
        "priority": lambda raw, base: value_of(raw, b"priority") == b"1",
        "created_at": lambda raw, base: created(raw, base) / 1000,
        "expires_at": expires,
        "retry": retry,
        "settled": lambda raw, base: settle_of(value_of(raw, b"e"), created(raw, base)),
        "body": lambda raw, base: body(raw, base)[1].replace(b"\n ", b"\n"),
    }


_READERS = _field_readers()


def decode_fields(record, names, base_ms=0) -> tuple:
    """Only the named envelope fields (see FIELDS; "body" is the body as stored: the
    text, or the base64 of a binary body), each found by a search in the raw bytes."""
    raw = raw_of(record)
    try:
        return tuple([_READERS[name](raw, base_ms) for name in names])
    except KeyError as e:
        raise TextQueueError(Reason.ARGUMENT,
                             f"no journal field {e.args[0]!r}; fields are {FIELDS}") from None


def checksum_state(record) -> str:
    """"ok" (the checksum matches), "edited" (`\\c=-`: an operator changed the record by
    hand and vouches for it), "missing" (no `\\c` variable) or "mismatch"."""
    raw = raw_of(record)
    value = value_of(raw, b"c")
    if value is None:
        return "missing"
    value = value.rstrip(b" ")
    if value == b"-":
        return "edited"
    mutable = raw.find(b"\n\\r=")
    if mutable < 0 or not raw:
        return "mismatch"
    return "ok" if checksum(raw[control_size(raw):mutable + 1]) == value else "mismatch"


def verify(record) -> bool:
    """Whether a record is whole: its checksum matches, or it is marked as edited."""
    return checksum_state(record) in ("ok", "edited")


def whole_tail(incomplete) -> Optional[Record]:
    """The record in progress at the end of a journal (an `Incomplete`) when it is whole:
    its last line ended and its checksum verifies. None when it is torn (recovery then
    truncates the file at `incomplete.offset`)."""
    if incomplete is None or not incomplete.terminated:
        return None
    record = incomplete.record()
    return record if verify(record) else None


def complete_tail(incomplete) -> Optional[Record]:
    """The record in progress at the end of a journal when it is complete, whatever its
    checksum says: its last line ended and it has its `\\c=` line, which our records end
    with. A record cut short by a crash lacks one or the other; one that has both but
    fails its checksum was changed after it was written (a bit flip, a hand edit), and
    is kept in the file like any other such record. None when it is torn."""
    if incomplete is None or not incomplete.terminated:
        return None
    record = incomplete.record()
    return None if checksum_state(record) == "missing" else record


def moved_from(record) -> Optional[tuple]:
    """(segment, offset) of the record this one is a compaction copy of, or None. The
    place, not the id, names the original: ids may repeat (a Twino producer chooses its
    own), places never do."""
    value = value_of(raw_of(record), b"moved")
    if value is None:
        return None
    segment, dot, offset = value.rstrip(b" ").partition(b".")
    if not dot:
        raise TextQueueError(Reason.FIELD, f"moved is not segment.offset: {value!r}")
    return integer(segment, "moved segment"), integer(offset, "moved offset")


def decode_header(record) -> Optional[Header]:
    """The segment header a `#` record holds, or None when it is not one."""
    if not isinstance(record, Record):
        record = Record(0, record)
    if record.control != "#" or record.variable("queue") is None:
        return None
    values = {v.name: v.value for v in reversed(record.variables)}
    return Header(unescape(values["queue"].encode("utf-8", "surrogateescape")),
                  integer(values.get("segment", "0"), "segment"),
                  integer(values.get("created", "0"), "created"),
                  integer(values.get("layout", "0"), "layout"))


# -- in-place edits ------------------------------------------------------------------------

def fresh_places(offset: int, size: int) -> Places:
    """Places of a record `encode_message` wrote at `offset`, `size` bytes long."""
    end = offset + size
    return Places(offset, end - _TAIL + 3, RETRY_WIDTH, end - _TAIL + 10, SETTLE_WIDTH)


def fresh_tail(raw: bytes) -> bool:
    """Whether a record read back (`Record.raw`) still ends in the tail `encode_message`
    wrote, its `\\r=`, `\\e=` and `\\c=` where `fresh_places` puts them (values edited in
    place or not): then those are its places, found without a parse (`places_of`)."""
    places = fresh_places(0, len(raw) + 1)
    retry, settle = places.retry, places.settle
    return (retry >= 3 and raw[retry - 3:retry] == b"\\r=" and raw[settle - 3:settle] == b"\\e="
            and raw[settle + places.settle_width:settle + places.settle_width + 4] == b"\n\\c=")


def places_of(record: Record) -> Places:
    """Places of a record read back from a file (hand edits and CRLF allowed)."""
    retry = record.variable("r")
    settle = record.variable("e")
    if retry is None or settle is None:
        raise TextQueueError(Reason.FIELD, f"record at {record.offset} has no \\r or \\e variable")
    return Places(record.offset, retry.value_offset, retry.width, settle.value_offset, settle.width)


def _fit(offset, width, data):
    if len(data) > width:
        raise TextQueueError(Reason.FIT,
                             f"{data!r} does not fit the {width} bytes reserved at {offset}")
    return Edit(offset, data.ljust(width))


def status_edit(places: Places, control: str) -> Edit:
    """Flip the record's control character."""
    if control not in STATUSES:
        raise TextQueueError(Reason.ARGUMENT, f"not a journal status: {control!r}")
    return Edit(places.status, control.encode())


def ack_edit(places: Places) -> Edit:
    """The acknowledgement: `-` becomes `=`."""
    return Edit(places.status, b"=")


def retry_edit(places: Places, retry: int) -> Edit:
    """Rewrite the retry counter (it saturates at what its width holds)."""
    limit = 10 ** places.retry_width - 1
    return _fit(places.retry, places.retry_width, b"%d" % min(max(retry, 0), limit))


def settle_edit(places: Places, reason: str, settled_at: float, created_at: float,
                door: Optional[str] = None) -> Edit:
    """Stamp the settle field: the reason's code, the door of the consumer that
    settled it when given (a DOOR_LETTERS name), and the time since `created_at`."""
    return _fit(places.settle, places.settle_width,
                settle_value(reason, settled_at, to_ms(created_at), door))


def settle_fresh(record: bytes, reason: str, settled_at: float, created_at: float,
                 door: Optional[str] = None) -> bytes:
    """A record `encode_message` just made, settled: the bytes `settle_edits` would leave,
    made in one copy (a broker that settles a message before its record is written
    writes it settled)."""
    known = _FRESH_STAMPS.get((reason, door))
    if known is None:
        settle_value(reason, settled_at, to_ms(created_at), door)    # raises why
    control, prefix, width, limit = known
    ms = round(settled_at * 1000) - round(created_at * 1000)
    stamp = prefix + (b"%d" % ms if 0 <= ms < limit else duration(ms, width))
    return b"%s%s%-8s%s" % (control, record[1:-19], stamp, record[-11:])


# (reason, door) -> what settle_fresh needs: the control character, the code (and door
# letter) and the width and limit of the time after them (settle_value, precomputed).
_FRESH_STAMPS = {
    (reason, door): (control.encode(), code.encode() + (b"" if door is None else LETTER_OF[door]),
                     7 if door is None else 6, 10 ** (7 if door is None else 6))
    for reason, (code, control) in CODE_OF.items() for door in (None, *LETTER_OF)}


def settle_edits(places: Places, reason: str, settled_at: float, created_at: float,
                 door: Optional[str] = None) -> list:
    """Settle a record: its reason's control character and the settle stamp (an ack
    stamps "acked" and gets `=`, dead-lettering, expiry and removal get `!`)."""
    code = CODE_OF.get(reason)
    if code is None:
        raise TextQueueError(Reason.ARGUMENT, f"unknown settle reason {reason!r}")
    return [Edit(places.status, code[1].encode()),
            settle_edit(places, reason, settled_at, created_at, door)]
