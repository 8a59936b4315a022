"""The two pagers of core.window on files: scratch segment files, and a durable queue's
own journal.

ScratchPager (a queue without a journal): what a lane pages out in one reactor turn is
one chunk; at the end of the turn (or at CHUNK entries) it is encoded as TextQueue
records (the journal's encoder) and appended to the queue's current scratch segment by
the spill's worker thread. Until the write is done the chunk keeps its entries, and a
page-in takes them from memory. Segments roll at `segment_size` and are removed once
nothing in them is paged any more. Scratch files are never fsynced: they hold nothing a
restart brings back (bridge.spill removes them at start).

JournalPager (a durable queue): its paged-out backlog is its journal. A paged-out entry
waits in memory until the journal has written its record (the broker's StorageBarrier
passes the sequence number it had then); then only its record's place stays (segment,
offset, size, retry count: 24 bytes), and a page-in reads the record back and gives the
entry its Slot again. Nothing is written twice.

Reading back never holds the reactor for long. Each lane reads ahead off the reactor
thread (the spill's reader thread): once a page-in reaches a lane's records on disk, the
next AHEAD of them (AHEAD_BYTES at most) are read and decoded there, and handed back at a
turn of the reactor as a small buffer in front of the lane's chunks; the queue is then
told (`ready`, its dispatch) so it can take them. A page-in takes the buffer and records
still in memory, TURN entries at most. Only when it must bring at least one entry and
nothing is buffered (the lane's resident part is empty: a consumer outran the reader) does
it read on the reactor thread, SYNC records at most (one pread of pages written moments
ago, which the page cache has). `page_in_ready` never reads on the reactor at all.

A read in flight covers the front of the lane's first chunk; the chunk still owns it, so
every other operation (a synchronous fallback read, a pull from the back, a purge) goes on
as if there were none, and what the read brings is kept only for the part still paged
when it lands (`chunk.head` to `chunk.tail`). The reader decodes PIECE records at a time
and skips what the reactor took meanwhile, so a consumer that outruns it does not have
the same records decoded twice. A chunk a read is still on is dropped (its
scratch file may go) only once the read is done.
"""
import os
from bisect import bisect_right
from collections import deque
from functools import partial
from itertools import accumulate

from twisted.logger import Logger

from mqksbridge.bridge.journal import layout
from mqksbridge.bridge.journal.files import Files
from mqksbridge.bridge.journal.store import Slot
from mqksbridge.bridge.spill.chunks import Chunk, extras_of, read_entries
from mqksbridge.core.window import Pager
from mqksbridge.protocols.textqueue import journal as records

_FILES = Files()       # scratch pages: whole writes, no ordering to keep
CHUNK = 4096          # entries of one chunk at most
TURN = 4096           # entries one page-in moves at most (one reactor turn's share)
AHEAD = 4096          # records a lane reads ahead off the reactor thread, at most
AHEAD_BYTES = 4 << 20  # and their bytes
SYNC = 256            # records read on the reactor when nothing is read ahead yet
PIECE = 512           # records the reader decodes before it looks whether they are wanted

log = Logger(namespace="mqksbridge.spill")


class _Read:
    """A read ahead in flight: records [start, stop) of the lane's first chunk."""

    __slots__ = ("lane", "chunk", "start", "stop", "release")

    def __init__(self, lane, chunk, start, stop):
        self.lane = lane
        self.chunk = chunk
        self.start = start
        self.stop = stop
        self.release = False      # the chunk left the lane meanwhile: drop it once done


