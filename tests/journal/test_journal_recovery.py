"""Durable queues on real files: what a restart after a crash brings back."""
import os
import pathlib

from mqksbridge.bridge.journal import layout
from mqksbridge.protocols.textqueue import journal, scan
from tests.support.journal import Harness


def segments(data_dir, queue="jobs"):
    folder = os.path.join(str(data_dir), layout.JOURNAL, layout.queue_directory(queue))
    return sorted(os.path.join(folder, n) for n in os.listdir(folder)
                  if layout.segment_number(n) is not None)


def test_confirmed_messages_come_back_in_order_with_their_retries(tmp_path):
    h = Harness(tmp_path)
    confirmed = []
    for _ in range(5):
        h.publish(confirmed=confirmed)
    assert confirmed == []                      # nothing is on disk before the batch runs
    h.commit()
    assert confirmed == ["m1", "m2", "m3", "m4", "m5"]
    c = h.consumer()
    assert [e.message.id for e in c.got] == ["m1", "m2", "m3", "m4", "m5"]
    c.ack("m1")
    c.reject("m2")                              # back with retry 1: redelivered at once
    c.ack("m3")
    h.commit()
    after = h.restart()
    assert after.ids() == ["m2", "m4", "m5"]    # m2's delivery after the reject was unacked
    assert after.retries() == {"m2": 1, "m4": 0, "m5": 0}
    body = after.broker.queues["jobs"].entries[0].message.frames
    assert body == (b"body 2",)


def test_what_no_batch_wrote_is_not_confirmed_and_may_be_lost(tmp_path):
    h = Harness(tmp_path)
    confirmed = []
    h.publish(confirmed=confirmed)
    h.commit()
    h.publish(confirmed=confirmed)              # never committed: the crash comes first
    assert confirmed == ["m1"]
    assert h.restart().ids() == ["m1"]


def test_a_torn_tail_is_cut_off_and_appends_go_on_after_it(tmp_path):
    h = Harness(tmp_path)
    for _ in range(3):
        h.publish()
    h.commit()
    path = segments(tmp_path)[-1]
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(b"-torn rec")                   # a record cut short by a kill -9
    after = h.restart()
    assert after.ids() == ["m1", "m2", "m3"]
    assert os.path.getsize(path) == size        # repaired: the torn bytes are gone
    confirmed = []
    after.publish(body=b"next", confirmed=confirmed)
    after.commit()
    assert after.restart().ids() == ["m1", "m2", "m3", confirmed[0]]


def test_a_bit_flip_leaves_that_record_out_and_nothing_else(tmp_path):
    h = Harness(tmp_path)
    for _ in range(3):
        h.publish()
    h.commit()
    path = segments(tmp_path)[-1]
    data = bytearray(open(path, "rb").read())
    at = data.index(b"body 2")
    data[at] ^= 0x01                            # 'b' -> 'c'
    open(path, "wb").write(data)
    after = h.restart()
    assert after.ids() == ["m1", "m3"]
    assert any("checksum mismatch" in p for p in after.durability.problems)


def test_segments_roll_settled_ones_are_archived_and_old_ones_compacted(tmp_path):
    """A straggler in an old segment is copied forward; its segment is archived; a crash
    at any point after brings back exactly the live messages."""
    h = Harness(tmp_path, {"segment_size": 4096, "compact_live": 0.25})
    c = h.consumer()
    for _ in range(200):
        h.publish(body=b"x" * 40)
        h.commit()
    straggler = c.got[0].message.id             # held unacked throughout
    for entry in c.got[1:]:
        c.ack(entry.message.id)
    h.commit()
    for _ in range(100):                        # more traffic: rolls, compaction, archive
        h.publish(body=b"y" * 40)
        h.commit()
        c.ack(c.got[-1].message.id)
        h.commit()
    journal = h.broker.queues["jobs"].journal
    assert journal.compactions >= 1 and journal.moved >= 1
    live = segments(tmp_path)
    assert len(live) <= 2                       # the straggler no longer pins old segments
    folder = os.path.join(os.path.dirname(live[0]), layout.ARCHIVE)
    assert len(os.listdir(folder)) >= 5
    after = h.restart()
    assert after.ids() == [straggler]           # delivered but unacked: comes back, once


