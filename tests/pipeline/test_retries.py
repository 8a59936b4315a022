"""Retry counts through the pipeline, on a journal a real broker wrote: a message
dead-lettered after max_deliveries hand-backs (rejects, a consumer leaving) says so in
`retry`, in its queue's record and in its copy in the dead-letter queue; a dead letter an operator retries as docs/guide.md
says (`!` flipped to `-`) starts a new count and is not dead-lettered again at its next
reject."""
import pathlib
import shutil

from mqksbridge.bridge.clients.mqks import MqksClient
from mqksbridge.pipeline.session import read
from tests.pipeline import dead_letters


def by_queue_and_id(rows):
    return {(r.queue, r.id): r for r in rows if r.status != "comment"}


def check_retries(rows, ids):
    """The retry counts of the broker journal's messages (local and cluster tests)."""
    rows = by_queue_and_id(rows)
    for name in ("dead", "back"):       # two rejects; a reject and the consumer leaving
        dead = rows[("jobs", ids[name])]
        assert (dead.status, dead.settle_reason, dead.retry) == (
            "error", "dead-lettered", dead_letters.MAX_DELIVERIES), name
        copy = rows[("jobs.dlq", ids[name])]
        assert (copy.status, copy.retry) == ("queued", dead_letters.MAX_DELIVERIES), name
    acked = rows[("jobs", ids["acked"])]
    assert (acked.status, acked.retry) == ("done", 0)


def test_dead_letter_retries_read_by_the_pipeline(spark, broker_journal):
    _, ids, journal = broker_journal
    check_retries(read(spark, [journal], ["queue", "id", "status", "settle_reason", "retry"])
                  .collect(), ids)


def test_a_retried_dead_letter_starts_a_new_count(broker_journal, tmp_path):
    workdir, ids, _ = broker_journal
    shutil.copytree(workdir / "var", tmp_path / "var")     # the other test reads the original
    segments = sorted(pathlib.Path(tmp_path, "var", "journal", "jobs").rglob("*.tq"))
    flipped = 0
    for path in segments:           # docs/guide.md: "change its `!` to `-`"
        data = bytearray(path.read_bytes())
        needle = f"\n\\i={ids['dead']}\n".encode()
        at = data.find(needle)
        if at >= 0:
            start = data.rfind(b"\n!", 0, at) + 1
            assert start > 0 and data.find(b"\n", start) <= at, "the dead letter's own record"
            data[start:start + 1] = b"-"
            path.write_bytes(bytes(data))
            flipped += 1
    assert flipped == 1
    running = dead_letters.broker(tmp_path)
    client = MqksClient(port=running.ports["mqks"], timeout=dead_letters.WAIT)
    try:
        jobs = client.consume("jobs", ["job.run"], manual_ack=True)
        got = {}
        while ids["dead"] not in got:
            delivery = dead_letters.next_of(client, jobs)
            got[delivery.id] = delivery
        assert got[ids["dead"]].retry == 0
        client.reject(jobs, ids["dead"])     # one more failure: handed back, not dead again
        again = dead_letters.next_of(client, jobs)
        assert (again.id, again.retry) == (ids["dead"], 1)
    finally:
        client.close()
        dead_letters.stop(running)
