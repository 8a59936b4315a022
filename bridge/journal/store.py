"""One durable queue's journal: the core's journal interface (core.storage) on segment files.

A message put on the queue (`put`) is staged; when the writer starts the next batch, the
journal encodes every staged record in one call (`encode`) and appends them: what was
settled or requeued meanwhile is written so, in the one append. A long turn is encoded
in parts of STAGED entries, each when the next put comes (so the entries of a part were
handed over, and settled by an auto-ack consumer, by then). Then its `Slot`
(segment, offset, size) rides on the core Entry (`entry.record`) so that later edits
find it without a lookup: a requeue rewrites the retry counter, a settlement flips the
control character and stamps the settle field (specs/textqueue.md). Segments roll at
`segment_size`; any segment but the current one whose records are all settled is
retired to `archive/` (removed when the retention is 0). At each roll, an older segment with few
live records (at most `compact_live` of a segment's size) is compacted: its live records
are copied forward into the current segment with `\\moved=` naming their original place,
the originals become `#` (moved) after the copies are synced (under `interval` too: the
writer's ordered batch), and the segment retires.
A crash between the two leaves both on disk; recovery keeps the copy (bridge.journal
.recovery), so nothing is lost and nothing is delivered twice.
"""
import os
import time
from bisect import bisect_right
from itertools import accumulate, repeat
from operator import attrgetter, itemgetter

from mqksbridge.bridge.clock import TurnClock
from mqksbridge.bridge.journal import layout
from mqksbridge.bridge.journal.writer import NEVER, Segment
from mqksbridge.protocols.textqueue import TextQueueError, journal as records


_DOORS = frozenset((None, *records.DOOR_LETTERS.values()))   # a settle stamp can name
# Staged entries encoded at most this many at a time: a busy turn's thousands otherwise
# stay alive across Python's young collections, get promoted and bring on full ones
# (measured in process: 670 ns a message in the collector, against 7 in memory).
STAGED = 256
DEAD = "dead-lettered"      # the settle reason whose message goes on, to a dead-letter queue
_MESSAGE = attrgetter("message")
_RETRY = attrgetter("retry")
_DOOR = itemgetter(3)


class Slot:
    """Where one entry's record is: `places` are worked out on the first edit (a record
    read back from disk brings its own: hand edits may have changed the widths)."""

    __slots__ = ("segment", "offset", "size", "places", "origin")

    def __init__(self, segment, offset, size, places=None, origin=None):
        self.segment = segment
        self.offset = offset
        self.size = size
        self.places = places
        self.origin = origin        # (segment, offset) of the first copy's original, if moved

    def __repr__(self):
        return f"Slot({self.segment.number}:{self.offset}+{self.size})"


