"""A confirmation is sent only once the record is on disk: the journal's worker thread is
held on a threading.Event while the test checks that no confirmation has arrived."""
import json
import threading

import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import threads

from mqksbridge.protocols.twino.codec import Frame, MessageType
from tests.conftest import RunningBroker
from tests.support.admin import fetch
from mqksbridge.protocols.textqueue import journal
from tests.support.textqueue import Spool, controls, records
from tests.support.waits import until
from tests.support.wire import START
from tests.twino.helpers import make_queue


class HeldWriter:
    """Runs each batch on the real worker thread, but first waits for `gate`; `entered`
    is set once a batch is waiting there (its appends not yet written)."""

    def __init__(self, writer):
        self.writer = writer
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.run = writer.run
        writer.run = self

    def __call__(self, work, batch):
        def held(batch):
            self.entered.set()
            self.gate.wait(30)
            return work(batch)
        return self.run(held, batch)


async def idle(writer):
    """`writer` once no batch is waiting or running: a batch still under way (a queue
    definition a consume wrote, whose reply may reach the client first) would otherwise
    be the one a test's gate holds, and the publish it means to hold would run after it."""
    await until(lambda: not writer.pending and writer.in_flight is None,
                what="the journal writer idle")
    return writer


async def started(tmp_path, queues=("jobs",), **durability):
    running = RunningBroker({"durability": {"queues": list(queues), **durability}},
                            data_dir=tmp_path)
    await running.start()
    return running


@pytest_twisted.ensureDeferred
async def test_mqks_confirm_waits_for_the_fsync(tmp_path):
    running = await started(tmp_path)
    try:
        consumer = await running.mqks()
        assert await consumer.request("c1 consume --confirm jobs ev --manual-ack") == "c1 ok "
        held = HeldWriter(await idle(running.top.durability.writer))
        publisher = await running.mqks()
        publisher.send("p1 publish --confirm ev hello", "p2 ping x")
        # handed straight to the consumer: the record is its only store until acked
        assert await consumer.line() == "c1 ok p1 event=ev hello"
        await threads.deferToThread(held.entered.wait, 10)
        other = await running.mqks()            # a barrier that needs no disk
        assert await other.request("o1 publish --confirm other x") == "o1 ok "
        assert await other.request("o2 ping y") == "o2 ok y"
        assert not publisher.lines             # neither the ok nor the pong behind it
        held.gate.set()
        assert await publisher.lines_n(2) == ["p1 ok ", "p2 ok x"]
    finally:
        running.top.durability.writer.run.gate.set()
        await running.stop()


class GatedWriter(HeldWriter):
    """HeldWriter that lets one batch through per `permits.release()`."""

    def __init__(self, writer):
        super().__init__(writer)
        self.permits = threading.Semaphore(0)
        self.gate = self                    # finally: gate.set() lets every batch go

    def wait(self, timeout):
        self.permits.acquire(timeout=timeout)

    def set(self):
        self.permits.release(100)


