"""Group commit: every journal write of a reactor turn in one batch, on one worker thread.

Journals stage message records (`stage`: encoded in bulk by the journal when the batch
starts, `prepare`; each took a storage sequence number when staged), hand the writer
other bytes to append to a segment (`append`) and in-place edits (`edit`: an ack flip, a retry counter, a settle
stamp). The first of them in a reactor turn schedules one `commit` (a callLater(0), no
timer). A commit takes everything pending and runs it in the worker thread: the appends
(one pwrite per segment, at the offset the reactor side already gave each record), one
fdatasync per segment whose policy is `always` (and per segment `interval` asks for),
then the edits, then the file work queued behind them (archiving a segment, rewriting
the definitions file). Back on the reactor, `storage.stored(seq)` releases every
confirmation of the batch in publish order.

One batch is in flight at a time: what arrives during an fsync waits, and goes as the
next batch the moment the fsync ends, so a busy broker does one fsync per disk round
trip with everything that arrived meanwhile in it. Edits come after the appends and the
fsync of their batch, so an edit never reaches a file before the record it changes. A
batch whose edits move live records elsewhere (a compaction's `#` flips, a dead-letter's
`!`) is `ordered` (`sync_before_edits`): its `interval` appends are synced before its edits
too, so those flips never reach a disk before the copies they point to. A new segment's
directory entry (and that of any directory made for it) is synced right after the
segment's first fdatasync. docs/durability.md is the whole argument.

A batch that fails (disk full, I/O error) is logged and tried again after `retry_delay`
seconds of the clock: its writes go to the same offsets (pwrite), so a retry rewrites
rather than duplicates, and no confirmation of it is released until it succeeds.
Every file is opened, written, synced, renamed and closed on the worker thread only,
through `files` (bridge.journal.files: the one layer every change to the disk goes through).
"""
import os
import time
from functools import partial

from twisted.internet import threads
from twisted.logger import Logger

from mqksbridge.bridge.journal.files import Files, parents_of
from mqksbridge.bridge.journal.layout import segment_name

log = Logger(namespace="mqksbridge.journal")

ALWAYS, INTERVAL, NEVER = "always", "interval", "never"
GAP = 64 << 10          # edits closer than this are written as one span (patch)


class Segment:
    """One segment file. The reactor side owns `end` (where the next record goes,
    pending bytes included), `live`/`live_bytes` (records not settled) and `retired`;
    the worker thread owns `fd` and `created` (the directories whose entries making
    the file changed and that are not synced yet: its own, and the parent of each
    directory made for it)."""

    __slots__ = ("directory", "number", "path", "created_ms", "policy", "end", "live",
                 "live_bytes", "retired", "fd", "created")

    def __init__(self, directory, number, created_ms, policy, end=0):
        self.directory = directory
        self.number = number
        self.path = os.path.join(directory, segment_name(number))
        self.created_ms = created_ms
        self.policy = policy
        self.end = end
        self.live = 0
        self.live_bytes = 0
        self.retired = False
        self.fd = None
        self.created = ()

    def open(self, files):
        """Worker thread: the file descriptor, creating the file on first use."""
        if self.fd is None:
            try:
                self.fd = files.open(self.path)
            except FileNotFoundError:
                made = files.makedirs(self.directory)
                self.fd = files.open(self.path, create=True)
                self.created = [self.directory, *reversed(parents_of(made))]
        return self.fd

    def close(self, files):
        if self.fd is not None:
            files.close(self.fd)
            self.fd = None

    def __repr__(self):
        return f"Segment({self.path!r}, end={self.end}, live={self.live})"


def patch(files, fd, edits, max_gap=GAP):
    """Worker thread: in-place `edits` ((offset, bytes), in the order made) of one file as
    one pread and one pwrite per cluster of edits less than `max_gap` apart, instead of a
    pwrite each: a batch settles thousands of records, and each syscall hands the GIL to
    a busy reactor thread and waits to get it back. The bytes between edits are on disk
    already (a batch's appends go first) and only this thread writes journals, so the
    file ends up exactly as writing each edit in order would (tests hold it equal)."""
    if len(edits) == 1:
        offset, data = edits[0]
        files.pwrite(fd, data, offset)
        return
    cluster, end = [], 0
    for i in sorted(range(len(edits)), key=lambda i: edits[i][0]):
        offset, data = edits[i]
        if cluster and offset - end > max_gap:
            _patch_cluster(files, fd, edits, cluster)
            cluster = []
        end = offset + len(data) if not cluster else max(end, offset + len(data))
        cluster.append(i)
    _patch_cluster(files, fd, edits, cluster)