class QueueJournal:
    """The journal of one queue (module docstring); `queue` is the core Queue it serves
    (compaction looks for the live entries there)."""

    def __init__(self, store, name, directory, policy, next_number=1, segments=()):
        self.store = store
        self.writer = store.writer
        self.storage = store.writer.storage
        self.turn = store.turn
        self.name = name
        self.directory = directory
        self.policy = policy
        self.segments = list(segments)     # not retired, oldest first
        self.current = None
        self._empty = 0
        self.next_number = next_number
        self.queue = None
        self.bytes = sum(s.end for s in self.segments)   # journal bytes on disk and pending
        self.settled = self.compactions = self.moved = 0
        self.fresh = []                    # entries staged this turn (put), in order
        self.fresh_settled = []            # indexes in fresh settled since, in order
        self.fresh_runs = []               # and how (records.settle_runs)
        self._run = None                   # (reason, when, door) of the last run
        self.staged = False                # whether the writer's pending batch names it

    # -- the core's journal interface ------------------------------------------------------
    def put(self, entry):
        """Stage the entry: its record is encoded with the rest of the batch's (`encode`,
        which the writer calls when it starts the batch, or this put once STAGED entries
        wait), so a message settled before then is written settled, in the one append.
        Until then `entry.record` is the entry's index in `fresh`. Every durable put runs
        this: no calls it can avoid."""
        message = entry.message
        if not message.created_at:
            # every door stamps its publishes; one that came without an arrival time is
            # stamped here, so records and settle stamps hold real times for recovery and
            # the pipeline.
            turn = self.turn
            message.created_at = turn.reading or turn.seconds()
        fresh = self.fresh
        if not fresh:
            if self.current is None:
                self._roll()
            if not self.staged:
                self.staged = True
                self.writer.stage(self)
        elif len(fresh) >= STAGED:
            self.encode()                   # the entries before this one (module docstring)
            fresh = self.fresh
        entry.record = len(fresh)
        fresh.append(entry)
        self.storage.appended += 1          # StorageBarrier.append, inline

    def encode(self):
        """Writer, as it starts a batch: the staged entries' records, encoded in one call
        (records.encode_batch) and appended; each entry not settled meanwhile gets its
        Slot. Rolls to a new segment where the current one fills up."""
        fresh, settled, runs = self.fresh, self.fresh_settled, self.fresh_runs
        if not fresh:
            return
        self.fresh, self.fresh_settled, self.fresh_runs = [], [], []
        self._run = None
        self.settled += len(settled)
        if runs and not _DOORS.issuperset(map(_DOOR, runs)):
            runs = [(k, reason, at, door if door in _DOORS else None)
                    for k, reason, at, door in runs]
        while True:
            segment = self.current
            data, sizes = records.encode_batch(list(map(_MESSAGE, fresh)), segment.created_ms,
                                               list(map(_RETRY, fresh)), settled, runs)
            k = n = len(fresh)
            room = self.store.segment_size - segment.end
            if len(data) > room:            # fill this segment, roll for the rest
                k = bisect_right(list(accumulate(sizes)), room)
                if k == 0 and segment.end <= self._empty:
                    k = 1                   # a segment takes its first record, whatever size
            if k == n:
                self._append(segment, fresh, data, sizes, len(settled))
                return
            if k:
                self._append(segment, fresh[:k], data[:sum(sizes[:k])], sizes[:k],
                             sum(1 for i in settled if i < k))
            fresh = fresh[k:]
            settled, runs = records.settle_runs(
                (i - k, reason, at, door)
                for i, reason, at, door in records.settles_of(settled, runs) if i >= k)
            for entry in fresh:
                if type(entry.record) is int:
                    entry.record -= k
            self._roll()                    # the rest, encoded again on the new time base

    def _append(self, segment, entries, data, sizes, settled):
        """Append the encoded records of `entries` and give each entry still staged (not
        settled since: `settled` of them were) its Slot."""
        start = segment.end
        self.writer.append_records(segment, data, len(entries))
        self.bytes += len(data)
        if settled == len(entries):
            return                          # every record written settled: none is live
        live = [i for i, entry in enumerate(entries) if entry.record == i]  # still staged
        offsets = list(accumulate(sizes, initial=start))
        live_sizes = [sizes[i] for i in live]
        for i, slot in zip(live, map(Slot, repeat(segment), [offsets[i] for i in live],
                                     live_sizes)):
            entries[i].record = slot
        segment.live += len(live_sizes)
        segment.live_bytes += sum(live_sizes)

    def requeued(self, entry):
        slot = entry.record
        if slot is not None and type(slot) is not int:   # a staged one: encode takes its retry
            self.writer.edit(slot.segment, *self._retry_edit(slot, entry.retry))

    def settle(self, entry, reason, door=None):
        slot = entry.record
        entry.record = None
        if type(slot) is int:               # staged: written settled (encode)
            turn = self.turn
            now = turn.reading or turn.seconds()
            created = entry.message.created_at
            if created > now:               # stamped by its door after this turn's reading:
                now = created               # a settle never precedes its arrival
            if self._run != (reason, now, door):    # a new run (records.settle_runs)
                self._run = (reason, now, door)
                self.fresh_runs.append((len(self.fresh_settled), reason, now, door))
            self.fresh_settled.append(slot)
            return
        if slot is None:
            return
        if door is not None and door not in _DOORS:
            door = None                     # a door the stamp has no letter for
        segment = slot.segment
        created = entry.message.created_at
        now = max(self.store.turn.seconds(), created)
        places = self._places(slot)
        try:
            edits = records.settle_edits(places, reason, now, created, door)
        except TextQueueError:              # a hand-trimmed \e= has no room for a stamp
            edits = [records.status_edit(places, records.CODE_OF[reason][1])]
        if reason == DEAD:                  # its copy in the dead-letter queue goes first
            self.writer.sync_before_edits()
        for edit in edits:
            self.writer.edit(segment, edit.offset, edit.data)
        self.settled += 1
        self._release(slot)

    def adopt(self, entry):
        """Copy a recovered record that has no room for in-place edits (typed or trimmed
        by hand) forward with fresh room; the original becomes `#`."""
        slot = entry.record
        self._move(entry, slot, self.current or self._roll(compact=False), [(slot.offset, b"#")])

    # -- recovery ------------------------------------------------------------------------------
    def reopen(self, recovered):
        """Take over a recovered directory (bridge.journal.recovery): its segments, opened
        for edits, new ones numbered after them; superseded records flipped to `#`."""
        files = self.writer.files
        self.directory = recovered.directory
        self.segments = list(recovered.segments)
        self.next_number = recovered.next_number
        self.bytes = sum(s.end for s in recovered.segments)
        for segment in recovered.segments:
            segment.open(files)
        for segment, offset, size in recovered.superseded:
            self.writer.edit(segment, offset, b"#")

    def settle_in(self, recovered):
        """Once its entries are back in the queue: records typed without room for edits
        get it, segments with nothing live retire."""
        for entry in recovered.unplaced:
            if entry.record is not None:
                self.adopt(entry)
        for segment in list(self.segments):
            if segment.live == 0:
                self._retire(segment)

    def retire_all(self, recovered):
        """A recovered directory with nothing live (a deleted queue's): every segment
        retires."""
        self.segments = list(recovered.segments)
        for segment in recovered.segments:
            segment.open(self.writer.files)
            self._retire(segment)

    # -- segments ------------------------------------------------------------------------------
    def _roll(self, compact=True):
        """A new current segment; the old one retires if it is all settled already, and
        older ones with few live records are compacted into the new one."""
        old = self.current
        number = self.next_number
        self.next_number += 1
        created_ms = round(self.store.clock.seconds() * 1000)
        segment = Segment(self.directory, number, created_ms, self.policy)
        header = records.encode_header(self.name, number, created_ms)
        self.writer.append(segment, header)
        self.bytes += len(header)
        self.segments.append(segment)
        self.current = segment
        if old is not None and old.live == 0:
            self._retire(old)
        if compact:
            self._compact()
        # A segment this long holds no new record yet: it takes the next one whatever its
        # size (encode), even when compaction's copies filled it, or rolls would go on
        # compacting copies forward without ever writing the record.
        self._empty = segment.end
        return segment

    def _release(self, slot):
        segment = slot.segment
        segment.live -= 1
        segment.live_bytes -= slot.size
        if segment.live == 0 and segment is not self.current:
            self._retire(segment)

    def _retire(self, segment):
        if segment.retired:
            return
        segment.retired = True
        self.segments.remove(segment)
        self.bytes -= segment.end
        self.writer.after(self.store.archiver(segment))

    def _compact(self):
        """Copy the live records of old, mostly settled segments forward (module docstring)."""
        limit = self.store.compact_live * self.store.segment_size
        old = [s for s in self.segments if s is not self.current and s.live and
               s.live_bytes <= limit]
        if not old or self.queue is None:
            return
        chosen = {id(s) for s in old}
        found = sorted((e for e in self.queue.live_entries()
                        if type(e.record) is Slot and id(e.record.segment) in chosen),
                       key=lambda e: (e.record.segment.number, e.record.offset))
        now = self.store.clock.seconds()
        for entry in found:
            slot = entry.record
            places = self._places(slot)
            try:
                edits = records.settle_edits(places, "moved", now, entry.message.created_at)
            except TextQueueError:          # a hand-trimmed \e= has no room for a stamp
                edits = [records.status_edit(places, "#")]
            self._move(entry, slot, self.current, [(e.offset, e.data) for e in edits])
        self.compactions += 1

    def _move(self, entry, slot, segment, edits):
        """Copy `entry`'s record to the end of `segment`, naming its original place; the
        `edits` mark the original (they run after the copy is synced: writer)."""
        origin = slot.origin or (slot.segment.number, slot.offset)
        data = records.encode_message(entry.message, base_ms=segment.created_ms,
                                      retry=entry.retry, moved=origin)
        offset = self.writer.append(segment, data)
        self.writer.sync_before_edits()
        for at, data_ in edits:
            self.writer.edit(slot.segment, at, data_)
        entry.record = Slot(segment, offset, len(data), None, origin)
        segment.live += 1
        segment.live_bytes += len(data)
        self.bytes += len(data)
        self.moved += 1
        self._release(slot)

    # -- edits ---------------------------------------------------------------------------------
    @staticmethod
    def _places(slot):
        places = slot.places
        if places is None:
            places = slot.places = records.fresh_places(slot.offset, slot.size)
        return places

    def _retry_edit(self, slot, retry):
        edit = records.retry_edit(self._places(slot), retry)
        return edit.offset, edit.data


