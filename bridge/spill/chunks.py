"""Runs of paged-out entries, and reading their records back.

A pager (bridge.spill.pagers) keeps each lane's paged-out entries as a deque of `Chunk`s
in queue order. A chunk is a run of entries that is either still in memory (`entries`:
not on disk yet, or a durable queue's records not yet written by its journal) or on
disk: the file it is in (`source`, with `path` and `base_ms`, the time base of its
records), and per entry the record's offset and size (and for a journal, its retry count,
whose in-place edit may still be on its way). What a record cannot carry (a producer's
observer, a count of deliveries, a journal record's edit places) rides in `extras`, by
index. `head`/`tail` bound what is still paged: entries leave from both ends.

Records are TextQueue records either way (the journal's, or the scratch files' the same
encoder writes); a run is read with one pread, and when its records are all fresh
(protocols.textqueue.queued) in the layout the broker writes for a plain message they
are decoded together by whole-list operations (`decode_fresh`: a paged-in run is on its
way to a consumer, so the decode is due anyway). A run holding any other record is
decoded as recovery does: a fresh record becomes a LazyMessage, decoded when first
used, any other is decoded now.
"""
import os
from array import array
from collections import deque
from itertools import repeat

from mqksbridge.bridge.journal.lazy import LazyMessage
from mqksbridge.core import Message
from mqksbridge.core.message import Entry
from mqksbridge.protocols.textqueue import journal as records
from mqksbridge.protocols.textqueue.queued import decode_fresh, scan_queued


class Chunk:
    __slots__ = ("entries", "source", "offsets", "sizes", "retries", "extras", "head",
                 "tail", "seq", "bytes")

    def __init__(self, entries, seq=0):
        self.entries = entries      # list of Entry while in memory, else None
        self.source = None
        self.offsets = self.sizes = self.retries = None
        self.extras = None          # index -> (observer, deliveries, places, origin)
        self.head = 0
        self.tail = len(entries)
        self.seq = seq              # a journal's: on disk once the barrier passes it
        self.bytes = 0              # encoded bytes waiting to be written (scratch)

    def __len__(self):
        return self.tail - self.head

    def placed(self, source, offsets, sizes, retries=None, extras=None):
        """The run is on disk now: keep where, let the entries go."""
        self.source = source
        self.offsets = array("Q", offsets)
        self.sizes = array("I", sizes)
        self.retries = None if retries is None else array("I", retries)
        self.extras = extras or None
        self.entries = None

    def take(self, count, last=False):
        """Up to `count` entries from the front (or the back), in queue order, as
        `(index, entry or None)` ranges: the caller reads the on-disk ones."""
        count = min(count, self.tail - self.head)
        if last:
            start = self.tail - count
            self.tail = start
        else:
            start = self.head
            self.head += count
        return start, start + count


def extras_of(entry, slot=None):
    """What a record does not carry of `entry` (Chunk.extras), or None."""
    places = origin = None
    if slot is not None:
        places, origin = slot.places, slot.origin
    if entry.observer is None and not entry.deliveries and places is None and origin is None:
        return None
    return entry.observer, entry.deliveries, places, origin


def read_entries(chunk, start, stop, slot=None):
    """The entries of a placed chunk's records [start, stop), read back (one pread of
    their span; `source` has `path` and `created_ms`, the records' time base);
    `slot(offset, size, places=None, origin=None)` makes a journal record's
    `entry.record` (None: a scratch record, which no journal knows)."""
    offsets, sizes, source = chunk.offsets, chunk.sizes, chunk.source
    first = offsets[start]
    end = offsets[stop - 1] + sizes[stop - 1]
    fd = os.open(source.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, end - first, first)
    finally:
        os.close(fd)
    if len(data) != end - first:
        raise OSError(f"{source.path}: {end - first} bytes at {first} expected, "
                      f"{len(data)} read")
    queued = scan_queued(data, first)
    raws, fresh, lengths = queued.raws, queued.retries, queued.sizes
    if queued.offsets != offsets[start:stop].tolist():     # a journal: other records between
        wanted = set(offsets[start:stop])
        found = {o: (raw, retry, size) for o, raw, retry, size in zip(
            queued.offsets, raws, fresh, lengths) if o in wanted}
        raws, fresh, lengths = zip(*map(found.__getitem__, offsets[start:stop]))
    messages, retries = _messages(raws, fresh, lengths, source.created_ms)
    if chunk.retries is not None:
        retries = chunk.retries[start:stop]
    entries = list(map(Entry, messages, retries))
    if slot is not None:                 # one pass in C, but for Slot.__init__
        deque(map(setattr, entries, repeat("record"),
                  map(slot, offsets[start:stop], sizes[start:stop])), 0)
    extras = chunk.extras
    if extras is not None:
        for i in range(start, stop):
            extra = extras.get(i)
            if extra is not None:
                entry = entries[i - start]
                entry.observer, entry.deliveries, places, origin = extra
                if slot is not None:
                    entry.record = slot(offsets[i], sizes[i], places, origin)
    return entries


def _messages(raws, fresh, sizes, base):
    """(messages, retries) of queued records: fresh ones (scan_queued) decoded together
    when they have the plain layout (protocols.textqueue.queued.decode_fresh), else as
    recovery has them (a LazyMessage); any other decoded now."""
    if None not in fresh:
        columns = decode_fresh(raws, sizes, base)
        if columns is not None:
            ids, subjects, bodies, senders, origins, created = columns
            return list(map(Message, ids, subjects, zip(bodies), repeat(None), senders, origins,
                            repeat(""), repeat(False), repeat(None), created, repeat(None),
                            repeat(None), sizes)), fresh
    messages, retries = [], []
    for raw, retry, size in zip(raws, fresh, sizes):
        if retry is not None:
            message = LazyMessage(raw, base, size)
        else:
            env = records.decode(raw, base)
            message = Message(env.id, env.subject, env.frames, env.headers, env.sender,
                              env.origin, env.tracker, env.priority, env.expires_at,
                              env.created_at)
            retry = env.retry
        messages.append(message)
        retries.append(retry)
    return messages, retries