class _Lanes(Pager):
    """What both pagers share: each lane a deque of Chunks (bridge.spill.chunks), behind
    the entries read ahead (module docstring)."""

    def __init__(self, spill, name, ready=None):
        self.spill = spill
        self.name = name
        self.ready = ready            # told (next turn) when a read ahead brought entries
        self.lanes = (deque(), deque())
        self.ahead = ([], [])         # entries read ahead, in front of the lane's chunks
        self.reading = [None, None]   # the lane's _Read in flight
        self.closed = False

    def _open_tail(self, lane):
        """The lane's last chunk when it still takes entries, else None."""
        raise NotImplementedError

    def page_out(self, lane, entries):
        chunks = self.lanes[lane]
        chunk = self._open_tail(chunks)
        if chunk is None or chunk.tail >= CHUNK:
            chunk = self._new_chunk()
            chunks.append(chunk)
        del chunk.entries[chunk.tail:]      # what a pull from the back took
        chunk.entries.extend(entries)
        chunk.tail += len(entries)
        self.spill.schedule(self)

    def page_in(self, lane, count):
        return self._page_in(lane, count, True)

    def page_in_ready(self, lane, count):
        return self._page_in(lane, count, False)

    def _page_in(self, lane, count, wait):
        """Up to `count` (TURN at most) from the front: what is read ahead, then what is
        in memory; with `wait` and nothing else, SYNC records read now."""
        count = min(count, TURN)
        ahead = self.ahead[lane]
        taken = ahead[:count]
        del ahead[:count]
        chunks = self.lanes[lane]
        while chunks and len(taken) < count:
            chunk = chunks[0]
            if chunk.entries is None:           # on disk: the reader thread's, unless
                if taken or not wait:           # the caller must have one now
                    break
                taken = self._read(chunk, *chunk.take(min(count, SYNC)))
            else:
                taken += self._read(chunk, *chunk.take(count - len(taken)))
            if not len(chunk):
                self._release(lane, chunks.popleft())
        self._read_ahead(lane)
        return taken

    def page_in_last(self, lane, count):
        chunks, taken = self.lanes[lane], []
        while chunks and len(taken) < count:
            chunk = chunks[-1]
            taken[:0] = self._read(chunk, *chunk.take(count - len(taken), last=True))
            if not len(chunk):
                self._release(lane, chunks.pop())
        ahead = self.ahead[lane]
        if len(taken) < count and ahead:
            part = ahead[max(0, len(ahead) - (count - len(taken))):]
            del ahead[len(ahead) - len(part):]
            taken[:0] = part
        return taken

    def peek(self, lane):
        yield from list(self.ahead[lane])
        for chunk in list(self.lanes[lane]):
            yield from self._read(chunk, chunk.head, chunk.tail)

    def close(self):
        self.closed = True
        for lane, chunks in enumerate(self.lanes):
            self.ahead[lane].clear()
            while chunks:
                chunk = chunks.popleft()
                chunk.head = chunk.tail
                self._release(lane, chunk)

    # -- reading ahead ---------------------------------------------------------------------
    def _release(self, lane, chunk):
        """`chunk` left the lane: drop it, or have its read in flight drop it when done."""
        read = self.reading[lane]
        if read is not None and read.chunk is chunk:
            read.release = True
        else:
            self._drop(chunk)

    def _read_ahead(self, lane):
        """Start reading the front of the lane's first chunk on the reader thread, when it
        is on disk, nothing is in flight and the buffer is short."""
        if self.reading[lane] is not None or len(self.ahead[lane]) >= AHEAD or self.closed:
            return
        chunks = self.lanes[lane]
        if not chunks or chunks[0].entries is not None:
            return
        chunk = chunks[0]
        start = chunk.head
        stop = min(chunk.tail, start + AHEAD)
        stop = max(start + 1, bisect_right(chunk.offsets, chunk.offsets[start] + AHEAD_BYTES,
                                           start, stop))
        read = self.reading[lane] = _Read(lane, chunk, start, stop)
        self.spill.read(self._read_pieces, chunk, start, stop).addCallbacks(
            self._ahead, self._ahead_failed, (read,), None, (read,))

    def _read_pieces(self, chunk, start, stop):
        """Reader thread: records [start, stop) of `chunk` as (first index, entries)
        pieces of PIECE, skipping what the reactor took meanwhile (`chunk.head` only
        grows; a stale look costs one piece read twice, never order)."""
        pieces = []
        while start < stop:
            start = max(start, chunk.head)
            if start >= stop:
                break
            end = min(stop, start + PIECE)
            pieces.append((start, self._read_placed(chunk, start, end)))
            start = end
        return pieces

    def _ahead(self, pieces, read):
        """Reactor: keep what is still paged of what the read brought."""
        lane, chunk = read.lane, read.chunk
        self.reading[lane] = None
        if read.release:
            self._drop(chunk)
            return
        landed = False
        for first, entries in pieces:
            start, stop = chunk.head, min(first + len(entries), chunk.tail)
            if stop > start:
                self.ahead[lane].extend(entries[start - first:stop - first])
                chunk.head = stop
                landed = True
        if landed:
            if not len(chunk):
                self._drop(self.lanes[lane].popleft())
            self.spill.wake(self)
        self._read_ahead(lane)

    def _ahead_failed(self, failure, read):
        """A failed read ahead: page-ins read on the reactor (and fail there, if the file
        is gone) until one succeeds."""
        self.reading[read.lane] = None
        if read.release:
            self._drop(read.chunk)
        elif not self.closed:
            log.failure("spill: reading ahead in {name} failed", failure, name=self.name)

    def wake(self):
        """Next turn after a read ahead landed: the queue may take it now."""
        if not self.closed and self.ready is not None:
            self.ready()

    def counts(self):
        """(entries in memory, entries on disk) paged out, both lanes."""
        memory, disk = len(self.ahead[0]) + len(self.ahead[1]), 0
        for chunks in self.lanes:
            for chunk in chunks:
                if chunk.entries is None:
                    disk += len(chunk)
                else:
                    memory += len(chunk)
        return memory, disk

    def _new_chunk(self):
        return Chunk([])

    def _read(self, chunk, start, stop):
        if start == stop:
            return []
        if chunk.entries is not None:
            return chunk.entries[start:stop]
        return self._read_placed(chunk, start, stop)

    def _read_placed(self, chunk, start, stop):
        raise NotImplementedError

    def _drop(self, chunk):
        """A chunk nothing is paged in any more."""


