"""Bulk journal decoding: a few envelope fields of many records, as columns.

The data pipeline reads millions of journal records and usually wants a handful of
fields of each (queue reports need the status, created and settle times, retry count,
subject and origin; nobody needs the body). `journal.decode_fields` finds one field of
one record with a few Python calls; here each field of a whole list of raw records
(a `Scan`'s `raws`) is found by one compiled search per record, run from C through
`map`, and turned into values by C-level maps where the layout allows it: little or
no Python code runs per record for text without a '%' in it, the retry counter, times
and sizes of text bodies. Whatever needs more (percent-encoding, base64, headers, settle
stamps in seconds or hours, CRLF line ends, a continuation line after a variable) is
decoded by the record's own value codecs (record.py), so there is still one decoder of
each value.

`decode_columns(raws, names, base_ms)` returns one list per name, equal element for
element to what `decode_fields` and `decode` give (held equal by hypothesis in
tests/textqueue/test_textqueue_fast_paths.py). Times are integer milliseconds here (the
`*_ms` fields), so a reader can make exact timestamps of them.
"""
import re
from operator import itemgetter, methodcaller

from mqksbridge.protocols.textqueue import record
from mqksbridge.protocols.textqueue.records import Reason, TextQueueError

#: The fields `decode_columns` knows: the envelope's, with times in milliseconds
#: (`created_ms`, `expires_ms`, `settled_ms`, `settle_reason`, `settle_door`), `size` (the message's
#: bytes: all frames) and `frame_count`.
FIELDS = ("status", "id", "subject", "sender", "origin", "tracker", "priority",
          "created_ms", "expires_ms", "retry", "settle_reason", "settled_ms", "settle_door", "headers",
          "frames", "frame_count", "size", "body")

_PARTITION = methodcaller("partition", b":")
_NOTHING = (b"", b"", b"")
_FIRST = itemgetter(0)
_BEFORE_VARIABLES = methodcaller("partition", b"\n\\")
_CONTINUED = re.compile(rb"\n\\[^\n]*\n ")        # a continuation line after a variable
_SETTLE_REASONS = {code.encode(): reason for code, (reason, _) in record.SETTLE_CODES.items()}
_DOOR_OF = {letter.encode(): door for letter, door in record.DOOR_LETTERS.items()}
# Group 1 of a match is the first value of the variable, as record.value_of finds it.
_SEARCHES = {name: re.compile(rb"\n\\" + re.escape(name) + rb"=([^\n]*)").search
             for name in record.NAMES}


def decode_columns(raws, names, base_ms=0) -> dict:
    """{name: [value per record]} for each name in `names` (see FIELDS), each value
    equal to what journal.decode_fields / decode give for that record. Values that do
    not decode raise TextQueueError, as there."""
    unknown = [name for name in names if name not in FIELDS]
    if unknown:
        raise TextQueueError(Reason.ARGUMENT,
                             f"no journal column {unknown[0]!r}; columns are {FIELDS}")
    columns = _Columns(raws, base_ms)
    return {name: getattr(columns, name)() for name in names}