def test_dead_letter_after_max_deliveries(tmp_path):
    h = Harness(tmp_path, {"max_deliveries": 2})
    h.publish()
    c = h.consumer()
    c.reject("m1")                              # delivery 1 back: retry 1, redelivered
    c.reject("m1")                              # delivery 2 back: dead letter
    assert h.ids() == [] and h.ids("jobs.dlq") == ["m1"]
    h.commit()
    after = h.restart()
    assert after.ids() == [] and after.ids("jobs.dlq") == ["m1"]
    assert after.retries("jobs.dlq") == {"m1": 2}          # both hand-backs, in the copy
    data = open(segments(tmp_path)[-1], "rb").read()
    assert b"\n!body 1\n" in data and b"\\e=d" in data
    assert b"\\r=2" in data                                   # and in the dead letter's record


def test_expired_messages_are_settled(tmp_path):
    h = Harness(tmp_path)
    h.publish(expires_at=h.clock.seconds() + 5)
    h.publish()
    h.clock.advance(10)
    h.broker.tick()
    h.commit()
    assert h.restart().ids() == ["m2"]
    assert b"\\e=x" in open(segments(tmp_path)[-1], "rb").read()


def test_hand_edits_between_two_runs(tmp_path):
    """An operator turns a dead letter back into a queued record, an acked one too, and
    edits a body (vouching for it with \\c=-): the next start takes all three."""
    h = Harness(tmp_path, {"max_deliveries": 1})
    for _ in range(3):
        h.publish()
    c = h.consumer()
    c.reject("m1")                              # dead-lettered at once
    c.ack("m2")
    h.commit()
    path = segments(tmp_path)[-1]
    data = open(path, "rb").read()
    assert b"\n!body 1\n" in data and b"\n=body 2\n" in data
    data = data.replace(b"\n!body 1\n", b"\n-body 1\n").replace(b"\n=body 2\n", b"\n-body 2\n")
    start = data.index(b"-body 3\n")
    record_end = data.index(b"\\c=", start)
    checksum_end = data.index(b"\n", record_end)
    data = (data[:start] + b"-body three\n" + data[start + len(b"-body 3\n"):record_end]
            + b"\\c=-" + data[checksum_end:])
    open(path, "wb").write(data)
    after = h.restart()
    assert after.ids() == ["m1", "m2", "m3"]
    assert after.broker.queues["jobs"].entries[2].message.frames == (b"body three",)


def test_settle_stamps_name_the_consumers_door(tmp_path):
    """An ack, a dead letter after the last reject and an auto-ack hand-over each carry
    the door of the consumer that settled the record (specs/textqueue.md: K M T Q), in
    place and in a record settled before its batch was written; a door without a letter
    stamps none."""
    h = Harness(tmp_path, {"max_deliveries": 1})
    for _ in range(3):
        h.publish()
    h.commit()
    c = h.consumer(door="twino")
    c.ack("m1")                                 # in place
    c.reject("m2")                              # dead letter (max 1)
    h.commit()
    h.consumer(manual_ack=False, door="textqueue", name="later", client="q")
    h.publish(name="later")                     # handed over in its own turn: fresh
    h.consumer(manual_ack=False, name="other", client="o")
    h.publish(name="other")                     # a test client: no letter
    h.commit()
    stamps = {}
    for path in pathlib.Path(tmp_path, layout.JOURNAL).rglob("*.tq"):
        found = scan(path.read_bytes())
        header, *rest = [*found.records(), journal.whole_tail(found.incomplete)]
        base = journal.decode_header(header).created_ms
        for record in rest:
            if record.raw[:1] in b"=!":
                env = journal.decode(record.raw, base)
                stamps[env.id] = (env.settled.reason, env.settled.door)
    assert stamps == {"m1": ("acked", "twino"), "m2": ("dead-lettered", "twino"),
                      "m4": ("acked", "textqueue"), "m5": ("acked", None)}


def test_overflow_settles_what_it_drops_or_moves(tmp_path):
    """A full durable queue's overflow policy takes the oldest message out of the queue and
    out of its journal too: a restart brings back neither a dropped message nor a second
    copy of a dead-lettered one."""
    h = Harness(tmp_path)
    h.broker.queue("jobs", max_messages=2, overflow="drop-oldest")
    h.broker.queue("mail", max_messages=2, overflow="dead-letter:mail.over")
    for name in ("jobs", "jobs", "jobs", "mail", "mail", "mail"):
        h.publish(name)
    assert h.ids() == ["m2", "m3"] and h.ids("mail.over") == ["m4"]
    h.commit()
    after = h.restart()
    assert after.ids() == ["m2", "m3"]
    assert after.ids("mail") == ["m5", "m6"] and after.ids("mail.over") == ["m4"]