class SpillFile:
    """One scratch segment: the reactor owns `end`, `chunks` (not dropped yet) and
    `sealed`; the worker thread owns `fd`."""

    __slots__ = ("path", "directory", "created_ms", "end", "chunks", "sealed", "fd")

    def __init__(self, directory, number, created_ms):
        self.directory = directory
        self.path = os.path.join(directory, layout.segment_name(number))
        self.created_ms = created_ms
        self.end = 0
        self.chunks = 0
        self.sealed = False
        self.fd = None

    def write(self, data, offset):
        """Worker thread."""
        if self.fd is None:
            os.makedirs(self.directory, exist_ok=True)
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        _FILES.pwrite(self.fd, data, offset)

    def remove(self):
        """Worker thread, after every write to it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class ScratchPager(_Lanes):
    """A queue without a journal: its backlog in scratch segment files (module docstring)."""

    def __init__(self, spill, name, ready=None, folder=""):
        super().__init__(spill, name, ready)
        self.directory = os.path.join(spill.root, folder, layout.queue_directory(name))
        self.file = None
        self.number = 0
        self.writing = {}             # id(chunk) -> chunk, encoded and not yet written

    def _open_tail(self, chunks):
        if chunks:
            chunk = chunks[-1]
            if chunk.entries is not None and id(chunk) not in self.writing:
                return chunk
        return None

    def flush(self):
        """End of the turn: write every chunk that is still only in memory (the ones a
        turn filled to CHUNK, its last one, and any whose write failed)."""
        writing = self.writing
        for chunks in self.lanes:
            for chunk in chunks:
                if chunk.entries is not None and id(chunk) not in writing and len(chunk):
                    self._write(chunk)

    def _write(self, chunk):
        file = self.file
        if file is None or file.end >= self.spill.segment_size:
            file = self._roll()
        entries = chunk.entries
        messages = [e.message for e in entries]
        stamp = self.spill.clock.seconds()
        for message in messages:
            if not message.created_at:
                message.created_at = stamp
        data, sizes = records.encode_batch(messages, file.created_ms, [e.retry for e in entries])
        offset = file.end
        file.end += len(data)
        file.chunks += 1
        chunk.bytes = len(data)
        offsets = list(accumulate(sizes[:-1], initial=offset))
        extras = {}
        for i, entry in enumerate(entries):
            extra = extras_of(entry)
            if extra is not None:
                extras[i] = extra
        self.writing[id(chunk)] = chunk
        self.spill.write(file, data, offset, lambda: self._written(chunk, file, offsets, sizes,
                                                                  extras),
                         lambda: self._unwritten(chunk, file))

    def _written(self, chunk, file, offsets, sizes, extras):
        del self.writing[id(chunk)]
        chunk.bytes = 0
        if len(chunk):
            chunk.placed(file, offsets, sizes, None, extras)
        else:                               # all paged in (or closed) while it was written
            chunk.entries = None
            file.chunks -= 1
            self._maybe_remove(file)

    def _unwritten(self, chunk, file):
        """The write failed (a full disk): the chunk stays in memory (`bytes` set: it goes
        again at the next flush)."""
        del self.writing[id(chunk)]
        file.chunks -= 1
        self._maybe_remove(file)

    def _roll(self):
        if self.file is not None:
            self.file.sealed = True
            self._maybe_remove(self.file)
        self.number += 1
        self.file = SpillFile(self.directory, self.number,
                              round(self.spill.clock.seconds() * 1000))
        header = records.encode_header(self.name, self.number, self.file.created_ms)
        self.file.end = len(header)
        self.spill.write(self.file, header, 0)
        return self.file

    def _read_placed(self, chunk, start, stop):
        return read_entries(chunk, start, stop)

    def _drop(self, chunk):
        file = chunk.source
        if file is None:                    # in memory: never written, or _written sees to it
            return
        file.chunks -= 1
        self._maybe_remove(file)

    def _maybe_remove(self, file):
        """Remove a segment nothing is paged in any more (the current one too: the next
        page out starts a new one)."""
        if file.chunks <= 0 and (file.sealed or file is self.file):
            if file is self.file:
                self.file = None
            file.sealed = True
            self.spill.remove(file)

    def close(self):
        super().close()
        if self.file is not None:
            self._maybe_remove(self.file)


class JournalPager(_Lanes):
    """A durable queue: its backlog is its journal (module docstring)."""

    def __init__(self, spill, name, storage, writer, ready=None):
        super().__init__(spill, name, ready)
        self.storage = storage
        self.writer = writer          # the journal's GroupWriter: what it has yet to write

    def _open_tail(self, chunks):
        if chunks and chunks[-1].entries is not None:
            return chunks[-1]
        return None

    def page_out(self, lane, entries):
        super().page_out(lane, entries)
        self.lanes[lane][-1].seq = self.storage.appended

    def flush(self):
        """Each chunk whose records the journal has written keeps only their places."""
        durable = self.storage.durable
        waiting = 0
        for chunks in self.lanes:
            i = 0
            while i < len(chunks):
                chunk = chunks[i]
                if chunk.entries is not None and len(chunk):
                    if chunk.seq <= durable:
                        i += self._place(chunks, i, chunk)
                        continue
                    waiting = max(waiting, chunk.seq)
                i += 1
        if waiting:
            self.storage.when_stored(waiting, lambda: self.spill.schedule(self))

    def _place(self, chunks, i, chunk):
        """Place chunk i, split in runs of one segment each; returns how many chunks it
        became (1 and unplaced when some record is not in the journal)."""
        entries = chunk.entries[chunk.head:chunk.tail]
        if not all(type(e.record) is Slot for e in entries):
            return 1
        if not all(map(self._on_disk, entries)):  # a copy the journal moved it to, unwritten
            self.storage.when_stored(self.storage.appended, lambda: self.spill.schedule(self))
            return 1
        runs, start = [], 0
        for k in range(1, len(entries) + 1):
            if k == len(entries) or entries[k].record.segment is not entries[start].record.segment:
                runs.append(entries[start:k])
                start = k
        for n, run in enumerate(runs):
            part = chunk if n == 0 else Chunk([])
            part.head, part.tail = 0, len(run)
            extras = {}
            for j, entry in enumerate(run):
                extra = extras_of(entry, entry.record)
                if extra is not None:
                    extras[j] = extra
            slots = [e.record for e in run]
            part.placed(slots[0].segment, [s.offset for s in slots], [s.size for s in slots],
                        [e.retry for e in run], extras)
            if n:
                chunks.insert(i + n, part)
        return len(runs)

    def page_out_placed(self, lane, segment, offsets, sizes, retries):
        """Records of a segment recovery left in the journal (bridge.journal.recovery's
        runs), in chunks of CHUNK."""
        chunks = self.lanes[lane]
        for start in range(0, len(offsets), CHUNK):
            stop = start + CHUNK
            chunk = Chunk([])
            chunk.placed(segment, offsets[start:stop], sizes[start:stop], retries[start:stop])
            chunk.tail = len(chunk.offsets)
            chunks.append(chunk)

    def _on_disk(self, entry):
        """Whether the writer has written the entry's record (none of its batches, pending
        or in flight, appends to that segment at or before it)."""
        slot = entry.record
        writer = self.writer
        for batch in (writer.pending, writer.in_flight):
            if batch is not None:
                parts = batch.appends.get(slot.segment)
                if parts is not None and slot.offset >= parts[0]:
                    return False
        return True

    def _read_placed(self, chunk, start, stop):
        return read_entries(chunk, start, stop, partial(Slot, chunk.source))