def _patch_cluster(files, fd, edits, cluster):
    start = edits[cluster[0]][0]
    stop = max(edits[i][0] + len(edits[i][1]) for i in cluster)
    if len(cluster) == 1:
        files.pwrite(fd, edits[cluster[0]][1], start)
        return
    span = bytearray(os.pread(fd, stop - start, start))
    if len(span) < stop - start:                # an edit past the end: as written one by one
        for i in sorted(cluster):
            files.pwrite(fd, edits[i][1], edits[i][0])
        return
    for i in sorted(cluster):                   # in the order made: later edits win
        offset, data = edits[i]
        span[offset - start:offset - start + len(data)] = data
    files.pwrite(fd, span, start)


class Batch:
    __slots__ = ("appends", "edits", "after", "seq", "sync_interval", "records", "journals",
                 "ordered")

    def __init__(self):
        self.journals = []          # journals with staged records, encoded as it starts
        self.appends = {}           # Segment -> [offset of the first record, parts...]
        self.edits = []             # (Segment, offset, bytes)
        self.after = []             # callables for the worker thread, after the edits
        self.seq = 0                # storage sequence number of the last record
        self.sync_interval = False  # fdatasync every `interval` segment written since
        self.ordered = False        # fdatasync this batch's `interval` appends before its edits
        self.records = 0

    def __bool__(self):
        return bool(self.journals or self.appends or self.edits or self.after
                    or self.sync_interval)


