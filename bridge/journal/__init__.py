"""Durable queues: which queues are durable, their journals, recovery at start.

`build(config, broker, reactor, clock)` reads every journal under `<data_dir>/journal/`
(and every mailbox journal under `<data_dir>/mailboxes/`) back into the broker before any
door listens (bridge.journal.recovery), then makes durable every queue whose name matches
`[durability] queues` (as it is created, by any door) and any queue a door asks for
(`make_durable`: a Twino persistent delivery handler), plus each durable queue's
dead-letter queue, and every mailbox whose name matches `[durability] mailboxes`. The returned service starts the
writer's worker thread and, on stop, waits until every pending write and fsync is done
(and their confirmations released) before the broker closes connections.

Files: layout (where things are), writer (group commit), store (one queue's journal),
recovery (reading back), definitions (durable queue definitions across restarts), files
(the one layer every change to the disk goes through). specs/textqueue.md section 8
documents the directory layout and lifecycle, docs/durability.md what is synced before what.
"""
import fnmatch
import gc
import threading

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from mqksbridge.bridge.clock import periodic
from mqksbridge.bridge.config import size_limit
from mqksbridge.bridge.journal import layout
from mqksbridge.bridge.journal.definitions import Definitions
from mqksbridge.bridge.journal.recovery import recover
from mqksbridge.bridge.journal.store import Store
from mqksbridge.bridge.journal.writer import INTERVAL, GroupWriter

log = Logger(namespace="mqksbridge.journal")

FREEZE_AT = 100_000     # recovered messages from which the heap is frozen after recovery


def _daemon_thread(**kwargs):
    """The journal's worker thread, as a daemon: a process that exits without stopping the
    service (an embedding program, a test) must not hang on it. Nothing is lost by that:
    a confirmation waits for its fsync, and a write cut short is a torn tail recovery
    repairs. JournalService.stopService still drains every write and fsync first."""
    return threading.Thread(daemon=True, **kwargs)


