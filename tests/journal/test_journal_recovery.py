"""Durable queues on real files: what a restart after a crash brings back."""
import os

from mqksbridge.bridge.journal import layout
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
