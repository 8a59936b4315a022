"""Outbox files: the broker consumes a queue into a file, a worker marks what it did.

Each outbox file is one core Consumer of its queue (manual ack, competing fairly with the
queue's consumers behind other doors), with as much credit as the file may hold unsettled
records. A turn's deliveries are appended in one write: a `-` record each
(`convert.textqueue.outbound`: the journal's fields, the retry count, room in `\\error=`).

A worker acknowledges by flipping a record to `=` (or `#`: dropped), rejects by flipping it
to `!` with its reason in `\\error=`: the message goes back to its queue with retry + 1.
The door finds the flips by reading only the status bytes of the records still unsettled
(at known offsets, a `pread` per run of them), whenever inotify says the file changed and at
every poll. A file that is large and fully settled is renamed `NAME.000001` (the next
number), a new one begins, and only the newest `retain` renamed files are kept.

A file replaced under the door (`sed -i`, an editor) or truncated is read anew, and its
records are matched to the unsettled deliveries by id: a match takes its mark from the new
file; a delivery the new file lost is appended again. When the door starts on a file that
exists, it remembers the ids in it, so a message delivered again (a redelivery after a
restart) is matched to its record instead of being appended twice.
"""
import os
import re
import urllib.parse
from collections import OrderedDict
from operator import itemgetter

from twisted.logger import Logger

from mqksbridge.bridge.convert import textqueue as convert
from mqksbridge.bridge.engine import Client, Consumer
from mqksbridge.bridge.textqueue import files, targets
from mqksbridge.protocols.textqueue import (
    DEFAULT_MAX_RECORD, journal, record_start, scan)

log = Logger(namespace="mqksbridge.textqueue")

DOOR = convert.DOOR
RUN_GAP = 64 << 10          # unsettled records closer than this are read in one pread
RUN_BYTES = 1 << 20         # ... up to this many bytes at once
MAX_RECORD = DEFAULT_MAX_RECORD  # longest record read back (ours: a 64 MiB message fits)
_DASH = 0x2D


def header(queue):
    """The comment an outbox file starts with: what it is, and which queue fills it."""
    name = urllib.parse.quote(queue, safe="", errors="surrogateescape").encode()
    return (b"#mqksbridge outbox of queue %s: mark a record = when done, ! when it failed"
            b" (reason in \\error=)\n\\queue=%s\n" % (name, name))


class Pending:
    """One delivery in the file: its core entry, where its record and its `\\error=`
    value are."""
    __slots__ = ("entry", "offset", "error")

    def __init__(self, entry, offset, error):
        self.entry, self.offset, self.error = entry, offset, error


