"""The storage barrier releases confirmations in order, only once their records are stored."""
from hypothesis import given
from hypothesis import strategies as st

from mqksbridge.core.storage import StorageBarrier


def test_nothing_appended_confirms_at_once():
    barrier, done = StorageBarrier(), []
    barrier.when_stored(barrier.appended, lambda: done.append(1))
    assert done == [1]


def test_waits_for_its_own_records_and_no_longer():
    barrier, done = StorageBarrier(), []
    first = barrier.append()
    barrier.when_stored(first, lambda: done.append("a"))
    second = barrier.append()
    barrier.when_stored(second, lambda: done.append("b"))
    assert done == []
    barrier.stored(first)
    assert done == ["a"]
    barrier.stored(first)                  # a repeated report releases nothing twice
    barrier.stored(second)
    assert done == ["a", "b"]


@given(st.lists(st.one_of(st.just("append"), st.just("wait"), st.integers(0, 50)), max_size=60))
def test_each_callback_runs_once_after_its_record_in_order(script):
    barrier, released, waits = StorageBarrier(), [], []
    for step in script:
        if step == "append":
            barrier.append()
        elif step == "wait":
            seq = barrier.appended
            waits.append(seq)
            barrier.when_stored(seq, lambda seq=seq: released.append((seq, barrier.durable)))
        else:
            barrier.stored(min(step, barrier.appended))
    barrier.stored(barrier.appended)
    assert sorted(released) == released
    assert [seq for seq, _ in released] == waits
    assert all(seq <= durable for seq, durable in released)
