"""The Outbox and its FlushScheduler on StringTransports and a task.Clock: one connection's
failing output (or one TextQueue outbox file's) costs that connection, never the others on
the same turn."""
import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport
from twisted.logger import globalLogPublisher

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.outbox import FlushScheduler, Outbox
from mqksbridge.bridge.textqueue import build
from mqksbridge.bridge.engine import EmbeddedEngine
from mqksbridge.core import Client, FakeClock, Message


def joined(items):
    return b"".join(items)


def broken(items):
    raise ValueError("a converter bug")


@pytest.fixture
def failures():
    """Failures logged while the test runs (log.failure events)."""
    seen = []

    def observer(event):
        if event.get("log_failure") is not None:
            seen.append(event["log_failure"])
    globalLogPublisher.addObserver(observer)
    yield seen
    globalLogPublisher.removeObserver(observer)


class Turn:
    """Outboxes sharing one scheduler on a task.Clock; `run()` is one reactor turn."""

    def __init__(self):
        self.clock = task.Clock()
        self.scheduler = FlushScheduler(self.clock)

    def outbox(self, name, render=joined, **kwargs):
        transport = StringTransport()
        client = Client(name, "test")
        return Outbox(transport, self.scheduler, client, render=render, **kwargs), transport

    def run(self):
        self.clock.advance(0)


def test_a_render_that_raises_costs_only_its_connection(failures):
    turn = Turn()
    before, before_t = turn.outbox("before")
    bad, bad_t = turn.outbox("bad", broken)
    after, after_t = turn.outbox("after")
    before.write(b"1")
    bad.defer(b"x", 1)
    after.write(b"2")
    turn.run()
    assert before_t.value() == b"1" and after_t.value() == b"2"
    assert bad_t.disconnecting and bad_t.value() == b"" and bad.closed
    assert bad.client.paused                 # the core stops handing it messages
    assert len(failures) == 1 and failures[0].check(ValueError)
    # the next turn flushes the others as usual: nobody is left marked dirty
    before.write(b"3")
    after.defer(b"4", 1)
    turn.run()
    assert before_t.value() == b"13" and after_t.value() == b"24"
    assert not turn.scheduler._dirty and turn.scheduler._call is None


def test_a_transport_that_raises_costs_only_its_connection(failures):
    turn = Turn()
    bad, bad_t = turn.outbox("bad")
    good, good_t = turn.outbox("good")

    def write(data):
        raise OSError("a transport bug")
    bad_t.write = write
    bad.write(b"lost")
    good.write(b"kept")
    turn.run()
    assert good_t.value() == b"kept" and bad_t.disconnecting
    assert len(failures) == 1 and failures[0].check(OSError)


def test_a_write_that_renders_first_does_not_raise_into_the_writer(failures):
    """A direct write renders what is deferred first, inside whoever wrote (a delivery
    during another client's publish): the failure stays with this connection."""
    turn = Turn()
    bad, bad_t = turn.outbox("bad", broken)
    bad.defer(b"x", 1)
    bad.write(b"reply")                      # must not raise here
    bad.close()
    turn.run()
    assert bad_t.value() == b"" and bad_t.disconnecting
    assert len(failures) == 1


def test_a_failing_render_closes_through_the_given_callback(failures):
    turn = Turn()
    closed = []
    bad, bad_t = turn.outbox("bad", broken, lose=lambda: closed.append(True))
    bad.defer(b"x", 1)
    turn.run()
    assert closed == [True] and not bad_t.disconnecting


def test_a_render_failing_on_resume_costs_only_that_connection(failures):
    turn = Turn()
    bad, bad_t = turn.outbox("bad", broken)
    bad.pauseProducing()
    bad.defer(b"x", 1)
    turn.run()                               # the transport is full: nothing rendered yet
    assert not failures
    bad.resumeProducing()                    # the transport calls this when it drains
    assert bad_t.disconnecting and len(failures) == 1