class OutboxFile:
    """One outbox file and its consumer. `owned`: the file was made by a worker in an
    outbox directory, and removing it unsubscribes; a configured file is made again."""

    def __init__(self, door, queue, path, owned=False):
        self.door = door
        self.queue = queue
        self.path = path
        self.owned = owned
        self.fd = None
        self.ident = None
        self.size = 0
        self.consumer = None
        self.credit = door.credit        # unsettled records the file holds at most
        self.batch = []                  # entries to append this turn
        self.scheduled = False
        self.order = door.scheduler.enrol()  # its place in a turn's flushes
        self.pending = {}                # record offset -> Pending, in file order
        self.known = OrderedDict()       # id -> (offset, control, error offset): records
        #                                  of the file that no delivery claimed yet
        self.state = "loading"           # loading | open | rotating | gone
        self.load_pos = 0
        self.load_carry = b""
        self.load_at = 0
        self.load_skip = None            # inside an over-long record: where the next chunk
        #                                  may start one (1: mid-line, 0: at a line)
        self.owed = 0                    # credit held back while the file waits to rotate
        self.waiting_ids = None          # while a replaced file loads: id -> [Pending]
        self.settling = ()               # ... and the marks it found for them
        self.write_error = False         # the last append failed: wait for the next poll
        self.seen = None                 # (size, mtime) when we last read the marks, kept
        #                                  across our own appends: unchanged, no one marked
        self.force_check = False         # the poll reads the marks whatever the stamp says
        self.sent = 0                    # bytes appended (the admin's bytes out)
        self.polls = self.acked = self.rejected = 0
        name = os.path.basename(path)
        client = self.client = Client(f"textqueue:{path}", DOOR, name=name, type="textqueue",
                                      address=path, principal=door.principal)
        door.broker.connect(client)
        self.traffic = door.traffic.open(path, self, self, self.goodbye)
        self.traffic.client = client

    def open(self):
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                          0o644)
        self.ident = files.identity(self.fd)
        self.size = os.fstat(self.fd).st_size
        if not self.size:
            self.size = files.append(self.fd, header(self.queue)) + len(header(self.queue))
        self.load_pos, self.load_carry, self.load_at = 0, b"", 0
        self.load_skip = None
        self.state = "loading"

    # -- the consumer ---------------------------------------------------------------------
    def attach(self):
        broker = self.door.broker
        queue = broker.queues.get(self.queue) or broker.queue(self.queue)
        free = self.credit - len(self.pending) - len(self.batch)
        self.consumer = Consumer(f"textqueue:{self.path}", self.client, self._deliver,
                                 manual_ack=True, credit=max(free, 0),
                                 on_cancel=self._cancelled)
        broker.consume(queue, self.consumer)

    def _cancelled(self, consumer):
        """The queue was deleted: the next poll consumes it again (as configured)."""
        self.consumer = None

    def _deliver(self, consumer, entry):
        self.traffic.delivered(entry.message)
        self.batch.append(entry)
        if not self.scheduled:
            self.scheduled = True
            self.door.scheduler.mark(self)

    # -- appending: one write per reactor turn (FlushScheduler) ----------------------------
    def flush(self):
        self.scheduled = False
        if self.state not in ("open", "rotating") or not self.batch:
            return
        batch, self.batch = self.batch, []
        width = self.door.error_width
        records, owners = [], []
        settled = []
        for entry in batch:
            known = self.known.pop(entry.message.id, None) if self.known else None
            if known is not None and self._adopt(entry, known, settled):
                continue
            records.append(convert.outbound(entry.message, entry.retry, width))
            owners.append(entry)
        if records:
            data = b"".join(records)
            unseen = _stamp(os.fstat(self.fd)) != self.seen
            try:
                offset = files.append(self.fd, data)
            except OSError as exc:
                return self._write_failed(owners, exc)
            if not unseen:               # nobody else wrote since we last looked
                self.seen = _stamp(os.fstat(self.fd))
            self.sent += len(data)
            self.door.broker.counters["textqueue.appended"] += len(records)
            pending = self.pending
            for entry, record in zip(owners, records):
                end = offset + len(record)
                pending[offset] = Pending(entry, offset, end - 1 - width)
                offset = end
            self.size = max(self.size, offset)
            if self.size >= self.door.rotate_size and self.state == "open":
                self.state = "rotating"
        if settled:
            self._settle(settled)

    def _adopt(self, entry, known, settled):
        """A delivery whose id has a record in the file already: the record stands for it
        (`-`: still to do; `=`: done while we did not know) instead of a new one."""
        offset, control, error = known
        if control == "-":
            self.pending[offset] = Pending(entry, offset, error)
            return True
        if control in "=#":
            settled.append((entry, control, None))
            return True
        return False                     # failed before: deliver it anew

    def failed(self):
        """Called by the FlushScheduler inside an `except`: a bug while appending costs
        this file only, as a failing render costs one connection (bridge.outbox). It is
        logged and closed, so its deliveries go back to the queue; the next poll opens it
        again."""
        log.failure("textqueue: appending to {file} failed; the file is closed",
                    file=self.path)
        self.goodbye()

    def _write_failed(self, entries, exc):
        """A full disk: the deliveries go back to the queue, and the file takes nothing
        until the next poll."""
        log.error("textqueue: cannot append to {file}: {reason}", file=self.path, reason=exc)
        self.client.pause()
        self.write_error = True
        for entry in entries:
            if self.consumer is not None:
                self.consumer.reject(entry.message.id)
        self._credit(len(entries))

    # -- the worker's marks ------------------------------------------------------------------
    def changed(self, closed):
        self.door.dirty(self)

    def work(self):
        """Load the file (a chunk a turn) or look for flips. True: more to do now."""
        if self.state == "loading":
            return self._load()
        if self.state == "gone":
            return False
        same = files.same_file(self.path, self.ident)
        if not same:
            return self._replaced(same is None)
        st = os.fstat(self.fd)
        if st.st_size < self.size:
            log.warn("textqueue: {file} was truncated: matching its records anew",
                     file=self.path)
            return self._replaced(False)
        # Our own appends leave the stamp as we saw it, so they cost no look at the marks.
        # A mark made within the same clock tick as the last write changes no stamp
        # either: the poll's forced look finds it.
        if self.pending and (_stamp(st) != self.seen or self.force_check):
            self.force_check = False
            self.seen = _stamp(st)
            self._check()
        if self.state == "rotating" and not self.pending and not self.batch:
            self._rotate()
        return False

    def _check(self):
        """Status bytes of the unsettled records, a pread per run; settle the flipped."""
        settled = []
        offsets = sorted(self.pending)   # in file order already, but for adopted records
        fd, pending = self.fd, self.pending
        start = 0
        while start < len(offsets):
            first = offsets[start]
            stop = start + 1
            while (stop < len(offsets) and offsets[stop] - offsets[stop - 1] <= RUN_GAP
                   and offsets[stop] - first < RUN_BYTES):
                stop += 1
            run = offsets[start:stop]
            buf = os.pread(fd, run[-1] - first + 1, first)
            if len(run) == 1:
                statuses = buf[:1]
            else:
                statuses = bytes(itemgetter(*[o - first for o in run])(buf))
            if statuses.count(_DASH) != len(statuses):
                for k in [m.start() for m in re.finditer(b"[^-]", statuses)]:
                    p = pending[run[k]]
                    control = chr(statuses[k])
                    if control in "=#!":
                        del pending[run[k]]
                        settled.append((p.entry, control, p.error))
            start = stop
        if settled:
            self._settle(settled)

    def _settle(self, settled):
        consumer = self.consumer
        acked, rejected = self.acked, self.rejected
        for entry, control, error in settled:
            message_id = entry.message.id
            if consumer is None or consumer.unacked.get(message_id) is not entry:
                continue                 # taken back meanwhile (ack timeout, queue gone)
            if control == "!":
                reason = self._reason(error)
                log.info("textqueue: {file}: message {id!r} failed ({reason}): back to queue "
                         "{queue}", file=self.path, id=message_id, reason=reason,
                         queue=self.queue)
                consumer.reject(message_id)
                self.rejected += 1
            else:
                consumer.ack(message_id)
                self.acked += 1
        counters = self.door.broker.counters
        counters["textqueue.acked"] += self.acked - acked
        counters["textqueue.rejected"] += self.rejected - rejected
        self._credit(len(settled))

    def _reason(self, error):
        if error is None:
            return ""
        value = os.pread(self.fd, self.door.error_width, error)
        return value.partition(b"\n")[0].rstrip(b" ").decode("utf-8", "replace")

    def _credit(self, n):
        if not n:
            return
        if self.state == "rotating":
            self.owed += n
        elif self.consumer is not None:
            self.consumer.add_credit(n)

    def reconcile(self):
        """Deliveries the core took back (an ack timeout) no longer wait in the file: their
        credit returns. Their records stay `-`; a mark on one of them changes nothing."""
        consumer = self.consumer
        if consumer is None:
            return
        unacked = consumer.unacked
        if len(unacked) == len(self.pending) + len(self.batch):
            return                       # every one of them still waits: nothing to look up
        lost = [offset for offset, p in self.pending.items()
                if unacked.get(p.entry.message.id) is not p.entry]
        for offset in lost:
            del self.pending[offset]
        self._credit(len(lost))

    # -- loading a file: at start, and once it was replaced ----------------------------------
    def _load(self):
        data = os.pread(self.fd, max(files.CHUNK, len(self.load_carry)), self.load_pos)
        base = self.load_at if self.load_carry else self.load_pos
        buffer = self.load_carry + data if self.load_carry else data
        self.load_pos += len(data)
        if self.load_skip is not None and data:     # the rest of a record dropped
            start = record_start(buffer, self.load_skip)
            if start is None:
                self.load_skip = 0 if buffer.endswith(b"\n") else 1
                self.load_at = self.load_pos
                return True
            self.load_skip = None
            buffer, base = buffer[start:], base + start
        found = scan(buffer, base, MAX_RECORD)
        records = found.records()
        tail = found.incomplete
        if data and tail is not None:
            self.load_carry, self.load_at = tail.data, tail.offset
        else:
            self.load_carry, self.load_at = b"", self.load_pos
            if data and tail is None and not buffer.endswith(b"\n"):
                self.load_skip = 1                  # its line goes on in the next chunk
            if tail is not None and tail.terminated:
                records = list(records) + [tail.record()]
        for record in records:
            self._found(record)
        if data:
            return True
        self._loaded()
        return False

    def _found(self, record):
        control = record.control
        if control not in "-=!#":
            return
        message_id = journal.decode_fields(record.raw, ("id",))[0]
        if not message_id:
            return
        error = record.variable(convert.ERROR)
        error = error.value_offset if error is not None else None
        waiting = self.waiting_ids.get(message_id) if self.waiting_ids else None
        if waiting:
            p = waiting.pop(0)
            if control == "-":
                p.offset, p.error = record.offset, error
                self.pending[record.offset] = p
            else:
                self.settling.append((p.entry, control, error))
            return
        known = self.known
        known[message_id] = (record.offset, control, error)
        if len(known) > self.door.match_window:
            known.popitem(last=False)

    def _loaded(self):
        """The file is read: deliveries it does not hold are appended again, the flips it
        held are settled, and appending goes on."""
        lost = [p.entry for ps in (self.waiting_ids or {}).values() for p in ps]
        settled = list(self.settling)
        self.waiting_ids, self.settling = None, ()
        self.size = os.fstat(self.fd).st_size
        self.state = "open"
        if lost:
            log.warn("textqueue: {file} lost {n} unsettled records: appending them again",
                     file=self.path, n=len(lost))
            self.batch[:0] = lost
        if settled:
            self._settle(settled)
        if self.consumer is None:
            self.attach()
        if self.batch and not self.scheduled:
            self.scheduled = True
            self.door.scheduler.mark(self)

    def _replaced(self, missing):
        """Another file under our name (or none): read it and match by id."""
        if missing and self.owned:
            log.info("textqueue: {file} removed: no longer consuming {queue}",
                     file=self.path, queue=self.queue)
            return self.gone()
        waiting = {}
        for p in self.pending.values():
            waiting.setdefault(p.entry.message.id, []).append(p)
        self.pending = {}
        self.waiting_ids, self.settling = waiting, []
        self.known.clear()
        os.close(self.fd)
        self.fd = None
        self.open()
        log.info("textqueue: {file} was replaced: matching {n} unsettled records by id",
                 file=self.path, n=sum(map(len, waiting.values())))
        return True

    # -- rotation ---------------------------------------------------------------------------
    def _rotate(self):
        """Rename the settled file with the next number, begin a new one (under its lock:
        a worker holding it is waited for), keep the newest `retain` old ones."""
        if not files.try_lock(self.fd):
            return
        directory, name = os.path.split(self.path)
        pattern = re.compile(re.escape(name) + r"\.(\d{6,})$")
        numbers = sorted(int(m.group(1)) for m in map(pattern.match, os.listdir(directory or "."))
                         if m)
        number = (numbers[-1] if numbers else 0) + 1
        try:
            os.rename(self.path, f"{self.path}.{number:06d}")
        finally:
            files.unlock(self.fd)
        os.close(self.fd)
        self.open()
        self.known.clear()
        self.state = "open"
        numbers.append(number)
        for old in numbers[:max(len(numbers) - self.door.retain, 0)]:
            try:
                os.unlink(f"{self.path}.{old:06d}")
            except FileNotFoundError:
                pass
        log.info("textqueue: {file} rotated to {old}", file=self.path,
                 old=f"{name}.{number:06d}")
        owed, self.owed = self.owed, 0
        self._credit(owed)

    # -- polling and the end -------------------------------------------------------------------
    def poll(self, now):
        self.polls += 1
        if self.state == "gone":
            return False
        if self.consumer is None and self.state == "open":
            self.attach()
        if self.write_error:
            self.write_error = False
            self.client.resume()
        if self.state != "loading":
            self.reconcile()
        self.force_check = True          # a mark made in the same clock tick as our append
        self.door.dirty(self)            # is seen here at the latest
        return True

    # The admin's connection controls: shutdown stops deliveries, then says goodbye.
    def pauseProducing(self):
        self.client.pause()

    def resumeProducing(self):
        self.client.resume()

    def gone(self):
        self.goodbye()
        return False

    def goodbye(self):
        """Append what this turn delivered, give unsettled messages back to the queue
        (retry + 1, as any door's consumer that goes), close the file."""
        if self.state == "gone":
            return
        if self.batch and self.state in ("open", "rotating"):
            self.flush()
        self.state = "gone"
        if self.consumer is not None:
            self.door.broker.cancel(self.consumer)
            self.consumer = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.door.traffic.close(self.traffic)
        self.door.broker.disconnect(self.client)

    def abortConnection(self):
        self.goodbye()


