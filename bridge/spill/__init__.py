"""Paging queue backlogs out to disk: the files behind core.window.

Every queue gets a StorageWindow (`broker.windows`): `broker.queue_memory_window` bytes
and `broker.queue_memory_window_messages` entries of its backlog stay resident, the rest
is paged out, and read back in order as consumers catch up (docs/limits.md). A durable
queue pages out to its journal (bridge.spill.pagers.JournalPager: read back, never
written twice); any other queue to scratch segment files under `<data_dir>/spill/`
(ScratchPager), which hold nothing a restart brings back: the directory is emptied when
the broker starts. Every mailbox gets one too (`install`; core.mailbox), its scratch files
under `<data_dir>/spill/.mailboxes/`.

One worker thread writes and removes scratch files, in order, and another reads
paged-out records ahead of the consumers (bridge.spill.pagers): the reactor never waits
for the disk but for a small read when a consumer outran the reader.
`broker.queue_memory_total` caps every window together: past it each queue keeps only a
few entries resident (core.window.WindowBudget, reviewed by `check`), and while pages
waiting for the disk pass it too, or a write failed (a full disk: it is tried again each
check), publishers are not read (the memory watermark's hold, bridge.memory): nothing is
refused or dropped.
"""
import os
import shutil
import threading
from functools import partial

from twisted.application import service
from twisted.internet import defer, threads
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from mqksbridge.bridge.config import size_limit
from mqksbridge.bridge.spill.pagers import JournalPager, ScratchPager
from mqksbridge.core.window import StorageWindow, WindowBudget

log = Logger(namespace="mqksbridge.spill")

SPILL = "spill"             # <data_dir>/spill/<queue dir>/00000001.tq
MAILBOXES = ".mailboxes"    # <data_dir>/spill/.mailboxes/<mailbox dir>/: no queue's name