@pytest_twisted.ensureDeferred
async def test_mqks_confirms_of_two_batches_are_each_sent_after_their_own_fsync(tmp_path):
    """One connection's confirmations wait together (one storage waiter per connection):
    those of the batch on disk go, those of the next batch keep waiting for theirs."""
    running = await started(tmp_path)
    try:
        consumer = await running.mqks()
        assert await consumer.request("c1 consume --confirm jobs ev --manual-ack") == "c1 ok "
        held = GatedWriter(await idle(running.top.durability.writer))
        publisher = await running.mqks()
        publisher.send("p1 publish --confirm ev one")
        assert await consumer.line() == "c1 ok p1 event=ev one"
        await threads.deferToThread(held.entered.wait, 10)     # batch 1: p1, held
        held.entered.clear()
        publisher.send("p2 publish --confirm ev two", "p3 publish --confirm ev three",
                       "p4 ping x")
        assert await consumer.lines_n(2) == ["c1 ok p2 event=ev two", "c1 ok p3 event=ev three"]
        assert not publisher.lines
        held.permits.release()
        assert await publisher.line() == "p1 ok "
        await threads.deferToThread(held.entered.wait, 10)     # batch 2: p2 and p3, held
        other = await running.mqks()
        assert await other.request("o1 ping y") == "o1 ok y"
        assert not publisher.lines
        held.permits.release()
        assert await publisher.lines_n(3) == ["p2 ok ", "p3 ok ", "p4 ok x"]
    finally:
        running.top.durability.writer.run.gate.set()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_mqks_confirm_of_a_non_durable_publish_does_not_wait(tmp_path):
    running = await started(tmp_path)
    try:
        held = HeldWriter(await idle(running.top.durability.writer))
        client = await running.mqks()
        assert await client.request("c1 consume --confirm jobs ev --manual-ack") == "c1 ok "
        client.send("p1 publish --confirm ev durable")
        await threads.deferToThread(held.entered.wait, 10)
        other = await running.mqks()
        assert await other.request("c2 consume --confirm scratch ev2") == "c2 ok "
        other.send("p2 publish --confirm ev2 fleeting")
        assert sorted(await other.lines_n(2)) == ["c2 ok p2 event=ev2 fleeting", "p2 ok "]
        assert list(client.lines) == [b"c1 ok p1 event=ev durable"]   # its ok still waits
        held.gate.set()
        assert await client.lines_n(2) == ["c1 ok p1 event=ev durable", "p1 ok "]
    finally:
        running.top.durability.writer.run.gate.set()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_twino_persistent_queue_acks_the_producer_and_says_saved_after_the_fsync(
        tmp_path):
    """A queue whose delivery handler is `persistent` (decision AfterSaved) is durable
    without any configured pattern; its producer ack and the Saved MessageProduced event
    both wait for the fsync."""
    running = await started(tmp_path, queues=())
    try:
        owner, producer = await running.twino(), await running.twino()
        await make_queue(owner, "orders", 1, status="pull", handler="persistent")
        assert running.broker.queues["orders/1"].journal is not None
        assert await owner.subscribe("MessageProduced", "orders", 1) == 0
        held = HeldWriter(await idle(running.top.durability.writer))
        push = Frame(MessageType.QUEUE_MESSAGE, pending_ack=True, message_id="o-1",
                     source=producer.client_id, target="orders", content_type=1,
                     content=b"order 1")
        await producer.send_frame(push)
        await threads.deferToThread(held.entered.wait, 10)
        await producer.ping()                   # output is in order: an ack would be first
        assert not producer.client._inbox, producer.client._inbox
        await owner.ping()
        assert not owner.client._inbox          # no MessageProduced yet either
        held.gate.set()
        ack = await producer.recv(5)
        assert ack.type == MessageType.ACKNOWLEDGE and ack.message_id == "o-1", ack
        assert ack.header("Nack-Reason") is None
        event = await owner.recv(5)
        assert event.source == "MessageProduced" and json.loads(event.content)["Saved"] is True
    finally:
        running.top.durability.writer.run.gate.set()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_twino_received_policy_acks_a_push_to_a_durable_queue_after_the_fsync(
        tmp_path):
    """The configured `received` producer-ack policy (no persistent handler: the queue
    is durable by pattern) also waits for the fsync before it acks."""
    running = RunningBroker({"durability": {"queues": ["orders/*"]},
                             "twino": {"producer_ack": [["orders/*", "received"]]}},
                            data_dir=tmp_path)
    await running.start()
    try:
        owner, producer = await running.twino(), await running.twino()
        await make_queue(owner, "orders", 2, status="pull")
        assert running.broker.queues["orders/2"].journal is not None
        held = HeldWriter(await idle(running.top.durability.writer))
        push = Frame(MessageType.QUEUE_MESSAGE, pending_ack=True, message_id="r-1",
                     source=producer.client_id, target="orders", content_type=2,
                     content=b"order 2")
        await producer.send_frame(push)
        await threads.deferToThread(held.entered.wait, 10)
        await producer.ping()                   # output is in order: an ack would be first
        assert not producer.client._inbox, producer.client._inbox
        held.gate.set()
        ack = await producer.recv(5)
        assert ack.type == MessageType.ACKNOWLEDGE and ack.message_id == "r-1", ack
    finally:
        running.top.durability.writer.run.gate.set()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_admin_reports_durability_and_the_fsync_histogram(tmp_path):
    running = await started(tmp_path)
    try:
        client = await running.mqks()
        assert await client.request("c1 consume --confirm jobs ev") == "c1 ok "
        assert await client.request("c2 consume --confirm scratch ev2") == "c2 ok "
        client.send("p1 publish --confirm ev hello")
        assert sorted(await client.lines_n(2)) == ["c1 ok p1 event=ev hello", "p1 ok "]
        view = running.top.admin.view
        jobs, scratch = view.queue(running.broker.queues["jobs"]), \
            view.queue(running.broker.queues["scratch"])
        assert jobs["durable"] is True and jobs["journal_bytes"] > 0
        assert scratch["durable"] is False and scratch["journal_bytes"] is None
        status, _, raw = await threads.deferToThread(fetch, running.port("admin"), "/metrics")
        assert status == 200
        fsync = {(s.name, s.labels.get("le")): s.value
                 for f in text_string_to_metric_families(raw.decode())
                 if f.name == "mqksbridge_fsync_seconds" for s in f.samples}
        count = fsync["mqksbridge_fsync_seconds_count", None]
        assert count >= 1 and fsync["mqksbridge_fsync_seconds_sum", None] > 0, fsync
        assert fsync["mqksbridge_fsync_seconds_bucket", "+Inf"] == count
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_textqueue_inbox_marks_a_record_taken_only_after_the_fsync(tmp_path):
    """An inbox record published to a durable queue is flipped to `=` (the publisher's
    confirmation) only once its journal record is synced; one for a queue in memory is
    flipped meanwhile."""
    running = await started(tmp_path)
    spool = Spool(running, tmp_path)
    try:
        mqks = await running.mqks()
        assert await mqks.request("c1 consume --confirm jobs") == "c1 ok "
        assert await mqks.request("c2 consume --confirm scratch") == "c2 ok "
        held = HeldWriter(await idle(running.top.durability.writer))
        spool.write("jobs.tq", "-kept\n")
        spool.poll()
        await threads.deferToThread(held.entered.wait, 10)
        assert await mqks.line() == "c1 ok " + mqks_delivery(spool, "jobs.tq", "kept")
        spool.write("scratch.tq", "-fleeting\n")
        await until(lambda: controls(spool.path("scratch.tq")) == "=", between=spool.poll,
                    what="the in-memory record marked")
        assert controls(spool.path("jobs.tq")) == "-"        # its fsync is still held
        held.gate.set()
        await until(lambda: controls(spool.path("jobs.tq")) == "=", between=spool.step,
                    what="the durable record marked")
    finally:
        running.top.durability.writer.run.gate.set()
        spool.stop()
        await running.stop()


def mqks_delivery(spool, name, body):
    tag = spool.door.file(spool.path(name)).tag
    queue = name[:-3]
    return f"tq-{tag}-0 event={queue},origin=textqueue,sender={name} {body}"


@pytest_twisted.ensureDeferred
async def test_a_publish_without_an_arrival_time_is_journaled_with_the_time_it_came(
        tmp_path):
    """MQKS messages carry no created time; their journal records must (the pipeline
    reports ages and waits from it): the broker's clock when the journal took them."""
    running = await started(tmp_path)
    try:
        consumer = await running.mqks()
        assert await consumer.request("c1 consume --confirm jobs ev --manual-ack") == "c1 ok "
        running.clock.advance(5)
        publisher = await running.mqks()
        assert await publisher.request("p1 publish --confirm ev hello") == "p1 ok "
        assert await consumer.line() == "c1 ok p1 event=ev hello"
        segment = running.top.durability.store.journals["jobs"].segments[0]
        await running.top.durability.writer.flush()
        queued = [r for r in records(segment.path) if r.control in "-="]
        envelope = journal.decode(queued[0], segment.created_ms)
        assert envelope.frames == (b"hello",)
        assert envelope.created_at == START + 5
    finally:
        await running.stop()