class GroupWriter:
    """The one writer of every journal (module docstring). `storage` is the broker's
    StorageBarrier, `pool` a started ThreadPool (one thread: batches run in order),
    `fsync_observer(seconds)` is told each fdatasync's time (the admin histogram)."""

    def __init__(self, storage, reactor, pool, clock=None, fsync_observer=None,
                 retry_delay=1.0, run=None, files=None):
        self.storage = storage
        self.files = files or Files()   # every change to the disk goes through it
        # run(work, batch) -> Deferred: the worker thread (a test may run it inline)
        self.run = run or partial(threads.deferToThreadPool, reactor, pool)
        self.reactor = reactor
        self.clock = clock or reactor
        self.pool = pool
        self.fsync_observer = fsync_observer
        self.retry_delay = retry_delay
        self.pending = Batch()
        self.in_flight = None       # the Batch being written, or None
        self.interval_segments = set()
        self.failures = 0
        self.batches = self.fsyncs = self.bytes = 0
        self._call = None
        self._idle = []             # Deferreds waiting for nothing pending (flush)
        self._retry = None
        self.closed = False

    # -- the reactor side: journals call these -------------------------------------------
    def append(self, segment, data):
        """Queue `data` (whole records that confirm nothing: a header, a compaction copy)
        for the end of `segment`; returns the offset it goes to."""
        pending = self.pending
        offset = segment.end
        parts = pending.appends.get(segment)
        if parts is None:
            pending.appends[segment] = [offset, data]
        else:
            parts.append(data)
        segment.end = offset + len(data)
        self._schedule()
        return offset

    def stage(self, journal):
        """`journal` holds staged records (QueueJournal.put): it encodes and appends them
        (`journal.encode()`) when the next batch starts, each taking a storage sequence
        number as it was staged."""
        self.pending.journals.append(journal)
        if self._call is None:
            self._schedule()

    def append_records(self, segment, data, records):
        """Queue `data`, encoded message records (`records` of them), for the end of
        `segment` (their storage sequence numbers were taken when they were staged)."""
        pending = self.pending
        pending.records += records
        parts = pending.appends.get(segment)
        if parts is None:
            pending.appends[segment] = [segment.end, data]
        else:
            parts.append(data)
        segment.end += len(data)

    def edit(self, segment, offset, data):
        self.pending.edits.append((segment, offset, data))
        self._schedule()

    def after(self, work):
        """Run `work()` on the worker thread after the next batch's writes and edits."""
        self.pending.after.append(work)
        self._schedule()

    def sync_before_edits(self):
        """The pending batch's edits take live records away from where they are (a
        compaction's `#` flips, a dead-letter's `!`) to records it appends elsewhere:
        those appends are synced before the edits are written, under `interval` too
        (`always` syncs them anyway, `never` never syncs)."""
        self.pending.ordered = True

    def sync_interval(self):
        """The `interval` policy's tick: the next batch syncs what they wrote since."""
        self.pending.sync_interval = True
        self._schedule()

    def _schedule(self):
        if self._call is None and self.in_flight is None and self._retry is None:
            self._call = self.reactor.callLater(0, self.commit)

    def commit(self):
        """Start the pending batch on the worker thread (unless one is in flight)."""
        self._call = None
        if self.in_flight is not None or self._retry is not None or not self.pending:
            if not self.pending and self.in_flight is None:
                self._release_idle()
            return
        self.prepare()
        batch, self.pending = self.pending, Batch()
        self._start(batch)

    def prepare(self):
        """Encode the staged records of the pending batch into its appends, and let it
        release every storage sequence number taken so far."""
        pending = self.pending
        journals, pending.journals = pending.journals, []
        for journal in journals:
            journal.staged = False
            journal.encode()
        pending.seq = self.storage.appended

    def _start(self, batch):
        self.in_flight = batch
        d = self.run(self._write, batch)
        d.addCallbacks(self._written, self._failed, errbackArgs=(batch,))

    def _written(self, fsyncs):
        batch, self.in_flight = self.in_flight, None
        self.batches += 1
        self.fsyncs += fsyncs
        if batch.seq:
            self.storage.stored(batch.seq)
        self.commit()

    def _failed(self, failure, batch):
        self.failures += 1
        log.failure("journal batch failed ({n} records); no confirmation of it is sent, "
                    "trying again in {delay}s", failure, n=batch.records,
                    delay=self.retry_delay)
        self.in_flight = None
        self._retry = self.clock.callLater(self.retry_delay, self._again, batch)

    def _again(self, batch):
        self._retry = None
        # What arrived since rides along: it goes after the failed batch's records.
        self.prepare()
        later, self.pending = self.pending, Batch()
        for segment, parts in later.appends.items():
            mine = batch.appends.get(segment)
            if mine is None:
                batch.appends[segment] = parts
            else:
                mine += parts[1:]
        batch.edits += later.edits
        batch.after += later.after
        batch.seq = max(batch.seq, later.seq)
        batch.sync_interval |= later.sync_interval
        batch.ordered |= later.ordered
        batch.records += later.records
        self._start(batch)

    def flush(self):
        """A Deferred that fires once nothing is pending or in flight (stopService)."""
        from twisted.internet import defer
        if not self.pending and self.in_flight is None and self._retry is None:
            return defer.succeed(None)
        d = defer.Deferred()
        self._idle.append(d)
        self._schedule()
        return d

    def _release_idle(self):
        idle, self._idle = self._idle, []
        for d in idle:
            d.callback(None)

    # -- the worker thread ---------------------------------------------------------------
    def _write(self, batch):
        """Appends, syncs, edits, then the queued file work; returns the fsync count."""
        files = self.files
        synced = {}                             # in order, each segment once
        ordered = batch.ordered
        for segment, parts in batch.appends.items():
            fd = segment.open(files)
            data = parts[1] if len(parts) == 2 else b"".join(parts[1:])
            files.pwrite(fd, data, parts[0])
            self.bytes += len(data)
            policy = segment.policy
            if policy == ALWAYS:
                synced[segment] = None
            elif policy == INTERVAL:
                if ordered:                     # its edits move records here: sync first
                    synced[segment] = None
                    self.interval_segments.discard(segment)
                else:
                    self.interval_segments.add(segment)
        if batch.sync_interval:
            synced.update(dict.fromkeys(s for s in self.interval_segments if s.fd is not None))
            self.interval_segments.clear()
        fsyncs = 0
        directories = {}
        for segment in synced:
            start = time.perf_counter()
            files.fdatasync(segment.fd)
            fsyncs += 1
            if self.fsync_observer is not None:
                self.fsync_observer(time.perf_counter() - start)
            if segment.created:
                directories.update(dict.fromkeys(segment.created))
                segment.created = ()
        for directory in directories:
            files.sync_directory(directory)
        by_segment = {}
        for segment, offset, data in batch.edits:
            if segment.fd is not None:          # an archived segment takes no more edits
                by_segment.setdefault(segment, []).append((offset, data))
        for segment, edits in by_segment.items():
            patch(files, segment.fd, edits)
        for work in batch.after:
            work()
        return fsyncs