class Store:
    """Every journal of the broker: their settings, the writer, and the archiver."""

    def __init__(self, data_dir, writer, clock, segment_size=64 << 20, compact_live=0.25,
                 archive_retention=7 * 86400.0, folder=layout.JOURNAL):
        self.data_dir = data_dir
        self.root = os.path.join(data_dir, folder)
        self.writer = writer
        self.clock = clock
        self.turn = TurnClock(clock, writer.reactor)   # arrival and settle stamps
        self.segment_size = segment_size
        self.compact_live = compact_live
        self.archive_retention = archive_retention
        self.journals = {}                  # queue name -> QueueJournal

    def journal(self, name, policy):
        """The journal of queue `name` (made on first use, its directory on first write)."""
        journal = self.journals.get(name)
        if journal is None:
            directory = os.path.join(self.root, layout.queue_directory(name))
            journal = self.journals[name] = QueueJournal(self, name, directory, policy)
        return journal

    def archiver(self, segment):
        """Worker-thread work that retires a settled segment (module docstring)."""
        retention = self.archive_retention
        files = self.writer.files

        def archive():
            synced = segment.policy != NEVER
            if segment.fd is not None:
                if synced:                  # its settlements (and `#` flips) first
                    files.fdatasync(segment.fd)
                    for directory in segment.created:   # the queue's folder, made with
                        files.sync_directory(directory)  # it and never synced: the next
                    segment.created = ()                 # segments' names live there
                segment.close(files)
            if not os.path.exists(segment.path):
                return
            if retention <= 0:
                files.unlink(segment.path)
            else:
                folder = os.path.join(segment.directory, layout.ARCHIVE)
                files.makedirs(folder)
                files.rename(segment.path, os.path.join(folder, os.path.basename(segment.path)))
                if synced:
                    files.sync_directory(folder)
                prune(files, folder, retention)
            if synced:
                files.sync_directory(segment.directory)
        return archive


def prune(files, folder, retention, now=None):
    """Remove archived segments last changed more than `retention` seconds ago."""
    now = time.time() if now is None else now
    for name in os.listdir(folder):
        if layout.segment_number(name) is None:
            continue
        path = os.path.join(folder, name)
        try:
            if now - os.stat(path).st_mtime > retention:
                files.unlink(path)
        except FileNotFoundError:
            pass
