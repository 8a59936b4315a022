"""Dead letters end to end: a TextQueue outbox worker marks a message `!` until the
queue's max_deliveries is reached (only durable queues count deliveries), the message is
settled `!` with its reason and the door of that last reject in the queue's journal, and
lands in `<queue>.dlq`, durable too, where a consumer of any door takes it; each door's
ack is stamped in the dead-letter queue's journal."""
import pathlib

import pytest_twisted

from mqksbridge.bridge.journal import layout
from mqksbridge.protocols.textqueue import journal, scan
from tests.conftest import RunningBroker
from tests.support.textqueue import Spool, records
from tests.support.waits import until
from tests.textqueue.test_textqueue_door_outbox import deliveries, mark


def settled(data_dir, queue):
    """{message id: (control, settle reason, door)} of every record of a queue's journal."""
    found = {}
    folder = pathlib.Path(data_dir, layout.JOURNAL, layout.queue_directory(queue))
    for path in sorted(folder.rglob("*.tq")):
        scanned = scan(path.read_bytes())
        header, *rest = [*scanned.records(), journal.whole_tail(scanned.incomplete)]
        base = journal.decode_header(header).created_ms
        for record in rest:
            env = journal.decode(record.raw, base)
            found[env.id] = (record.raw[:1].decode(), env.retry,
                             env.settled and (env.settled.reason, env.settled.door))
    return found


async def dead_letter(running, spool, mqks, body, n):
    """Publish one message (confirmed: on disk), reject it in the outbox twice (the
    queue's max_deliveries); returns its id once it is in jobs.dlq."""
    assert await mqks.request(f"p{n} publish --confirm ev {body}") == f"p{n} ok "
    for round_ in (1, 2):
        await until(lambda: len(deliveries(spool.out)) >= 2 * n - 2 + round_, between=spool.step,
                    what="the delivery in the outbox")
        record = deliveries(spool.out)[-1]
        assert record.control == "-" and record.body == body
        mark(spool.out, record, "!", f"failed {round_}")
        spool.poll()
    dlq = running.broker.queues["jobs.dlq"]
    await until(lambda: len(dlq.entries) + len(dlq.consumers and
                                                dlq.consumers[0].unacked or ()) >= 1,
                between=spool.step, what="the dead letter")
    return journal.decode(deliveries(spool.out)[-1]).id


@pytest_twisted.ensureDeferred
async def test_outbox_rejects_dead_letter_to_a_durable_dlq_every_door_consumes(tmp_path):
    running = RunningBroker({"durability": {"queues": ["jobs"], "max_deliveries": 2}},
                            data_dir=tmp_path)
    await running.start()
    path = tmp_path / "outbox" / "jobs.tq"
    spool = Spool(running, tmp_path, outbox={"jobs": str(path)})
    spool.out = path
    try:
        mqks = await running.mqks()
        assert await mqks.request("r1 rebind --confirm jobs --add ev") == "r1 ok "
        dlq = running.broker.queues.get("jobs.dlq")
        # 1: to MQKS
        first = await dead_letter(running, spool, mqks, "for mqks", 1)
        dlq = running.broker.queues["jobs.dlq"]
        assert dlq.journal is not None and [e.message.id for e in dlq.entries] == [first]
        consumer = await running.mqks()
        assert await consumer.request("c1 consume --confirm jobs.dlq --manual-ack") == "c1 ok "
        line = await consumer.line()
        assert line == f"c1 ok {first} event=ev,retry=2 for mqks", line   # retries kept
        assert await consumer.request(f"a1 ack --confirm c1 {first}") == "a1 ok "
        assert await consumer.request("d1 delete_consumer --confirm c1") == "d1 ok "
        # 2: to a Malamute worker of service jobs.dlq
        second = await dead_letter(running, spool, mqks, "for malamute", 2)
        worker = await running.malamute("w1")
        await worker.set_worker("jobs.dlq", "")
        got = await worker.recv(10)
        assert got[0] == "SERVICE DELIVER" and got[-1] == (b"for malamute",), got
        await worker.close()
        # 3: to a Twino member of channel jobs.dlq
        third = await dead_letter(running, spool, mqks, "for twino", 3)
        member = await running.twino()
        assert await member.join("jobs.dlq") == 0
        frame = await member.recv(10)
        assert frame.content == b"for twino", frame
        await member.ack(frame)
        await member.ping()
        assert await mqks.request("p9 ping x") == "p9 ok x"
        await until(lambda: not dlq.entries and all(not c.unacked for c in dlq.consumers),
                    between=spool.step, what="the dead letters acked")
    finally:
        spool.stop()
        await running.stop()
    ids = (first, second, third)
    jobs = settled(tmp_path, "jobs")
    assert {jobs[i] for i in ids} == {("!", 2, ("dead-lettered", "textqueue"))}
    letters = settled(tmp_path, "jobs.dlq")
    assert [letters[i] for i in ids] == [("=", 2, ("acked", "mqks")),
                                         ("=", 2, ("acked", "malamute")),
                                         ("=", 2, ("acked", "twino"))]
    assert [r.control for r in records(path) if r.control != "#"] == ["!"] * 6