class Durability:
    """The broker's durable queues (module docstring)."""

    def __init__(self, settings, data_dir, broker, reactor, clock, fsync_observer=None,
                 run=None, files=None):
        self.settings = settings
        self.broker = broker
        self.patterns = list(settings["queues"])
        self.mailbox_patterns = list(settings["mailboxes"])
        self.policy = settings["fsync"]
        self.max_deliveries = settings["max_deliveries"] or None
        self.suffix = settings["dead_letter_suffix"]
        self.pool = ThreadPool(1, 1, "mqksbridge-journal")
        self.pool.threadFactory = _daemon_thread
        self.writer = GroupWriter(broker.storage, reactor, self.pool, clock, fsync_observer,
                                  run=run, files=files)
        self.store = Store(data_dir, self.writer, clock, settings["segment_size"],
                           settings["compact_live"], settings["archive_retention"])
        self.mail_store = Store(data_dir, self.writer, clock, settings["segment_size"],
                                settings["compact_live"], settings["archive_retention"],
                                layout.MAILBOXES)
        self.policies = {}               # queue name -> fsync policy chosen for it
        self.recovered = {}
        self.problems = []               # what recovery left out or repaired (also logged)
        self.resident = None             # records of a queue recovery makes entries of, the
                                         # rest paged (its storage window; None: all)
        broker.subscribe(self._event)
        self.definitions = Definitions(self, broker, reactor)

    # -- which queues -------------------------------------------------------------------
    def durable(self, name):
        """Whether a new queue of this name is durable by configuration: a pattern
        matches, or it is the dead-letter queue of a durable queue."""
        if any(fnmatch.fnmatchcase(name, p) for p in self.patterns):
            return True
        if name.endswith(self.suffix):
            source = self.broker.queues.get(name[:-len(self.suffix)])
            return source is not None and source.journal is not None
        return False

    def _event(self, event, queue=None, **data):
        """A new queue matching the patterns, or any queue a door marked durable
        (`attrs["durable"]`: a Twino persistent delivery handler), gets its journal; so
        does a new mailbox matching the mailbox patterns."""
        if event in ("queue-created", "queue-defined") and queue.journal is None and (
                queue.attrs.get("durable") or self.durable(queue.name)):
            self.make_durable(queue)
        elif event == "mailbox-created" and any(
                fnmatch.fnmatchcase(data["mailbox"].name, p) for p in self.mailbox_patterns):
            self.make_mailbox_durable(data["mailbox"])

    def make_mailbox_durable(self, mailbox):
        """Give `mailbox` its journal (what it holds now is recorded too)."""
        if mailbox.journal is None:
            journal = self.mail_store.journal(mailbox.name, self.policy)
            journal.queue = mailbox
            mailbox.attach_journal(journal)
        return mailbox.journal

    def make_durable(self, queue, policy=None):
        """Give `queue` its journal (what it holds now is recorded too)."""
        if queue.journal is not None:
            return queue.journal
        policy = policy or self.policies.get(queue.name) or self.policy
        self.policies[queue.name] = policy
        journal = self.store.journal(queue.name, policy)
        if self.max_deliveries is not None and queue.max_deliveries is None:
            queue.configure(max_deliveries=self.max_deliveries,
                            dead_letter=queue.name + self.suffix)
        journal.queue = queue
        queue.attach_journal(journal)
        return journal

    def journal_bytes(self, queue):
        """Bytes of the queue's live segments (admin), or None when it is not durable."""
        journal = queue.journal
        return None if journal is None else journal.bytes

    # -- start ------------------------------------------------------------------------------
    def recover(self):
        """Rebuild every durable queue (before the doors listen), through the core alone:
        the definitions first (bridge.journal.definitions: each door reads its own
        arguments from them), then the messages of every journal, into the queue of its
        name (a plain one when no definition names it). Returns {name: messages}."""
        self.definitions.restore()
        collecting = gc.isenabled()
        gc.disable()            # a million new long-lived objects: no collection in between
        try:
            self._recover_mailboxes()
            counts = self._recover()
            if sum(counts.values()) >= FREEZE_AT:
                # ... nor after: the collector would walk them all, again and again. They
                # hold no cycles: reference counting frees each as its message is settled.
                gc.freeze()
            return counts
        finally:
            if collecting:
                gc.enable()

    def _recover(self):
        found = recover(self.store.root, lambda name: self.policies.get(name, self.policy),
                        self.writer.files, self.resident)
        counts = {}
        for name, recovered in found.items():
            self.problems += recovered.problems
            queue = self.broker.queues.get(name)
            if queue is None and not recovered.entries:
                self._retire_all(name, recovered, self.store)   # a deleted queue's journal
                continue
            if queue is None:
                queue = self.broker.queue(name)
            journal, entries = self._reopen(self.store, recovered,
                                            self.policies.get(name, self.policy))
            journal.queue = queue
            if queue.journal is None:
                if queue.max_deliveries is None and self.max_deliveries is not None:
                    queue.configure(max_deliveries=self.max_deliveries,
                                    dead_letter=name + self.suffix)
                queue.attach_journal(journal)
            queue.restore(entries)
            paged = 0
            for segment, offsets, sizes, retries, size in recovered.runs:
                queue.window.page_out_placed(queue.backlog, len(offsets), size, segment, offsets,
                                             sizes, retries)
                paged += len(offsets)
            journal.settle_in(recovered)
            counts[name] = len(entries) + paged
            log.info("journal: queue {name!r} recovered with {n} messages from {s} segments",
                     name=name, n=counts[name], s=len(recovered.segments))
        self.recovered = counts
        return counts

    def _recover_mailboxes(self):
        """Every durable mailbox's mail, back in its mailbox (durable from here on, even
        when no pattern names it any more: its records are kept until delivered)."""
        found = recover(self.mail_store.root, lambda name: self.policy, self.writer.files)
        for name, recovered in found.items():
            self.problems += recovered.problems
            if not recovered.entries:
                self._retire_all(name, recovered, self.mail_store)
                continue
            journal, entries = self._reopen(self.mail_store, recovered, self.policy)
            mailbox = self.broker.mailbox(name)     # takes the journal just reopened
            journal.queue = mailbox
            if mailbox.journal is None:
                mailbox.attach_journal(journal)
            mailbox.recovered(entries)
            journal.settle_in(recovered)
            log.info("journal: mailbox {name!r} recovered with {n} messages", name=name,
                     n=len(entries))

    def _reopen(self, store, recovered, policy):
        """The journal of a recovered directory, and its live entries in order."""
        journal = store.journal(recovered.name, policy)
        journal.reopen(recovered)
        return journal, recovered.entries

    def _retire_all(self, name, recovered, store):
        store.journal(name, self.policies.get(name, self.policy)).retire_all(recovered)
        del store.journals[name]


class JournalService(service.Service):
    """Starts the writer's thread; on stop, waits for every pending write and fsync."""

    name = "journal"

    def __init__(self, durability, interval=None, clock=None):
        self.durability = durability
        self.timer = None
        if interval:
            self.timer = periodic(interval, durability.writer.sync_interval, clock,
                                  "journal fsync interval")

    def startService(self):
        super().startService()
        self.durability.pool.start()
        if self.timer is not None:
            self.timer.startService()

    async def _stop(self):
        writer = self.durability.writer
        if self.timer is not None:           # the interval policy: a last sync of its own
            await defer.maybeDeferred(self.timer.stopService)
            writer.sync_interval()
        await writer.flush()
        self.durability.pool.stop()

    def stopService(self):
        super().stopService()
        return defer.ensureDeferred(self._stop())


def build(config, broker, reactor, clock, fsync_observer=None):
    """(Durability, JournalService) for a configuration; recovery is the caller's call
    (after the doors are built, before they listen: service.build)."""
    settings = config["durability"]
    durability = Durability(settings, config["data_dir"], broker, reactor, clock,
                            fsync_observer)
    if size_limit(config["broker"]["queue_memory_window"]) is not None:
        durability.resident = config["broker"]["queue_memory_window_messages"]
    interval = settings["fsync_interval"] / 1000 if settings["fsync"] == INTERVAL else None
    return durability, JournalService(durability, interval, clock)


__all__ = ["Durability", "JournalService", "build", "layout"]
