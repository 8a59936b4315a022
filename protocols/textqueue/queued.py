"""The queued records of a journal segment, read in bulk: what recovery needs, no more.

Recovery brings back every `-` record of every segment at start, a million of them for a
large backlog. Almost all are exactly as `journal.encode_message` wrote them: a
one-line text body, the fixed tail `\\r=`, `\\e=` (blank: not settled), `\\c=`, and a
checksum that verifies. For such a record, the *fresh* ones, recovery needs only its
place, its retry counter and its body size; the rest of the envelope can wait until
the message is delivered (bridge.journal.lazy). `scan_queued` finds those facts with
operations over whole lists, none of which runs Python code per record: the `scan`
split, one `compress` picking the `-` records, a dict lookup of each record's 23-byte
tail (layout, retry and blank settle field in one), a `zlib.crc32` of each immutable
part compared with all stored checksums decoded by one base64 call, and a few `count`s.

A fresh record (`retries[i]` not None) is one where, by the simple path (the `Parser`,
`Record.variable`, `journal.checksum_state`, `journal.places_of`, `journal.decode`):
its checksum state is "ok"; its places are `fresh_places(offset, len(raw) + 1)`; its
retry is `retries[i]`; its settle field is blank; and `decode` gives frames `(body,)`
with `len(body) == sizes[i]`, no priority and no ttl. `decode` takes everything
`encode_message` writes; only a record forged with a valid checksum over fields the
encoder never writes (`\\t=abc`) can still fail it, when its message is first used.
tests/textqueue holds the two paths equal on journals as written, damaged, edited and
forged, and on any bytes. Every other queued record (hand edited, `\\c=-`, a multi-line
or binary body, priority, ttl, a damaged checksum) has `retries[i]` None and takes the
simple path, as before.
"""
import binascii
import re
import sys
import zlib
from array import array
from itertools import compress, repeat
from operator import add, getitem, is_, itemgetter, methodcaller, ne, sub, truediv
from typing import NamedTuple, Optional

from mqksbridge.protocols.textqueue.journal import whole_tail
from mqksbridge.protocols.textqueue.record import (
    CHECKSUM_WIDTH, RETRY_MAX, RETRY_WIDTH, SETTLE_WIDTH, ascii_text, checksum, unescape)
from mqksbridge.protocols.textqueue.records import Record
from mqksbridge.protocols.textqueue.scan import Scan, scan

# The tail of a fresh record up to its checksum value, for every retry it can hold.
_FRESH = {b"\n\\r=%s\n\\e=%s\n\\c=" % (b"%d" % retry + b" " * (RETRY_WIDTH - len(b"%d" % retry)),
                                     b" " * SETTLE_WIDTH): retry
          for retry in range(RETRY_MAX + 1)}
_HEAD = len(next(iter(_FRESH)))
_TAIL = slice(-(_HEAD + CHECKSUM_WIDTH), -CHECKSUM_WIDTH)
_VALUE = slice(-CHECKSUM_WIDTH, None)
_IMMUTABLE = slice(1, -(_HEAD + CHECKSUM_WIDTH - 1))   # after '-', up to the '\n' before \r=
_QUEUED = bytes(int(b == 0x2D) for b in range(256))      # '-' -> 1, any other byte -> 0
_STANDARD = bytes.maketrans(b"-_", b"+/")
_PAD = b"A" * 10            # 6 characters + 10 = 16: one value is 12 bytes, 3 words
# What a fresh record never holds: its mutable variables appear once, in the tail; the
# others make the body or the expiry more than one line can say, or (a CR) make readers
# see other line ends than ours.
_NOT_IN_IMMUTABLE = (b"\n\\r=", b"\n\\e=", b"\n\\c=")
_NOT_IN_RECORD = (b"\n ", b"\n\\enc=", b"\n\\priority=", b"\n\\ttl=", b"\r")
# decode_fresh: the variables of a plain message, in encode_message's order
_PLAIN = re.compile(rb"\n\\i=([^\n]*)\n\\s=([^\n]*)\n\\f=([^\n]*)\n\\t=([^\n]*)")
_PLAIN_VARIABLES = 4
_BY_COLON = methodcaller("partition", b":")
_ORIGIN, _SENDER = itemgetter(0), itemgetter(2)


class QueuedScan(NamedTuple):
    """A journal buffer's `scan`, its last record when whole (`tail`: see
    `journal.whole_tail`; None when the buffer ends torn or on a record's end), and its
    `-` records (the whole tail included) as parallel lists: `offsets`, `raws`,
    `retries` and `sizes` (None for a record that is not fresh; module docstring)."""
    scan: Scan
    tail: Optional[Record]
    offsets: list
    raws: list
    retries: list
    sizes: list


