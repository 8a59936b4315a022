"""Inbox files: every `-` record of `*.tq` in an inbox directory is published once, then
flipped to `=` (taken) or `!` (refused, the reason in `\\error=` when the writer left room).

A file is read a chunk per reactor turn (`files.CHUNK`, scanned by the codec's bulk reader,
so a file of any size costs a chunk of memory). The records of a chunk are published
together; their flips wait until the broker has them (`broker.storage`: on disk when a
durable queue took one, at once otherwise), and are then written as one merged `pwrite`
per run of records while the file's `flock` is held. The mark is the checkpoint: after a
restart the file is read again and only `-` records are published.

The record a file ends with is taken only once it is complete: a later record or a blank
line follows it, or its last line ended and the writer closed the file or moved it into the
directory (inotify) or the file stayed unchanged for the grace time, and no writer holds
the lock. Records without an id get `tq-<tag>-<offset>`, the tag naming this file
incarnation (`files.tag`), so a record published again after a crash carries the same id;
the id also goes into an empty `\\i=` the writer reserved room in.

A file replaced while the broker reads it (`sed -i`, an editor: a new inode under the same
name) is read anew from the start; its `-` records that match a record settled in the last
`match_window` records of the old file (same body and variables, ids given by the door
aside) get that record's mark instead of being published again.
"""
import os
from bisect import bisect_right
from collections import deque
from functools import partial

from twisted.logger import Logger

from mqksbridge.bridge.convert import textqueue as convert
from mqksbridge.bridge.engine import Client, Message
from mqksbridge.bridge.textqueue import files, targets
from mqksbridge.protocols.textqueue import (
    ORPHAN, Edit, Incomplete, Record, TextQueueError, Variable, edit_key, flip,
    flip_queued, merge_edits, one_line_body, record_start, rewrite, scan)

log = Logger(namespace="mqksbridge.textqueue")

DOOR = convert.DOOR
MAX_WAITING = 16            # chunks published and not yet flipped, per file
MAX_MATCH_BYTES = 16 << 20  # of the old file read (in one turn) to match a replaced file
LOG_PER_POLL = 10           # refusals logged one by one per file between two polls
ERROR_LOOK = 4096           # last bytes of a record too long to read searched for \error=
_DASH, _TAKEN, _REFUSED = 0x2D, b"=", b"!"
ASSIGNED = b"tq-"           # how the ids this door writes into room begin (edit_key)


