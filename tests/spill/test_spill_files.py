"""The spill's scratch files in process: real files under a temporary directory, the
worker's writes run inline when a task.Clock turns (the reactor's end of turn)."""
import os

from twisted.internet import defer, task

from mqksbridge.bridge.memory import MemoryWatermark
from mqksbridge.bridge.spill import Spill
from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.protocols.textqueue import journal as records
from mqksbridge.protocols.textqueue.queued import scan_queued


class Seconds:
    seconds = staticmethod(lambda: 1_700_000_000.0)


def setup(root, messages=10):
    broker = Broker(FakeClock(1_700_000_000.0))
    reactor = task.Clock()
    spill = Spill(str(root), broker, reactor, Seconds(), 1 << 20, messages, None,
                  run=lambda work, *args: defer.maybeDeferred(work, *args))
    broker.windows = spill.window
    return broker, reactor, spill


def files(root):
    found = []
    for folder, _, names in os.walk(root):
        found += [os.path.join(folder, n) for n in names]
    return sorted(found)


def take_all(queue):
    got = []
    client = Client("c", "mqks")
    queue.add_consumer(Consumer("k", client, lambda c, e: got.append(e)))
    return got


def test_pages_are_textqueue_records_read_back_in_order(tmp_path):
    broker, reactor, spill = setup(tmp_path)
    queue = broker.queue("jobs")
    seen = []
    for i in range(100):
        observer = (lambda *a, i=i: seen.append((i, a[0]))) if i == 50 else None
        queue.put_message(Message(f"m{i}", "s", (b"body %d" % i,), {"k": str(i)},
                                  priority=(i % 10 == 0)), observer)
    reactor.advance(0)
    assert len(queue) == 100 and queue.window.paged == 100 - 20   # 10 resident a lane
    segments = files(tmp_path)
    assert len(segments) == 1
    data = open(segments[0], "rb").read()
    scanned = scan_queued(data)
    assert len(scanned.offsets) == 80              # every paged message, one `-` record each
    assert records.decode(scanned.raws[0], 0).id  # the journal's own decoder reads them
    got = take_all(queue)
    order = [f"m{i}" for i in range(0, 100, 10)] + [f"m{i}" for i in range(100) if i % 10]
    assert [e.message.id for e in got] == order
    assert [e.message.frames for e in got][10] == (b"body 1",)
    assert got[10].message.headers == {"k": "1"} and got[0].message.priority
    assert seen == [(50, "sent"), (50, "ack")]     # the observer rode along on disk
    reactor.advance(0)
    assert files(tmp_path) == [], "a drained queue kept its spill segment"


def test_a_failed_write_keeps_pages_in_memory_and_holds_publishers(tmp_path):
    root = tmp_path / "spill"
    root.write_text("in the way")                  # the directory cannot be made: writes fail
    broker, reactor, spill = setup(root)
    queue = broker.queue("jobs")
    for i in range(50):
        queue.put_message(Message(f"m{i}", "s", (b"x",)))
    reactor.advance(0)
    assert spill.failed and spill.pressure() and spill.failures
    root.unlink()                                  # room again: the next check writes them
    spill.check()
    reactor.advance(0)
    assert not spill.failed and not spill.pressure()
    assert len(files(root)) == 1
    assert [e.message.id for e in take_all(queue)] == [f"m{i}" for i in range(50)]


def test_pages_past_the_cap_sound_the_memory_alarm_at_once_and_trim_when_written(tmp_path):
    """A disk slower than the publishers: the write that takes the waiting pages past the
    global cap runs the memory check then (no periodic check turns here), and once they
    are all written glibc is asked once to give the freed blocks back."""
    writes, trims = [], []
    broker = Broker(FakeClock(1_700_000_000.0))
    reactor = task.Clock()

    def later(work, *args):
        d = defer.Deferred()
        writes.append((d, work, args))
        return d

    spill = Spill(str(tmp_path), broker, reactor, Seconds(), 1 << 20, 10, 4096, run=later)
    broker.windows = spill.window
    spill.memory = MemoryWatermark(None, {}, used=lambda: 0, trim=lambda: trims.append(1),
                                   spill=spill)
    queue = broker.queue("jobs")
    for i in range(200):
        queue.put_message(Message(f"m{i}", "s", (b"x" * 100,)))
        reactor.advance(0)
    assert spill.pending > 4096 and spill.memory.alarm and spill.memory.alarms == 1
    while writes:
        d, work, args = writes.pop(0)
        work(*args)
        d.callback(None)
    assert spill.pending == 0 and trims == [1]
    spill.memory.check()
    assert not spill.memory.alarm
    assert [e.message.id for e in take_all(queue)] == [f"m{i}" for i in range(200)]


def test_requeued_and_deleted(tmp_path):
    """A rejected message goes to the back, paged out with its retry count; deleting the
    queue removes its files."""
    broker, reactor, spill = setup(tmp_path, messages=2)
    queue = broker.queue("jobs")
    client = Client("c", "mqks")
    held = []
    consumer = Consumer("k", client, lambda c, e: held.append(e), manual_ack=True, credit=1)
    queue.add_consumer(consumer)
    for i in range(10):
        queue.put_message(Message(f"m{i}", "s", (b"x",)))
    first = held[0].message.id
    consumer.reject(first)
    reactor.advance(0)
    assert queue.window.paged and files(tmp_path)
    stored = [e for e in queue.stored_entries()]
    assert stored[-1].message.id == first and stored[-1].retry == 1
    broker.delete_queue("jobs")
    reactor.advance(0)
    assert files(tmp_path) == []


def test_admin_move_takes_the_paged_backlog_too(tmp_path):
    from mqksbridge.bridge.admin.actions import move
    broker, reactor, spill = setup(tmp_path)
    source = broker.queue("jobs")
    for i in range(50):
        source.put_message(Message(f"m{i}", "s", (b"x",)))
    reactor.advance(0)
    assert source.window.paged == 40
    broker.queue("other")
    assert move(broker, "jobs", "other")["moved"] == 50
    assert len(source) == 0 and source.bytes == 0
    other = broker.queues["other"]
    assert other.lengths() == (0, 50)
    assert [e.message.id for e in other.stored_entries()] == [f"m{i}" for i in range(50)]
