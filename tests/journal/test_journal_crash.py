"""kill -9 a real `twistd -n mqksbridge` at random moments under confirmed traffic (MQKS
`--confirm` publishers and a Twino producer acked under `saved`, into one durable queue
that an MQKS consumer, a Twino member and a Malamute worker share): after each restart
every message whose publish was confirmed is delivered, or else was settled by the
Malamute worker (no ack in Malamute: settled when handed over, so one handed over and not
yet read when the broker died is lost, at most its credit per kill); duplicates only for
messages delivered before a crash (delivered but unacked on disk when it died)."""
import random
import threading
from collections import Counter, defaultdict

from tests.journal.crash import (MalamuteWorker, MqksConsumer, MqksPublisher, Tally,
                                 TwinoConsumer, TwinoPublisher, settled_by)
from tests.support.process import BrokerProcess

CONFIG = """
[twino]
producer_ack_default = "saved"

[durability]
queues = ["jobs"]
fsync = "always"
segment_size = 1048576
"""


def broker(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text(CONFIG)
    return BrokerProcess(tmp_path, doors=("mqks", "twino", "malamute"),
                         args=["--config", str(config)])


def test_kill_9_loses_no_confirmed_message(tmp_path):
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    process = broker(tmp_path)
    confirmed, delivered = Tally(), Tally()
    runs = 0
    through_twino = 0
    malamute_read = set()
    while len(confirmed) < 100_000 and runs < 12:
        runs += 1
        process.start()
        port = process.ports["mqks"]
        stop = threading.Event()
        consumer = MqksConsumer(stop, port, b"jobs", delivered, runs)
        publishers = [MqksPublisher(stop, port, b"r%d.p%d" % (runs, k), confirmed)
                      for k in range(2)]
        publishers.append(TwinoPublisher(stop, process.ports["twino"], "jobs", "r%d.t" % runs,
                                         confirmed))
        if runs == 1:                           # the first consume binds jobs to ev
            consumer.start()
            assert consumer.ready.wait(10), process.log()
        for p in publishers:
            p.start()
        if runs > 1:                            # the binding came back from definitions.json
            floor = len(confirmed) + 2_000
            assert confirmed.wait(lambda items: len(items) >= floor, 60), process.log()
            consumer.start()
        member = TwinoConsumer(stop, process.ports["twino"], "jobs", delivered, runs)
        member.start()                          # competes with the MQKS consumer
        worker = MalamuteWorker(stop, "tcp://127.0.0.1:%d" % process.ports["malamute"],
                                "jobs", delivered, runs, malamute_read)
        worker.start()                          # and so does a Malamute worker
        target = len(confirmed) + rng.randrange(5_000, 40_000)
        assert confirmed.wait(lambda items: len(items) >= target, 60), process.log()
        process.process.kill()                  # SIGKILL, at a moment the traffic chose
        process.process.wait(10)
        stop.set()
        for thread in (consumer, member, worker, *publishers):
            thread.join(10)
            assert thread.error is None, thread.error
        through_twino += member.count
    # The Malamute worker's settles on disk: no Malamute consumer settles anything after.
    by_malamute = settled_by(tmp_path / "var", "jobs", "malamute")
    # One more run drains the queue: everything confirmed and not yet seen must come.
    runs += 1
    process.start()
    stop = threading.Event()
    consumer = MqksConsumer(stop, process.ports["mqks"], b"jobs", delivered, runs)
    consumer.start()
    seen = lambda items: {mid for mid, _ in items}          # noqa: E731
    everything = set(confirmed.items)
    delivered.wait(lambda items: everything - by_malamute <= seen(items), 60)
    stop.set()
    process.stop()
    # Malamute has no ack: what the worker was handed and had not read when the broker died
    # is settled in the journal (`=` by the Malamute door) and gone. Nothing else may be
    # missing; the worker's credit bounds what it had unread at each kill.
    missing = everything - seen(delivered.items)
    lost = missing - by_malamute
    assert not lost, f"seed {seed}: {len(lost)} confirmed messages lost, e.g. " \
                     f"{sorted(lost)[:5]}"
    unread = by_malamute - malamute_read
    assert len(unread) <= worker.credit * (runs - 1), \
        f"seed {seed}: {len(unread)} settled by the Malamute door, never read by its worker"
    # Duplicates: a message delivered twice must have been delivered in an earlier run
    # (the broker died before its ack reached the disk); never twice in one run.
    runs_of = defaultdict(list)
    for mid, run in delivered.items:
        runs_of[mid].append(run)
    twice_in_a_run = [mid for mid, rs in runs_of.items() if max(Counter(rs).values()) > 1]
    assert not twice_in_a_run, f"seed {seed}: redelivered within one run: {twice_in_a_run[:5]}"
    duplicates = sum(len(rs) - 1 for rs in runs_of.values())
    assert len(confirmed) >= 100_000
    twino = sum(1 for mid in everything if b".t." in mid)
    assert twino, "the Twino producer had nothing confirmed"
    assert through_twino, "the Twino member was handed nothing"
    assert malamute_read, "the Malamute worker was handed nothing"
    print(f"{runs - 1} kills, {len(confirmed)} confirmed ({twino} through Twino), "
          f"{through_twino} delivered to the Twino member, {len(malamute_read)} to the Malamute "
          f"worker ({len(by_malamute)} settled by it in the journal: {len(unread)} unread at a "
          f"kill, {len(missing)} of those confirmed: lost), {duplicates} redelivered after a crash "
          f"(seed {seed})")