class OutboxDir(files.Directory):
    """A directory where a worker asks for a queue by making a file `NAME.tq` (NAME as an
    inbox file names a queue; `NAME@TAG.tq` for several files of one queue)."""

    def __init__(self, door, path):
        self.door = door
        self.path = path
        self.files = {}                  # file name -> OutboxFile

    def scan(self, now):
        try:
            names = sorted(os.listdir(self.path))
        except FileNotFoundError:
            os.makedirs(self.path, exist_ok=True)
            self.door.watcher.watch(self.path)
            return
        for name in names:
            if name not in self.files:
                self.found(name)
        for name, file in list(self.files.items()):
            if not file.poll(now):
                del self.files[name]

    def found(self, name):
        queue = queue_of(name)
        path = os.path.join(self.path, name)
        if queue is None or not os.path.isfile(path):
            return None
        file = OutboxFile(self.door, queue, path, owned=True)
        try:
            file.open()
        except OSError as exc:
            log.warn("textqueue: cannot open {file}: {reason}", file=path, reason=exc)
            file.goodbye()
            return None
        self.files[name] = file
        self.door.dirty(file)
        return file



def _stamp(st):
    """What a write by anyone changes: the size (appends) or the modification time."""
    return st.st_size, st.st_mtime_ns


def queue_of(filename):
    """The queue an outbox directory's file asks for: `jobs.tq`, `jobs@w2.tq` (several
    files of one queue), `queue.NAME.tq`; None for other files."""
    target = targets.of_file(filename)
    return target.name if target is not None and target.kind == targets.QUEUE else None