class _Columns:
    """The columns of one list of records; what several columns share (the variable
    values, created times, heads) is found once."""

    def __init__(self, raws, base_ms):
        raws = raws if isinstance(raws, list) else list(raws)
        if b"\r" in b"".join(raws):                 # decode_fields reads CRLF as LF
            raws = list(map(record.raw_of, raws))
        self.raws = raws
        self.base_ms = base_ms
        self._cache = {}

    def _get(self, key, make):
        cache = self._cache
        if key not in cache:
            cache[key] = make()
        return cache[key]

    def _values(self, name):
        """The raw value of variable `name` in each record, or None."""
        return self._get(name, lambda: [m and m[1] for m in map(_SEARCHES[name], self.raws)])

    def _created(self):
        def make():
            ts = self._values(b"t")
            if None not in ts:
                base = self.base_ms
                return [base + t for t in _ints(ts, "t")] if base else _ints(ts, "t")
            return [0 if t is None else self.base_ms + record.integer(t, "t") for t in ts]
        return self._get("created", make)

    def _heads(self):
        """([control character], [body as stored]) of the records."""
        def make():
            raws = self.raws
            if (all(raws) and max(map(_FIRST, raws), default=0) < 0x80
                    and _CONTINUED.search(b"\n".join(raws)) is None):
                heads = [p[0] for p in map(_BEFORE_VARIABLES, raws)]
                return list(map(chr, map(_FIRST, raws))), [h[1:] for h in heads]
            heads = list(map(record.head_of, raws))
            return [h[0] for h in heads], [h[1] for h in heads]
        return self._get("heads", make)

    def _frames(self):
        return self._get("frames", lambda: [
            record.frames_of(body, enc, count) for body, enc, count
            in zip(self._heads()[1], self._values(b"enc"), self._values(b"frames"))])

    def _sender_origin(self):
        def make():
            parts = [_PARTITION(v) if v else _NOTHING for v in self._values(b"f")]
            return [p[0] for p in parts], [p[2] for p in parts]
        return self._get("origin sender", make)

    def _settles(self):
        return self._get("settles", lambda: _settles(self._values(b"e"), self._created()))

    def status(self):
        return list(self._heads()[0])

    def id(self):
        return _text(self._values(b"i"))

    def subject(self):
        return _text(self._values(b"s"))

    def tracker(self):
        return _text(self._values(b"tracker"))

    def origin(self):
        return _text(self._sender_origin()[0])

    def sender(self):
        return _text(self._sender_origin()[1])

    def priority(self):
        return [v == b"1" for v in self._values(b"priority")]

    def created_ms(self):
        return list(self._created())

    def expires_ms(self):
        ttls = self._values(b"ttl")
        if ttls.count(None) == len(ttls):           # an empty \ttl= is there, and bad
            return [None] * len(ttls)
        try:
            created = self._created()
        except TextQueueError:          # a bad \t fails only the records with a ttl
            created = [0 if ttl is None or t is None else self.base_ms + record.integer(t, "t")
                       for t, ttl in zip(self._values(b"t"), ttls)]
        return [None if ttl is None else c + record.integer(ttl, "ttl")
                for c, ttl in zip(created, ttls)]

    def retry(self):
        values = self._values(b"r")
        stripped = [v.rstrip(b" ") if v else b"" for v in values]
        if all(stripped):
            return _ints(stripped, "r")
        return [record.integer(v, "r") if v else 0 for v in stripped]

    def settle_reason(self):
        return self._settles()[0]

    def settled_ms(self):
        return self._settles()[1]

    def settle_door(self):
        return self._settles()[2]

    def headers(self):
        return [None if v is None else record.headers_of(v) for v in self._values(b"headers")]

    def frames(self):
        return list(self._frames())

    def frame_count(self):
        return [len(f) for f in self._frames()]

    def size(self):
        """Bytes of each message (all frames): a text body is its stored bytes less one
        per continuation space; a base64 body is decoded (as decode would, errors too)."""
        encs = self._values(b"enc")
        bodies = self._heads()[1]
        if encs.count(None) == len(encs):           # no `enc` at all (an empty one is bad)
            return [len(body) - body.count(b"\n ") for body in bodies]
        counts = self._values(b"frames")
        return [len(body) - body.count(b"\n ") if enc is None
                else sum(map(len, record.frames_of(body, enc, count)))
                for body, enc, count in zip(bodies, encs, counts)]

    def body(self):
        return [body.replace(b"\n ", b"\n") for body in self._heads()[1]]


def _text(values):
    """Variable values as text: percent-decoded, "" when absent."""
    if not any(values):
        return [""] * len(values)
    if b"%" not in b"".join([v for v in values if v]):
        if None in values:
            return [record.ascii_text(v) if v else "" for v in values]
        return list(map(record.ascii_text, values))
    return [record.unescape(v) if v else "" for v in values]


def _ints(values, what):
    """int of each value (bytes with digits), raising the codec's error."""
    try:
        return list(map(int, values))
    except ValueError:
        for v in values:
            record.integer(v, what)           # raises with the value in the message
        raise


def _settles(values, created):
    """([reason], [settled ms], [door]) per record (None when not settled or not
    recorded). A stamp of a known code, an optional door letter and a millisecond count
    is read here; any other goes through record.settle_of (units, unknown codes and
    letters, errors)."""
    reasons, times, doors = [], [], []
    reason_of, door_of = _SETTLE_REASONS, _DOOR_OF
    for value, created_ms in zip(values, created):
        value = value.rstrip(b" ") if value else value
        if not value:                   # blank: room reserved, not settled
            reasons.append(None)
            times.append(None)
            doors.append(None)
            continue
        reason = reason_of.get(value[:1])
        door = door_of.get(value[1:2])
        after = value[2:] if door else value[1:]
        if reason is None or not after.isdigit():
            settle = record.settle_of(value, created_ms)
            reason, door = settle.reason, settle.door
            after = value[1:]
            if after[:1].isupper():
                after = after[1:]
            unit = {b"s": 1000, b"h": 3_600_000}.get(after[-1:], 1)
            after = after[:-1] if unit > 1 else after
        else:
            unit = 1
        reasons.append(reason)
        times.append(created_ms + int(after) * unit)
        doors.append(door)
    return reasons, times, doors
