"""A read's run of SERVICE-SENDs to a lone worker, or of MAILBOX-SENDs to a live owner, is
handed over at once (Queue.hand_run, Mailbox.hand_run, Peer._send_run: the DELIVERs encoded
together, one write), with the bytes and the flow control of one request per read: a run
that would take the worker past its high-water mark goes one by one, and the worker's
client is paused where it would be. The plain path to compare with is the same door with
the worker's run deliveries taken away."""
import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from mqksbridge.bridge.engine import EmbeddedEngine
from mqksbridge.bridge.malamute.door import MalamuteDoor
from mqksbridge.bridge.malamute.zmtp_router import ZmtpRouter
from mqksbridge.bridge.outbox import FlushScheduler
from mqksbridge.core import FakeClock
from mqksbridge.protocols.malamute import codec
from mqksbridge.protocols.zmtp.codec import GREETING, message, ready


class World:
    """A door on a ZMTP router over in-memory transports: a worker offering `svc`, a client."""

    def __init__(self, runs, high_water=None, pattern=""):
        self.clock = Clock()
        self.door = MalamuteDoor(EmbeddedEngine(FakeClock()))
        self.router = self.door.transport = ZmtpRouter(
            FlushScheduler(self.clock), self.door.received_all, self.door.lost)
        self.worker = self.peer(codec.ConnectionOpen("worker"), codec.ServiceOffer("svc", pattern))
        self.client = self.peer(codec.ConnectionOpen("client"))
        if high_water is not None:
            self.worker.outbox.high_water = high_water
        self.worker.transport.clear()
        self.queue = self.door.broker.queues["svc"]
        self.one_by_one = []             # requests the worker's consumer got one at a time
        consumer = self.queue.consumers[0]
        deliver = consumer.deliver
        consumer.deliver = lambda c, entry: (self.one_by_one.append(entry.message.id),
                                             deliver(c, entry))
        if not runs:
            consumer.deliver_run = None
            self.door.broker.mailboxes["worker"].deliver_run = None

    def peer(self, *commands):
        conn = self.router.buildProtocol(None)
        conn.makeConnection(StringTransport())
        conn.dataReceived(GREETING + ready("DEALER"))
        conn.dataReceived(b"".join(message(codec.encode(c)) for c in commands))
        self.clock.advance(0)
        return conn

    def send(self, requests):
        self.client.dataReceived(b"".join(message(codec.encode(r)) for r in requests))
        before_flush = self.worker.gate.paused, len(self.queue)
        self.clock.advance(0)
        return before_flush


def requests(n, subject="req"):
    return [codec.ServiceSend("svc", subject, "", 0, (b"%d" % k,)) for k in range(n)]


def test_a_run_goes_at_once_as_one_request_per_read_would():
    run, single = World(True), World(False)
    assert run.send(requests(50)) == single.send(requests(50)) == (False, 0)
    assert run.one_by_one == [] and len(single.one_by_one) == 50
    assert run.worker.transport.value() == single.worker.transport.value() != b""
    assert run.worker.traffic.out == single.worker.traffic.out
    assert run.queue.delivered == single.queue.delivered == 50


@pytest.mark.parametrize("pattern, subject", [("^req", "req"), ("^other", "req")])
def test_a_filtered_worker_gets_a_run_it_matches(pattern, subject):
    run, single = World(True, pattern=pattern), World(False, pattern=pattern)
    run.send(requests(20, subject))
    single.send(requests(20, subject))
    assert run.one_by_one == []
    assert run.worker.transport.value() == single.worker.transport.value()
    assert len(run.queue) == len(single.queue) == (20 if pattern == "^other" else 0)


def test_a_run_past_the_mark_goes_one_by_one_and_pauses_the_worker():
    run, single = World(True, high_water=400), World(False, high_water=400)
    paused, stored = run.send(requests(50))
    assert (paused, stored) == single.send(requests(50)) and paused and stored > 0
    assert run.one_by_one == single.one_by_one != []
    assert len(run.queue) == len(single.queue) == 0      # the flush resumed the worker
    assert run.worker.transport.value() == single.worker.transport.value()


@pytest.mark.parametrize("high_water", [None, 400])
def test_a_run_of_mail_goes_as_one_by_one(high_water):
    run, single = World(True, high_water), World(False, high_water)
    mail = [codec.MailboxSend("worker", "subj", "", 0, (b"%d" % k,)) for k in range(50)]
    for world in (run, single):
        world.client.dataReceived(b"".join(message(codec.encode(m)) for m in mail))
    assert run.worker.gate.paused == single.worker.gate.paused == (high_water is not None)
    assert len(run.door.broker.mailboxes["worker"]) == len(single.door.broker.mailboxes["worker"])
    run.clock.advance(0)
    single.clock.advance(0)
    assert run.worker.transport.value() == single.worker.transport.value() != b""
    assert run.worker.traffic.out == single.worker.traffic.out
