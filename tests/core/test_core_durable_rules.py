"""The delivery rules state machine on durable queues, with crashes.

Every queue of tests/core/test_core_delivery_rules.py is durable here: its journal is the
real one (bridge.journal, real files in a temporary directory), its batches run when the
machine says so (`commit`). Every rule and promise of the plain machine must still hold
(a durable queue takes no fast path, so this also holds the plain path to them). On top:

- a publish is confirmed only once its record's batch was written (core.storage);
- `crash`: the journal directory as it is now is copied, the batch still pending is torn
  into it (a random prefix of its appends, no edits: a kill -9 mid-write), and a fresh
  broker recovers from the copy. Every message whose publish was confirmed and that is
  still stored or held unacked by a consumer must come back, once; nothing comes back
  that was never put. (What was settled may come back too: its settlement may not have
  been written yet. That is the at-least-once promise.)
"""
import os
import shutil
import tempfile

from hypothesis import settings, strategies as st
from hypothesis.stateful import precondition, rule
from twisted.internet import defer, task

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.journal import Durability, layout
from mqksbridge.bridge.spill import Spill
from mqksbridge.core import Broker, FakeClock
from tests.core.test_core_delivery_rules import DeliveryRules
from tests.support.journal import inline


class Seconds:
    """The core FakeClock as the journal's IReactorTime-style clock (settle stamps)."""

    def __init__(self, clock):
        self.seconds = clock.now


def durability(broker, data_dir, clock):
    settings = configuration.load(overrides={"durability": {
        "queues": ["*"], "fsync": "never", "segment_size": 1024}})["durability"]
    reactor = task.Clock()
    found = Durability(settings, data_dir, broker, reactor, Seconds(clock), run=inline)
    found.reactor = reactor
    return found


class DurableRules(DeliveryRules):
    def __init__(self):
        super().__init__()
        self.data_dir = tempfile.mkdtemp(prefix="durable-rules-")
        self.durability = durability(self.broker, self.data_dir, self.clock)
        self.confirmed = set()
        self.crashes = 0

    def teardown(self):
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def _put(self, queue, subject, priority, observed):
        storage = self.broker.storage
        before = storage.appended
        super()._put(queue, subject, priority, observed)
        mid = "m%d" % self.n
        if storage.appended != before:
            storage.when_stored(storage.appended, lambda: self.confirmed.add(mid))

    @rule()
    def commit(self):
        """The writer's turn: everything pending is written (fsync policy never: the
        content, not the disk, is what this machine checks)."""
        writer = self.durability.writer
        while writer.pending or writer.in_flight is not None:
            self.durability.reactor.advance(0)

    @precondition(lambda self: self.msgs)
    @rule(data=st.data())
    def crash(self, data):
        self.crashes += 1
        copy = os.path.join(self.data_dir, "crash%d" % self.crashes)
        root = os.path.join(self.data_dir, layout.JOURNAL)
        if os.path.isdir(root):
            shutil.copytree(root, os.path.join(copy, layout.JOURNAL))
        else:
            os.makedirs(copy)
        definitions = os.path.join(self.data_dir, layout.DEFINITIONS)
        if os.path.exists(definitions):
            shutil.copy(definitions, copy)
        self.durability.writer.prepare()        # the staged records, as a batch holds them
        for segment, parts in self.durability.writer.pending.appends.items():
            torn = b"".join(parts[1:])
            torn = torn[:data.draw(st.integers(0, len(torn)), label="torn bytes")]
            path = os.path.join(copy, layout.JOURNAL, os.path.relpath(segment.path, root))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "r+b" if os.path.exists(path) else "wb") as f:
                f.seek(parts[0])
                f.write(torn)
        after = Broker(FakeClock(self.clock.now()))
        durability(after, copy, self.clock).recover()
        back = [e.message.id for q in after.queues.values() for e in (*q.priority, *q.entries)]
        assert len(back) == len(set(back)), "a message came back twice"
        assert set(back) <= set(self.msgs), "a message came back that was never put"
        stored = {e.message.id for q in self.broker.queues.values()
                  for e in q.stored_entries()}
        held = {mid for (_, mid) in self.held}
        for mid in self.confirmed & (stored | held):
            assert mid in back, f"{mid} was confirmed, is not settled, and did not come back"
        shutil.rmtree(copy)


TestDurableRules = DurableRules.TestCase
TestDurableRules.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)


def inline_spill(broker, root, reactor, clock):
    """The real spill (bridge.spill: scratch files, journal read-back) with a two-message
    window, its writes run inline when `reactor` (a task.Clock) turns."""
    spill = Spill(root, broker, reactor, Seconds(clock), 1 << 20, 2, None,
                  run=lambda work, *args: defer.maybeDeferred(work, *args))
    broker.windows = spill.window
    return spill


class PagedDurableRules(DurableRules):
    """Every durable queue keeps two messages resident; the rest is its journal, read back
    (bridge.spill.pagers.JournalPager)."""

    def __init__(self):
        super().__init__()
        inline_spill(self.broker, os.path.join(self.data_dir, "spill"),
                     self.durability.reactor, self.clock)


class PagedFileRules(DeliveryRules):
    """The plain queues of the delivery rules, paged out to real scratch files past two
    messages (bridge.spill.pagers.ScratchPager)."""

    def __init__(self):
        super().__init__()
        self.data_dir = tempfile.mkdtemp(prefix="paged-rules-")
        self.reactor = task.Clock()
        inline_spill(self.broker, self.data_dir, self.reactor, self.clock)

    def teardown(self):
        shutil.rmtree(self.data_dir, ignore_errors=True)

    @rule()
    def spill_turn(self):
        """The end of a reactor turn: paged-out chunks are written to their files."""
        self.reactor.advance(0)


TestPagedDurableRules = PagedDurableRules.TestCase
TestPagedDurableRules.settings = settings(max_examples=60, stateful_step_count=40,
                                          deadline=None)
TestPagedFileRules = PagedFileRules.TestCase
TestPagedFileRules.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)
