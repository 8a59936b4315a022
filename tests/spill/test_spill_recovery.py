"""A durable queue recovered with a backlog far past its window: recovery makes entries
of the window only and leaves the rest in its journal, paged (bridge.journal.recovery's
runs, bridge.spill.pagers.JournalPager), and everything comes back in order. Real
journal files; batches and spill writes run inline as the task.Clock turns."""
from twisted.internet import defer, task

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.clock import ReactorClock
from mqksbridge.bridge.journal import Durability
from mqksbridge.bridge.spill import Spill
from mqksbridge.core import Broker, Client, Consumer, Message
from tests.support.journal import inline

WINDOW = 100
SETTINGS = {"queues": ["*"], "fsync": "never", "segment_size": 64 << 10}


class Node:
    """A broker on `data_dir`, recovered; with a spill of a WINDOW-message window when
    `window`."""

    def __init__(self, data_dir, clock, window):
        self.clock = clock
        self.broker = Broker(ReactorClock(clock))
        if window:
            spill = Spill(str(data_dir / "spill"), self.broker, clock, clock, 1 << 20, WINDOW,
                          None, run=lambda work, *args: defer.maybeDeferred(work, *args))
            self.broker.windows = spill.window
        config = configuration.load(overrides={"data_dir": str(data_dir),
                                               "durability": SETTINGS})
        self.durability = Durability(config["durability"], str(data_dir), self.broker,
                                     clock, clock, run=inline)
        if window:
            self.durability.resident = WINDOW
        self.recovered = self.durability.recover()

    def commit(self):
        writer = self.durability.writer
        while writer.pending or writer.in_flight is not None:
            self.clock.advance(0)
        self.clock.advance(0)

    def drain(self, name="jobs"):
        got = []
        self.broker.add_consumer(self.broker.queue(name), Consumer(
            "k", Client("c", "test"), lambda c, e: got.append(e.message.id)))
        self.commit()
        return got


def clock():
    found = task.Clock()
    found.advance(1_700_000_000)
    return found


def fill(data_dir, clock, messages):
    node = Node(data_dir, clock, window=False)
    queue = node.broker.queue("jobs")
    for message in messages:
        queue.put_message(message)
    node.commit()


def plain(n, start=0):
    return [Message(f"m{i}", "s", (b"body %d" % i,), created_at=1_700_000_000.0)
            for i in range(start, start + n)]


def test_a_backlog_past_the_window_stays_in_its_journal_at_start(tmp_path):
    time = clock()
    fill(tmp_path, time, plain(20_000))
    node = Node(tmp_path, time, window=True)
    queue = node.broker.queues["jobs"]
    assert node.recovered == {"jobs": 20_000} and len(queue) == 20_000
    assert len(queue.entries) <= WINDOW                   # entries made: the window only
    memory, disk = queue.window.pager.counts()
    assert memory <= WINDOW and disk >= 20_000 - 2 * WINDOW
    assert queue.bytes == sum(len(b"body %d" % i) for i in range(20_000))
    assert node.drain() == [f"m{i}" for i in range(20_000)]
    assert len(queue) == 0 and queue.bytes == 0
    assert Node(tmp_path, time, window=False).recovered in ({}, {"jobs": 0})


def test_a_record_recovery_must_decode_behind_the_window_reads_the_journal_whole(tmp_path):
    """A priority message behind paged runs: its lane comes first, so the journal is read
    whole, as without a window (same order)."""
    time = clock()
    messages = plain(3_000)
    messages.insert(2_500, Message("urgent", "s", (b"now",), priority=True,
                                   created_at=1_700_000_000.0))
    fill(tmp_path, time, messages)
    want = ["urgent"] + [f"m{i}" for i in range(3_000)]
    assert Node(tmp_path, time, window=True).drain() == want