def scan_queued(buffer: bytes, offset=0) -> QueuedScan:
    """The queued records of a journal segment's bytes, whose first byte is at file
    offset `offset` (module docstring)."""
    found = scan(buffer, offset)
    offsets, raws, controls = found.offsets, found.raws, found.controls
    tail = whole_tail(found.incomplete)
    if tail is not None:
        offsets, raws = offsets + [tail.offset], raws + [tail.raw]
        controls += tail.raw[:1]
    chosen = controls.translate(_QUEUED)
    offsets = list(compress(offsets, chosen))
    raws = list(compress(raws, chosen))
    retries, sizes = _fresh(raws, buffer)
    return QueuedScan(found, tail, offsets, raws, retries, sizes)


def decode_fresh(raws, sizes, base_ms=0):
    """The messages of fresh records (`raws` and `sizes` from scan_queued, none of them
    None) as columns: `(ids, subjects, bodies, senders, origins, created_at)`, element for
    element what `journal.decode(raw, base_ms)` gives (`frames` being `(body,)`, and no
    headers, tracker, priority or expiry). Found by whole-list operations (one join and
    one split of all their variables), for the layout the broker writes for a plain
    message: `\\i`, `\\s`, `\\f` and `\\t`, nothing else. None when some record has
    any other (a tracker, headers, a variable left out, a time that is no integer):
    decode those one by one. Paging a backlog back in decodes a chunk of thousands of
    records at once (bridge.spill.chunks); tests/textqueue holds it equal to decode."""
    n = len(raws)
    if not n:
        return [], [], [], [], [], []
    ends = list(map(add, sizes, repeat(1)))
    bodies = list(map(getitem, raws, map(slice, repeat(1), ends)))
    middles = list(map(getitem, raws, map(slice, ends, repeat(-(_HEAD + CHECKSUM_WIDTH)))))
    # each record's variables are exactly \\i \\s \\f \\t: 4 separators per record, at its
    # start, so the n matches over them all are the n records' own
    if list(map(bytes.count, middles, repeat(b"\n\\"))).count(_PLAIN_VARIABLES) != n:
        return None
    if not all(map(bytes.startswith, middles, repeat(b"\n\\"))) or b"\n" in b"".join(bodies):
        return None
    joined = b"".join(middles)
    found = _PLAIN.findall(joined)
    if len(found) != n:
        return None
    ids, subjects, fs, ts = zip(*found)
    try:
        created = list(map(truediv, map(add, map(int, ts), repeat(base_ms)), repeat(1000)))
    except ValueError:
        return None
    text = unescape if b"%" in joined else ascii_text
    split = list(map(_BY_COLON, fs))
    return (list(map(text, ids)), list(map(text, subjects)), bodies,
            list(map(text, map(_SENDER, split))), list(map(text, map(_ORIGIN, split))),
            created)


def _fresh(raws, buffer):
    """(retries, sizes) of queued records: None where a record is not fresh."""
    if not raws:
        return [], []
    retries = list(map(_FRESH.get, map(getitem, raws, repeat(_TAIL))))
    sizes = list(map(sub, map(bytes.find, raws, repeat(b"\n\\")), repeat(1)))
    immutable = list(map(getitem, raws, repeat(_IMMUTABLE)))
    crcs = list(map(zlib.crc32, immutable))
    values = list(map(getitem, raws, repeat(_VALUE)))
    stored = _stored(values)
    if stored != crcs:
        if stored is None:
            _drop(retries, sizes, map(ne, map(checksum, immutable), values))
        else:
            _drop(retries, sizes, map(ne, crcs, stored))
    for needle in _NOT_IN_IMMUTABLE:
        if any(map(bytes.count, immutable, repeat(needle))):
            _drop(retries, sizes, map(bytes.count, immutable, repeat(needle)))
    for needle in _NOT_IN_RECORD:
        if needle in buffer:
            _drop(retries, sizes, map(bytes.count, raws, repeat(needle)))
    if None in retries:
        _drop(retries, sizes, map(is_, retries, repeat(None)))
    return retries, sizes


def _drop(retries, sizes, marks):
    """Mark the records whose `marks` item is true as not fresh."""
    for i in compress(range(len(retries)), marks):
        retries[i] = sizes[i] = None


def _stored(values):
    """The CRC-32 each 6-character checksum value stands for, all decoded by one base64
    call; None when some value is not 6 base64url characters whose 4 spare bits are 0
    (the values are then compared one by one, as text)."""
    joined = _PAD.join(values) + _PAD
    if b"+" in joined or b"/" in joined:
        return None
    try:
        data = binascii.a2b_base64(joined.translate(_STANDARD), strict_mode=True)
    except binascii.Error:
        return None
    if len(data) != 12 * len(values):
        return None
    words = array("I")
    if words.itemsize != 4:
        return None
    words.frombytes(data)
    if sys.byteorder == "little":
        words.byteswap()
    if any(words[1::3]):                # spare bits set: the text differs from ours
        return None
    return words[0::3].tolist()
