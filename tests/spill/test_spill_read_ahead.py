"""Reading a paged backlog back off the reactor thread (bridge.spill.pagers): real scratch
files, the reader thread replaced by a list of pending reads the test runs when it likes
(a read lands in a turn of its own, as deferToThreadPool's result does)."""
import os
from contextlib import contextmanager
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import defer, task

from mqksbridge.bridge.spill import Spill, pagers
from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.core.window import REGULAR


class Seconds:
    seconds = staticmethod(lambda: 1_700_000_000.0)


class Reads:
    """The spill's `read`: each read waits here until `land` runs it."""

    def __init__(self):
        self.pending = []

    def __call__(self, work, *args):
        d = defer.Deferred()
        self.pending.append((d, work, args))
        return d

    def land(self, n=None):
        for _ in range(len(self.pending) if n is None else min(n, len(self.pending))):
            d, work, args = self.pending.pop(0)
            d.callback(work(*args))


def setup(root, messages):
    broker = Broker(FakeClock(1_700_000_000.0))
    reactor = task.Clock()
    reads = Reads()
    spill = Spill(str(root), broker, reactor, Seconds(), 1 << 20, messages, None,
                  run=lambda work, *args: defer.maybeDeferred(work, *args), read=reads)
    broker.windows = spill.window
    return broker, reactor, spill, reads


def flood(queue, reactor, n):
    for i in range(n):
        queue.put_message(Message(f"m{i}", "s", (b"body %d" % i,)))
    reactor.advance(0)              # the writer runs inline: every page is on disk now


def ids(entries):
    return [e.message.id for e in entries]


def test_a_page_in_reads_on_the_reactor_only_when_it_must(tmp_path):
    broker, reactor, spill, reads = setup(tmp_path, 10)
    queue = broker.queue("jobs")
    flood(queue, reactor, 10_000)
    window = queue.window
    assert window.pager.counts() == (0, 9_990)          # all on disk
    assert window.take_ready(REGULAR, 100) == []         # nothing at hand: a read starts
    assert len(reads.pending) == 1
    got = window.take(REGULAR, 100)                      # must bring one: reads SYNC at most
    assert ids(got) == [f"m{i}" for i in range(10, 110)]
    got = window.take(REGULAR, 1_000)
    assert ids(got) == [f"m{i}" for i in range(110, 110 + pagers.SYNC)]
    reads.land()                                         # the read ahead, past what was taken
    nxt = 110 + pagers.SYNC
    got = window.take_ready(REGULAR, 10_000)
    assert len(got) <= pagers.TURN
    assert ids(got) == [f"m{i}" for i in range(nxt, nxt + len(got))]
    assert len(got) == pagers.AHEAD - pagers.SYNC - 100  # the read's part still paged


def test_a_paused_consumer_drains_in_order_through_the_reader(tmp_path):
    """A consumer whose transport fills every 500 messages: each refill comes from what
    the reader thread brought, the queue hears when it lands, everything comes in order."""
    broker, reactor, spill, reads = setup(tmp_path, 1_000)
    queue = broker.queue("jobs")
    flood(queue, reactor, 20_000)
    got = []
    client = Client("c", "mqks")

    def deliver(c, entry):
        got.append(entry.message.id)
        if len(got) % 500 == 0:
            client.pause()

    queue.add_consumer(Consumer("k", client, deliver))
    largest = [0]
    page_in = queue.window.pager._page_in

    def counting(lane, count, wait):
        taken = page_in(lane, count, wait)
        largest[0] = max(largest[0], len(taken))
        return taken

    queue.window.pager._page_in = counting
    turns = 0
    while len(got) < 20_000:
        turns += 1
        assert turns < 1_000, "the drain stopped"
        reads.land()
        reactor.advance(0)                  # the landed reads wake the queue
        client.paused = False               # the transport drained: the door resumes it
        queue.dispatch()
    assert got == [f"m{i}" for i in range(20_000)]
    assert largest[0] <= pagers.TURN
    reactor.advance(0)
    assert os.listdir(tmp_path) == [] or not any(
        names for _, _, names in os.walk(tmp_path)), "a drained queue kept its files"


def test_a_queue_deleted_while_a_read_is_in_flight_removes_its_files_after_it(tmp_path):
    broker, reactor, spill, reads = setup(tmp_path, 10)
    queue = broker.queue("jobs")
    flood(queue, reactor, 1_000)
    queue.window.take_ready(REGULAR, 10)
    assert len(reads.pending) == 1
    broker.delete_queue("jobs")
    reactor.advance(0)
    assert any(names for _, _, names in os.walk(tmp_path)), "removed under a read"
    reads.land()
    reactor.advance(0)
    assert not any(names for _, _, names in os.walk(tmp_path))


@contextmanager
def small_reads():
    """Reads of a few records, so a read is overtaken in every way a short run can."""
    with mock.patch.multiple(pagers, AHEAD=5, SYNC=3, TURN=7, CHUNK=11, PIECE=2):
        yield


OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(1, 30)),
    st.tuples(st.just("pull"), st.integers(1, 20)),
    st.tuples(st.just("lifo"), st.integers(1, 3)),
    st.tuples(st.just("land"), st.integers(1, 3)),
    st.just(("turn", 0)),
    st.just(("peek", 0)),
    st.just(("purge", 0)),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_pulls_see_the_queue_order_whatever_the_reads_do(tmp_path_factory, ops):
    """Twino-style pulls (front and back), purges and peeks against a list, with reads
    landing at any point: the reader never reorders, loses or repeats a message."""
    root = tmp_path_factory.mktemp("spill")
    with small_reads():
        broker, reactor, spill, reads = setup(root, 3)
        queue = broker.queue("jobs")
        consumer = Consumer("k", Client("c", "twino"), lambda c, e: None, credit=0)
        queue.add_consumer(consumer)
        model, n = [], 0
        for op, k in ops:
            if op == "put":
                for _ in range(k):
                    queue.put_message(Message(f"m{n}", "s", (b"x" * (n % 7),)))
                    model.append(f"m{n}")
                    n += 1
            elif op in ("pull", "lifo"):
                lifo = op == "lifo"
                got = ids(queue.pull(consumer, k, lifo=lifo))
                want = model[::-1][:k] if lifo else model[:k]
                assert got == want
                model = model[:len(model) - len(got)] if lifo else model[len(got):]
            elif op == "land":
                reads.land(k)
            elif op == "turn":
                reactor.advance(0)
            elif op == "peek":
                assert ids(queue.stored_entries()) == model
            else:
                queue.clear()
                model = []
            assert len(queue) == len(model)
        reads.land()
        reactor.advance(0)
        assert ids(queue.pull(consumer, len(model) + 1)) == model
