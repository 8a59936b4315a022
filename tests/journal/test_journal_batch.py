"""One batch of staged records (QueueJournal.put stages, encode writes them when the
batch starts): what is settled before then is written settled in the one append, what
is requeued carries its retry, and a batch larger than the room left in a segment rolls
mid-way, each part on its own segment's time base. Real files, restarts as crashes."""
import os

from mqksbridge.bridge.journal import layout
from mqksbridge.bridge.journal.store import STAGED
from mqksbridge.protocols.textqueue import journal, scan
from tests.support.journal import Harness


def records(data_dir, queue="jobs"):
    """(segment file, control, id, retry, settle) of every message record, in file order."""
    folder = os.path.join(str(data_dir), layout.JOURNAL, layout.queue_directory(queue))
    found = []
    for name in sorted(n for n in os.listdir(folder) if layout.segment_number(n) is not None):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        header = None
        found_ = scan(data)
        tail = [found_.incomplete.record().raw] if found_.incomplete else []
        for raw in found_.raws + tail:          # the last record: whole, as recovery reads it
            if header is None:
                header = journal.decode_header(raw)
                continue
            env = journal.decode(raw, header.created_ms)
            assert journal.verify(raw)
            found.append((name, env.status, env.id, env.retry,
                          env.settled and (env.settled.reason, env.settled.door),
                          env.created_at))
    return found


def test_a_turn_written_settled_held_and_requeued_in_one_append(tmp_path):
    h = Harness(tmp_path)
    taker = h.consumer(manual_ack=False, door="mqks")    # auto-ack: settled at once
    confirmed = []
    for _ in range(3):
        h.publish(confirmed=confirmed)
    h.broker.remove_consumer(taker)
    held = h.consumer(manual_ack=True, door="twino")
    h.publish(confirmed=confirmed)                       # m4: held unacked
    h.publish(confirmed=confirmed)                       # m5: held, then rejected
    assert [e.message.id for e in held.got] == ["m4", "m5"]
    held.reject("m5")                                    # back, retry 1, delivered again
    assert h.writer.pending.appends == {} or all(
        len(parts) == 2 for parts in h.writer.pending.appends.values())   # the header only
    assert confirmed == []
    h.commit()
    assert confirmed == ["m1", "m2", "m3", "m4", "m5"]
    assert [r[1:5] for r in records(tmp_path)] == [
        ("=", "m1", 0, ("acked", "mqks")), ("=", "m2", 0, ("acked", "mqks")),
        ("=", "m3", 0, ("acked", "mqks")), ("-", "m4", 0, None), ("-", "m5", 1, None)]
    held.ack("m4")                                       # an edit of a written record
    h.commit()
    assert [r[1] for r in records(tmp_path)] == ["=", "=", "=", "=", "-"]
    after = h.restart()
    assert after.ids() == ["m5"] and after.retries() == {"m5": 1}


def test_a_batch_larger_than_the_segment_rolls_mid_way(tmp_path):
    h = Harness(tmp_path, {"segment_size": 1200})
    c = h.consumer(manual_ack=True)
    for _ in range(40):
        h.publish()
    for entry in c.got[::3]:
        c.ack(entry.message.id)
    h.clock.advance(7)                                   # the second part: a later base
    h.commit()
    found = records(tmp_path)
    assert [r[2] for r in found] == ["m%d" % i for i in range(1, 41)]
    files = sorted({r[0] for r in found})
    assert len(files) > 2
    assert {r[5] for r in found} == {1_700_000_000.0}    # each part on its own base
    folder = os.path.join(str(tmp_path), layout.JOURNAL, layout.queue_directory("jobs"))
    for name in files[:-1]:
        assert os.path.getsize(os.path.join(folder, name)) <= 1200
    acked = {e.message.id for e in c.got[::3]}
    assert [r[2] for r in found if r[1] == "="] == sorted(acked, key=lambda m: int(m[1:]))
    after = h.restart()
    assert after.ids() == ["m%d" % i for i in range(1, 41) if "m%d" % i not in acked]
    c2 = after.consumer(manual_ack=False)
    assert len(c2.got) == 40 - len(acked)


def test_a_long_turn_is_encoded_in_parts_each_written_settled(tmp_path):
    """More than STAGED puts in one turn: each part is encoded when the next put comes
    (the ones before it handed over and settled by then), so an auto-ack consumer's
    messages are still written settled, with no edit, and nothing is confirmed before
    the batch is written."""
    h = Harness(tmp_path)
    h.consumer(manual_ack=False, door="mqks")
    confirmed = []
    n = 2 * STAGED + 17
    for _ in range(n):
        h.publish(confirmed=confirmed)
    assert h.writer.pending.edits == [] and confirmed == []
    h.commit()
    assert len(confirmed) == n
    found = records(tmp_path)
    assert [r[2] for r in found] == ["m%d" % i for i in range(1, n + 1)]
    assert {r[1] for r in found} == {"="}
    assert h.restart().ids() == []


def settle_ages(data_dir, queue="jobs"):
    """id -> milliseconds from arrival to settle, of every settled record."""
    folder = os.path.join(str(data_dir), layout.JOURNAL, layout.queue_directory(queue))
    ages = {}
    for name in sorted(n for n in os.listdir(folder) if layout.segment_number(n) is not None):
        with open(os.path.join(folder, name), "rb") as f:
            found = scan(f.read())
        raws = found.raws + ([found.incomplete.record().raw] if found.incomplete else [])
        header = journal.decode_header(raws[0])
        for raw in raws[1:]:
            env = journal.decode(raw, header.created_ms)
            if env.settled:
                ages[env.id] = round((env.settled.at - env.created_at) * 1000)
    return ages


def test_a_settle_is_never_stamped_before_its_arrival(tmp_path, monkeypatch):
    """A door stamps arrival once per read, which can be after the journal's reading of
    the turn: the record written settled says 0 ms, and the batch stays on the bulk
    encoder (a negative age sent every such batch to the per-message one: durable
    fsync=never cost 7.4 instead of 4.9 us per message)."""
    def per_message(*args):
        raise AssertionError("the batch left the bulk encoder")
    monkeypatch.setattr(journal, "_each_record", per_message)
    h = Harness(tmp_path)
    h.consumer(manual_ack=False, door="mqks")            # auto-ack: settled at once
    h.publish()                                           # the turn's reading is taken
    h.publish(created_at=h.clock.seconds() + 0.005)      # a later read of the same turn
    h.commit()
    assert settle_ages(tmp_path) == {"m1": 0, "m2": 0}