class Spill:
    """The broker's pagers, their writer thread and the global budget (module docstring)."""

    def __init__(self, root, broker, reactor, clock, window_bytes, window_messages, total,
                 segment_size=16 << 20, run=None, read=None):
        self.root = root
        self.broker = broker
        self.reactor = reactor
        self.clock = clock
        self.window_bytes = window_bytes
        self.window_messages = window_messages
        self.segment_size = segment_size
        self.budget = WindowBudget(total)
        self.pool = ThreadPool(1, 1, "mqksbridge-spill")
        self.pool.threadFactory = partial(threading.Thread, daemon=True)
        self.reader = ThreadPool(1, 1, "mqksbridge-spill-read")
        self.reader.threadFactory = partial(threading.Thread, daemon=True)
        # run(work, *args) -> Deferred: the worker thread; read(...): the reader thread (a
        # test may run them inline, or when it likes: a read must land in a turn of its own)
        self.run = run or partial(threads.deferToThreadPool, reactor, self.pool)
        self.read = read or run or partial(threads.deferToThreadPool, reactor, self.reader)
        self.scheduled = {}          # id(pager) -> pager to flush at the end of this turn
        self.woken = {}              # id(pager) -> pager whose reads ahead landed this turn
        self._call = None
        self.pending = 0             # bytes handed to the worker, not written yet
        self.failed = False          # the last write failed (a full disk)
        self.memory = None           # bridge.memory.MemoryWatermark (see `write`)
        self.pressed = False         # pages waiting passed the cap since the last drain
        self.written = self.writes = self.failures = 0

    def window(self, queue):
        """broker.windows: the StorageWindow of a new queue (or one turning durable)."""
        if queue.journal is not None:
            pager = JournalPager(self, queue.name, self.broker.storage, queue.journal.writer,
                                 queue.dispatch)
        else:
            pager = ScratchPager(self, queue.name, queue.dispatch)
        return StorageWindow(pager, self.window_messages, self.window_bytes, self.budget)

    def mail_window(self, mailbox):
        """A mailbox's StorageWindow (core.mailbox): the same bounds, outside the global
        budget (which reviews queues), its scratch files under `spill/.mailboxes/`."""
        if mailbox.journal is not None:
            pager = JournalPager(self, mailbox.name, self.broker.storage,
                                 mailbox.journal.writer, mailbox.flush)
        else:
            pager = ScratchPager(self, mailbox.name, mailbox.flush, MAILBOXES)
        return StorageWindow(pager, self.window_messages, self.window_bytes)

    def install(self):
        """Every queue and mailbox the broker makes from now on gets its window."""
        self.broker.windows = self.window
        self.broker.subscribe(self._event)

    def _event(self, event, mailbox=None, **data):
        if event == "mailbox-created":
            mailbox.set_windows(self.mail_window)

    def clean(self):
        """At start: the scratch files of the last run hold nothing to bring back."""
        shutil.rmtree(self.root, ignore_errors=True)

    # -- writing -------------------------------------------------------------------------
    def schedule(self, pager):
        """`pager` has pages to write (or place) at the end of this reactor turn."""
        self.scheduled[id(pager)] = pager
        if self._call is None:
            self._call = self.reactor.callLater(0, self.flush)

    def wake(self, pager):
        """A read ahead of `pager` landed: its queue hears it at the end of this turn."""
        self.woken[id(pager)] = pager
        if self._call is None:
            self._call = self.reactor.callLater(0, self.flush)

    def flush(self):
        self._call = None
        scheduled, self.scheduled = self.scheduled, {}
        woken, self.woken = self.woken, {}
        for pager in scheduled.values():
            pager.flush()
        for pager in woken.values():
            pager.wake()

    def write(self, file, data, offset, done=None, failed=None):
        """Write `data` at `offset` of a scratch file on the worker thread; then `done()`
        (or `failed()`) on the reactor. Pages passing the global cap run the memory check
        at once, so that publishers are held now (a slow disk, a flood) rather than at the
        next periodic check, half a second of reading later."""
        total = self.budget.total
        waiting = self.pending
        self.pending += len(data)
        if total is not None and waiting <= total < self.pending and self.memory is not None:
            self.pressed = True
            self.memory.check()
        d = self.run(file.write, data, offset)
        d.addCallbacks(self._written, self._failed, (len(data), done), None,
                       (len(data), failed, file))

    def _written(self, _, size, done):
        self._settle(size)
        self.written += size
        self.writes += 1
        self.failed = False
        if done is not None:
            done()

    def _failed(self, failure, size, failed, file):
        self._settle(size)
        self.failures += 1
        if not self.failed:
            log.failure("spill: writing {path} failed; its pages stay in memory and "
                        "publishers are held until a write succeeds", failure, path=file.path)
        self.failed = True
        if failed is not None:
            failed()

    def _settle(self, size):
        """A write is over. Once the pages that passed the cap are all written, glibc is
        asked to give their freed blocks back: a burst that waited for the disk otherwise
        stays in the resident size (bridge.memory)."""
        self.pending -= size
        if self.pressed and not self.pending:
            self.pressed = False
            self.memory.trim()

    def remove(self, file):
        """Remove a scratch file on the worker thread, after every write before it."""
        self.run(file.remove).addErrback(
            lambda f: log.failure("spill: removing {path} failed", f, path=file.path))

    # -- periodic ------------------------------------------------------------------------
    def check(self):
        """Review the global budget; after a failed write, try the pages again."""
        self.budget.review(self.broker.queues.values())
        if self.failed:
            for queue in self.broker.queues.values():
                window = queue.window
                if window is not None and window.paged:
                    self.schedule(window.pager)

    def pressure(self):
        """Whether publishers must wait (bridge.memory): a write failed, or the pages
        waiting for the disk pass the global cap."""
        total = self.budget.total
        return self.failed or (total is not None and self.pending > total)

    def state(self):
        """What the admin API shows."""
        return {"resident_bytes": self.budget.resident, "tight": self.budget.tight,
                "pending_bytes": self.pending, "written_bytes": self.written,
                "writes": self.writes, "failures": self.failures, "failed": self.failed}


class SpillService(service.Service):
    """Starts the spill's worker thread; on stop, lets it finish what it was given."""

    name = "spill"

    def __init__(self, spill):
        self.spill = spill

    def startService(self):
        super().startService()
        self.spill.pool.start()
        self.spill.reader.start()

    def stopService(self):
        super().stopService()
        self.spill.reader.stop()
        return defer.maybeDeferred(self.spill.pool.stop)


def build(config, broker, reactor, clock):
    """(Spill, SpillService), or (None, None) when `broker.queue_memory_window` is "max"
    (every backlog resident, as before). Sets `broker.windows` (and every new mailbox's
    window); empties the spill directory (call it before any queue or mailbox exists)."""
    settings = config["broker"]
    window = size_limit(settings["queue_memory_window"])
    if window is None:
        return None, None
    spill = Spill(os.path.join(config["data_dir"], SPILL), broker, reactor, clock, window,
                  settings["queue_memory_window_messages"],
                  size_limit(settings["queue_memory_total"]))
    spill.clean()
    spill.install()
    return spill, SpillService(spill)