class InboxFile:
    """One inbox file: reading, publishing, flipping; `work()` is one reactor turn's step."""

    def __init__(self, door, path, target):
        self.door = door
        self.path = path
        self.name = os.path.basename(path)
        self.target = target
        self.sender = self.name
        self.fd = None
        self.ident = None
        self.tag = None
        self.pos = 0                     # next byte to read
        self.carry = b""                 # the record in progress at `pos`, from carry_at
        self.carry_at = 0
        self.skip = None                 # inside bytes dropped (an over-long record, orphan
        #                                  lines): where a record may start in the next
        #                                  chunk (1: it begins mid-line, 0: at a line)
        self.too_long = None             # offset of a refused record whose end, where
        #                                  its \error= is, is not read yet
        self.changed_at = door.clock.seconds()
        self.closed_size = -1            # the file's size when a writer last closed it
        self.waiting = 0                 # published chunks waiting for the storage barrier
        self.ready = []                  # lists of edits to write (merged)
        self.window = deque()            # (first offset, records) of recent chunks
        self.windowed = 0
        self.matches = None              # after a replacement: key -> deque of outcomes
        self.match_end = None            # ... for records up to this offset (once known)
        self.state = "open"              # open | replacing | gone
        self.paused = False              # held (flow control, memory, shutdown)
        self.polls = 0
        self.published = self.refused = self.lock_busy = 0
        self._logged = 0
        self._taken = None               # the run being published, on a LateBarrier
        client = self.client = Client(f"textqueue:{path}", DOOR, name=self.name,
                                      type="textqueue", address=path, principal=door.principal)
        door.broker.connect(client)
        self.traffic = door.traffic.open(path, self, None, self.goodbye)
        self.traffic.client = client
        client.input = self.traffic.input    # flow holds among the other reasons (bridge.inputs)

    def open(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        self.ident = files.identity(self.fd)

    # -- flow control (core.flow) and shutdown: the file's "input" -----------------------
    def pauseProducing(self):
        self.paused = True

    def resumeProducing(self):
        self.paused = False
        self.door.dirty(self)

    # -- one turn's work ----------------------------------------------------------------
    def work(self) -> bool:
        """Write flips that are due, then read and publish one chunk (or take the last
        record when it is complete). True when there is more to do at once."""
        if self.ready:
            self._write_ready()
        if self.state == "replacing":
            return self._replace()
        if (self.state != "open" or self.paused
                or self.waiting + len(self.ready) >= MAX_WAITING):
            return False                 # (flips wait for the disk or for a writer's lock)
        data = os.pread(self.fd, max(files.CHUNK, len(self.carry)), self.pos)
        if data:
            self.changed_at = self.door.clock.seconds()
            self._chunk(data)
            return True
        if self.matches is not None:     # the replaced file is read to its end: only
            if self.match_end is None:   # the record in progress then may still match
                self.match_end = self.carry_at if self.carry else -1
            if not self.carry or self.carry_at > self.match_end:
                self.matches = None      # forget the old file
        if self._tail_due() and files.try_lock(self.fd):
            files.unlock(self.fd)        # a writer holding the lock is still writing
            tail = Incomplete(self.carry_at, self.carry).record()
            self.carry = b""
            self.carry_at = self.pos
            self._publish([tail.offset], [tail.raw], tail.raw[:1], tail.raw + b"\n",
                          tail.offset)
            return True                  # its flip, next turn
        return False

    def _tail_due(self):
        """The last record is complete: its last line ended, and the writer closed the
        file after writing it (our own flips change no size), or the grace time passed."""
        return (self.carry.endswith(b"\n") and (
            self.closed_size == self.pos
            or self.door.clock.seconds() - self.changed_at >= self.door.grace))

    def _chunk(self, data):
        base = self.carry_at if self.carry else self.pos
        buffer = self.carry + data if self.carry else data
        self.pos += len(data)
        self.traffic.bytes_in += len(data)
        if self.skip is not None:        # the rest of what was dropped: up to a record
            start = record_start(buffer, self.skip)
            if start is None:
                self.skip = 0 if buffer.endswith(b"\n") else 1
                self.carry_at = self.pos
                return
            self.skip = None
            if self.too_long is not None:   # the record refused for its size ends here
                edit = self._error_room(self.too_long, base + start)
                if edit is not None:     # (the flip of the chunk it began in is before)
                    self.ready.append([edit])
                self.too_long = None
            buffer, base = buffer[start:], base + start
        found = scan(buffer, base, self.door.max_record)
        tail = found.incomplete
        self.carry, self.carry_at = (tail.data, tail.offset) if tail else (b"", self.pos)
        if tail is None and not buffer.endswith(b"\n"):
            self.skip = 1                # a dropped line goes on in the next chunk
        edits = []
        if found.damages:
            self._damaged(found, buffer, base, edits)
        self._publish(found.offsets, found.raws, found.controls, buffer, base, edits)

    def _damaged(self, found, buffer, base, edits):
        """Orphan lines are logged; a `-` record over max_record is refused, and its
        reason written into its `\\error=` once its end (the next record) is read."""
        for offset, kind in found.damages:
            if kind == ORPHAN:
                log.warn("textqueue: {file} at {offset}: lines that belong to no record "
                         "(skipped)", file=self.path, offset=offset)
                continue
            if buffer[offset - base] != _DASH:
                continue
            edits.append(Edit(offset, _REFUSED))
            self._refuse(offset, f"record over {self.door.max_record} bytes")
            end = _next_start(found, offset)
            if end is None:              # dropped at the chunk's end: the rest is skipped
                self.too_long = offset
                if self.skip is None:
                    self.skip = 0
                continue
            edit = self._error_room(offset, end)
            if edit is not None:
                edits.append(edit)

    def _error_room(self, offset, end):
        """The edit writing why into the `\\error=` room of the record at `offset`, too
        long to keep, that the next record (at `end`) follows: variables end a record, so
        its last bytes hold it (before a blank line, which ends it too)."""
        start = max(offset, end - ERROR_LOOK)
        data = os.pread(self.fd, end - start, start)
        blank = min((i for i in (data.find(b"\n\n"), data.find(b"\n\r\n")) if i >= 0),
                    default=len(data))
        at = data.rfind(b"\n\\error=", 0, blank)
        line = data[at + 2:].partition(b"\n")[0].rstrip(b"\r")
        if at < 0 or not line.isascii():
            return None
        room = Variable(start + at + 1, line.decode())
        reason = f"record over {self.door.max_record} bytes"[:room.width].rstrip(" ")
        return rewrite(room, reason) if room.width else None

    # -- publishing -----------------------------------------------------------------------
    def _publish(self, offsets, raws, controls, buffer, base, edits=None):
        """Publish the `-` records of a run (a chunk, or the last record), then flip them
        once the broker has them. A run of plain records all taken (the usual case) is
        flipped by one `flip_queued` edit; anything else by merged per-record edits."""
        i = controls.find(_DASH)
        if i < 0 and not edits:
            return
        edits = [] if edits is None else edits
        door = self.door
        broker = door.broker
        storage = broker.storage
        before = storage.appended
        kind, name = self.target
        put, direct = self._putter(kind, name)
        if storage.late:                 # note each record's span: the cluster may refuse it
            taken = self._taken = _Taken(storage)
            put, direct = taken.wrap(put), taken.wrap(direct)
        else:
            taken = []
        prefix = f"{ASSIGNED.decode()}{self.tag or self._tag()}-"
        sender, now, matches = self.sender, door.clock.seconds(), self.matches
        match_end = self.match_end
        client = self.client             # whom flow control holds (core.flow)
        first = last = None
        count = 0
        body_of = one_line_body
        while i >= 0:
            raw, offset = raws[i], offsets[i]
            i = controls.find(_DASH, i + 1)
            count += 1
            if first is None:
                first = offset
            last = offset
            if matches is not None and (match_end is None or offset <= match_end) and \
                    self._matched(raw, offset, edits):
                continue
            body = body_of(raw)
            if body is None:
                self._record(Record(offset, raw), prefix + str(offset), now, edits)
                continue
            message = Message(prefix + str(offset), name, (body,), None, sender, DOOR,
                              "", False, None, now)
            if direct is not None:
                direct(message, None, client)
                taken.append(offset)
                continue
            reason = put(message)
            if reason is None:
                taken.append(offset)
            else:
                edits.append(Edit(offset, _REFUSED))
                self._refuse(offset, reason)
        self.published += count
        self.traffic.messages_in += count
        broker.counters["textqueue.published"] += count
        if count:
            self._remember(first, count)
        if not edits:
            batch = [flip_queued(buffer, base, first, last)]
        else:
            edits += [Edit(offset, _TAKEN) for offset in taken]
            batch = merge_edits(edits, buffer, base)
        after = storage.appended
        self._taken = None
        if after == before:
            self.ready.append(batch)
        elif taken.__class__ is _Taken:
            self.waiting += 1
            storage.when_stored(after, partial(self._stored_late, batch, edits, taken), before)
        else:
            self.waiting += 1
            storage.when_stored(after, partial(self._stored, batch))

    def _putter(self, kind, name):
        """(put, direct) for a run of records to the file's target: `direct` is the
        queue's own put_message when nothing can refuse (the hot path), else None."""
        publisher = self.door.publisher
        if kind != targets.QUEUE:
            return partial(publisher.put, self.target, client=self.client), None
        queue = self.door.broker.queues.get(name)
        if queue is not None and not queue.limited:
            return None, queue.put_message
        return publisher.queue_put(name, self.client), None

    def _record(self, record, made_id, now, edits):
        """Any record but a plain one: variables, several lines, `\\to=`."""
        try:
            inbound = convert.inbound(record, self.sender, now)
        except TextQueueError as exc:
            return self._refused(record, f"bad record: {exc}", record.variable(convert.ERROR),
                                 edits)
        target = self.target
        if inbound.to is not None:
            target = targets.parse(inbound.to)
            if target is None:
                return self._refused(record, "empty \\to=", inbound.error, edits)
        message = inbound.message
        if not message.id:
            message.id = made_id
            room = inbound.id_room
            if room is not None and len(made_id) <= room.width:
                edits.append(rewrite(room, made_id))
        taken, put = self._taken, self.door.publisher.put
        if taken is not None:
            put = taken.wrap(put)
        reason = put(target, message, self.client)
        if reason is not None:
            return self._refused(record, reason, inbound.error, edits)
        if taken is not None:
            taken.spans[record.offset] = taken.span
        edits.append(flip(record, "="))

    def _refused(self, record, reason, error, edits):
        edits.append(Edit(record.offset, _REFUSED))
        if error is not None and error.width:
            text = reason.encode("ascii", "backslashreplace")[:error.width].decode()
            edits.append(rewrite(error, text.rstrip(" ")))
        self._refuse(record.offset, reason)

    def _refuse(self, offset, reason):
        self.refused += 1
        self.door.broker.counters["textqueue.refused"] += 1
        self._logged += 1
        if self._logged <= LOG_PER_POLL:
            log.warn("textqueue: {file} at {offset}: refused, {reason}", file=self.path,
                     offset=offset, reason=reason)

    def _tag(self):
        first = os.pread(self.fd, 258, 0).partition(b"\n")[0]
        self.tag = files.tag(self.ident, first[1:])
        return self.tag

    def _stored(self, batch):
        self.waiting -= 1
        self.ready.append(batch)
        self.door.dirty(self)

    def _stored_late(self, batch, edits, taken):
        """_stored on a LateBarrier: the records whose puts the cluster refused after the
        door published them flip to `!` (as a synchronous refusal, without `\\error=`
        text), the rest as planned (unmerged edits: the chunk's bytes are gone)."""
        refused = taken.refused()
        if refused:
            gone = set(refused)
            batch = [edit for edit in edits if edit[0] not in gone]
            if not edits:                # the plain run's one flip_queued edit
                batch += [Edit(offset, _TAKEN) for offset in taken if offset not in gone]
            batch += [Edit(offset, _REFUSED) for offset in refused]
            for offset in refused:
                self._refuse(offset, "refused by the cluster after it was published")
        self._stored(batch)

    def _write_ready(self):
        """The flips of every chunk the broker has, as few pwrites, under the lock."""
        if not files.try_lock(self.fd):
            self.lock_busy += 1          # a writer holds it: the next poll tries again
            return False
        try:
            for edits in self.ready:
                files.write_edits(self.fd, edits)
        finally:
            files.unlock(self.fd)
        self.ready = []
        return True

    # -- a file replaced under the same name ------------------------------------------------
    def _remember(self, first, count):
        """Keep where the last `match_window` records were (offsets only: cheap)."""
        window = self.door.match_window
        if not window:
            return
        self.window.append((first, count))
        self.windowed += count
        while self.windowed - self.window[0][1] >= window:
            self.windowed -= self.window.popleft()[1]

    def _replace(self):
        """Once every flip of the old file is written: match what was settled there, then
        read the new file from its start."""
        if self.waiting or self.ready:
            return False
        matches = {}
        if self.window:
            start = max(self.window[0][0], self.carry_at - MAX_MATCH_BYTES)
            region = os.pread(self.fd, self.carry_at - start, start)
            if start > self.window[0][0]:     # cut inside a record: from the next one
                cut = record_start(os.pread(self.fd, 1, start - 1) + region, 1)
                cut = len(region) if cut is None else cut - 1
                region, start = region[cut:], start + cut
            found = scan(region, start, self.door.max_record)
            records = list(found.records())
            if found.incomplete is not None:
                records.append(found.incomplete.record())
            for record in records:
                if record.control in "=!":
                    error = record.variable(convert.ERROR)
                    matches.setdefault(edit_key(record.raw, ASSIGNED), deque()).append(
                        (record.control, error.value if error is not None else None))
        os.close(self.fd)
        self.fd = None
        try:
            self.open()
        except FileNotFoundError:
            return self.gone()
        log.info("textqueue: {file} was replaced: reading it anew, {n} settled records to "
                 "match", file=self.path, n=sum(map(len, matches.values())))
        self._restart(matches or None)
        return True

    def _restart(self, matches):
        self.pos = self.carry_at = 0
        self.closed_size = -1
        self.carry = b""
        self.skip = self.too_long = None
        self.tag = None
        self.window.clear()
        self.windowed = 0
        self.matches = matches
        self.match_end = None
        self.state = "open"

    def _matched(self, raw, offset, edits):
        """A record of the new file that was settled in the old one gets the same mark."""
        outcomes = self.matches.get(edit_key(raw, ASSIGNED))
        if not outcomes:
            return False
        control, error = outcomes.popleft()
        edits.append(Edit(offset, control.encode()))
        if control == "!" and error:
            var = Record(offset, raw).variable(convert.ERROR)
            if var is not None and len(error.encode()) <= var.width:
                edits.append(rewrite(var, error))
        return True

    # -- polling, replacement, the end -------------------------------------------------------
    def changed(self, closed):
        """inotify: the file was written (or closed by a writer)."""
        if closed and self.fd is not None:
            self.closed_size = os.fstat(self.fd).st_size
        self.door.dirty(self)

    def poll(self, now):
        """Every poll interval: new bytes, a replaced or truncated file, a tail that is
        due, flips waiting for the lock. Returns False once the file is gone."""
        self.polls += 1
        self._logged = 0
        if self.state != "open":
            return self.state != "gone"
        same = files.same_file(self.path, self.ident)
        if not same:
            if same is None and not (self.waiting or self.ready):
                return self.gone()
            self.state = "replacing"
            self.door.dirty(self)
            return True
        size = os.fstat(self.fd).st_size
        if size < self.pos:
            log.warn("textqueue: {file} was truncated: reading it anew", file=self.path)
            self._restart(None)
            self.door.dirty(self)
        elif size > self.pos or self.ready or (self.carry and self._tail_due()):
            self.door.dirty(self)
        elif self.door.settled_policy != "keep" and self._settled(now):
            return self._retire()
        return True

    def _settled(self, now):
        return (not self.carry and not self.waiting and not self.ready
                and now - self.changed_at >= self.door.settled_after)

    def _retire(self):
        """Archive or delete a file every record of which is settled (under its lock)."""
        if not files.try_lock(self.fd):
            return True
        try:
            if self.door.settled_policy == "delete":
                os.unlink(self.path)
            else:
                archive = os.path.join(os.path.dirname(self.path), "archive")
                os.makedirs(archive, exist_ok=True)
                stamp = int(self.door.clock.seconds() * 1000)
                os.rename(self.path, os.path.join(archive, f"{self.name}.{stamp}"))
        finally:
            files.unlock(self.fd)
        log.info("textqueue: {file} settled: {policy}", file=self.path,
                 policy=self.door.settled_policy + "d")
        return self.gone()

    def gone(self):
        self.state = "gone"
        self.goodbye()
        return False

    def goodbye(self):
        """Shutdown (or the file went away): flips that are ready are written, the file
        closed. A flip still waiting for the disk is lost with the process: the record is
        published again on the next start (at least once)."""
        if self.fd is not None:
            if self.ready:
                self._write_ready()
            os.close(self.fd)
            self.fd = None
        self.state = "gone"
        self.door.traffic.close(self.traffic)
        self.door.broker.disconnect(self.client)

    def abortConnection(self):
        self.ready = []
        self.goodbye()


def _next_start(found, offset):
    """Where the next record after `offset` in a scanned chunk starts (an over-long one,
    the one in progress at its end included), or None."""
    i = bisect_right(found.offsets, offset)
    ends = [found.offsets[i]] if i < len(found.offsets) else []
    ends += [d.offset for d in found.damages if d.offset > offset and d.kind != ORPHAN][:1]
    if found.incomplete is not None:
        ends.append(found.incomplete.offset)
    return min(ends, default=None)


class InboxDir(files.Directory):
    """One inbox directory: its `*.tq` files, found by listing it at every poll (and at
    once through inotify)."""

    def __init__(self, door, path):
        self.door = door
        self.path = path
        self.files = {}                  # name -> InboxFile
        self.failed = set()              # names that could not be opened (logged once)

    def scan(self, now):
        try:
            entries = sorted(os.scandir(self.path), key=lambda e: e.name)
        except FileNotFoundError:
            os.makedirs(self.path, exist_ok=True)
            self.door.watcher.watch(self.path)
            return
        names = set()
        for entry in entries:
            names.add(entry.name)
            if entry.name not in self.files and entry.name not in self.failed \
                    and entry.is_file():
                self.found(entry.name)
        self.failed &= names
        for name, file in list(self.files.items()):
            if not file.poll(now):
                if self.files.get(name) is file:
                    del self.files[name]

    def found(self, name):
        target = targets.of_file(name)
        if target is None:
            return None
        path = os.path.join(self.path, name)
        moved = self._renamed(path)
        if moved is not None:
            return moved
        file = InboxFile(self.door, path, target)
        try:
            file.open()
        except OSError as exc:
            log.warn("textqueue: cannot open {file}: {reason}", file=path, reason=exc)
            file.abortConnection()
            self.failed.add(name)
            return None
        self.files[name] = file
        self.door.dirty(file)
        return file

    def _renamed(self, path):
        """A file we read that was renamed within the directory keeps its state."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        for old_name, file in list(self.files.items()):
            if file.ident is not None and file.ident[:2] == (st.st_dev, st.st_ino) and \
                    files.same_file(file.path, file.ident) is None:
                del self.files[old_name]
                file.path, file.name = path, os.path.basename(path)
                file.target, file.sender = targets.of_file(file.name), file.name
                self.files[file.name] = file
                return file
        return None



class _Taken(list):
    """The offsets of a run's records the broker took, and the storage sequence numbers
    each put appended (`spans`), on a store that refuses late (core.storage LateBarrier)."""

    def __init__(self, storage):
        super().__init__()
        self.storage = storage
        self.spans = {}              # offset -> (appended before its put, after)
        self.span = None             # the last put's

    def wrap(self, put):
        """`put` noting its span (None stays None)."""
        if put is None:
            return None
        storage = self.storage

        def noted(*args):
            before = storage.appended
            result = put(*args)
            self.span = (before, storage.appended)
            return result
        return noted

    def append(self, offset):
        super().append(offset)
        self.spans[offset] = self.span

    def refused(self):
        """The offsets of the records a refused sequence number belongs to."""
        refused_in = self.storage.refused_in
        return [offset for offset, (lo, hi) in self.spans.items()
                if lo != hi and refused_in(lo, hi)]