def test_a_textqueue_outbox_file_whose_append_raises_costs_only_that_file(failures, tmp_path):
    """The TextQueue door's outbox files share the scheduler with the socket doors: one
    whose flush raises (here a message another door's bug made, a str frame) is logged
    and closed, its deliveries go back to the queue, and the connections marked after it
    in the same turn are still flushed."""
    turn = Turn()
    broker = EmbeddedEngine(FakeClock())
    path = tmp_path / "jobs.tq"
    config = configuration.load(overrides={"textqueue": {
        "outbox": {"jobs": str(path)}, "watch": "poll", "poll_interval": 0.5}})
    door, services = build(config, broker, turn.scheduler, turn.clock, turn.clock)
    for service in services:
        service.startService()
    turn.run()                                   # the file loads and consumes `jobs`
    file = door.file(path)
    assert file.state == "open" and file.consumer is not None
    after, after_t = turn.outbox("after")
    broker.queue("jobs").put_message(Message("bad", "s", ("not bytes",)), None, None)
    after.write(b"kept")
    turn.run()
    assert after_t.value() == b"kept"
    assert len(failures) == 1 and failures[0].check(TypeError)
    assert file.state == "gone" and file.consumer is None
    assert [e.message.id for e in broker.queues["jobs"].entries] == ["bad"]
    after.write(b" again")                       # nobody is left marked dirty
    turn.run()
    assert after_t.value() == b"kept again"
    assert not turn.scheduler._dirty and turn.scheduler._call is None
    for service in reversed(services):
        service.stopService()


def test_a_closed_outbox_keeps_nothing():
    """What is written after close would never be sent: a connection that is closing (its
    transport waiting to write to a peer that does not read) must not collect deliveries."""
    turn = Turn()
    outbox, transport = turn.outbox("closing")
    outbox.write(b"last")
    outbox.close()
    for _ in range(1000):
        outbox.write(b"x" * 100)
        outbox.defer(b"y", 100)
    turn.run()
    assert outbox.parts == [] and outbox.deferred == [] and outbox.pending == 0
    assert transport.value() == b"last"


def test_a_consumer_that_never_reads_is_cut_off_past_the_limit():
    """Push-all and broadcast queues hand a paused consumer its copy anyway: past the mark
    its output grows until `limit`, then the connection is aborted and the output let go."""
    turn = Turn()
    outbox, transport = turn.outbox("stuck", high_water=1000, limit=10_000)
    outbox.pauseProducing()                  # the peer does not read: the transport is full
    for _ in range(10):
        outbox.write(b"x" * 100)
    outbox.write(b"x")
    assert outbox.client.paused and not transport.disconnecting
    while not outbox.closed:
        outbox.write(b"x" * 100)             # deliveries to a paused push-all consumer
        assert outbox.pending <= 10_100
    assert transport.disconnected and transport.disconnecting     # aborted
    assert outbox.parts == [] and outbox.pending == 0
    outbox.write(b"x" * 100)
    assert outbox.pending == 0


def test_output_past_the_mark_is_not_cut_off_while_the_transport_writes():
    """A consumer that reads, slowly, is paused at the mark, never cut off: the limit
    counts only while the transport is full."""
    turn = Turn()
    outbox, transport = turn.outbox("slow", high_water=1000, limit=2000)
    for _ in range(50):
        outbox.write(b"x" * 100)
    assert not outbox.closed and not transport.disconnecting
    turn.run()
    assert transport.value() == b"x" * 5000 and outbox.pending == 0


def test_a_turn_flushes_in_the_order_the_connections_were_made_not_marked():
    """A flush can change what another connection sees (it resumes a paused client, it
    releases held input), so the order is the connections' own: two paths that mark
    them in another order flush them alike."""
    turn = Turn()
    boxes = [turn.outbox(f"c{n}")[0] for n in range(4)]
    flushed = []
    for box in boxes:
        box.flush = (lambda flush, name: lambda: (flushed.append(name), flush())[1])(
            box.flush, box.client.id)
    for n in (2, 0, 3, 1):
        boxes[n].write(b"x")
    turn.run()
    assert flushed == ["c0", "c1", "c2", "c3"]
    flushed.clear()
    for n in (3, 1):
        boxes[n].write(b"y")
    turn.run()
    assert flushed == ["c1", "c3"]
