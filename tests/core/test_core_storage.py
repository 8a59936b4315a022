"""The storage barrier releases confirmations in order, only once their records are stored."""
from hypothesis import given
from hypothesis import strategies as st

from mqksbridge.core.storage import LateBarrier, StorageBarrier


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


class _Store:
    """A store that answers appended records in any order (a RabbitMQ publisher confirm)
    and moves a LateBarrier past every number up to the first still unanswered."""

    def __init__(self):
        self.barrier, self.unanswered, self.answered, self.refused = LateBarrier(), [], set(), set()

    def append(self):
        self.unanswered.append(self.barrier.append())

    def answer(self, i, ok):
        number = self.unanswered.pop(i % len(self.unanswered))
        if not ok:
            self.refused.add(number)
            self.barrier.refuse(number)
        self.answered.add(number)
        passed = self.barrier.durable
        while passed + 1 in self.answered:
            passed += 1
        self.barrier.stored(passed)


_STEPS = st.one_of(
    st.tuples(st.just("publish"), st.lists(st.sampled_from(["later", "ok", "refused"]),
                                           max_size=4), st.booleans()),
    st.tuples(st.just("answer"), st.integers(0, 20), st.booleans()),
    st.tuples(st.just("settle")),
    st.tuples(st.just("wait")))


@given(st.lists(_STEPS, max_size=80))
def test_each_confirmation_sees_exactly_the_refusals_of_its_records(script):
    """Random publishes (answered at once, refused at once, or later), refusals, answers in
    any order and settles between publishes: every door's callback runs once, after its
    records, and sees exactly the refusals of its own range; what the barrier keeps is
    above every waiting caller's start, and nothing once none waits."""
    store = _Store()
    barrier, asked, ranges = store.barrier, [], []
    for step in script:
        if step[0] == "publish":
            before = barrier.appended
            for verdict in step[1]:
                store.append()
                if verdict != "later":
                    store.answer(-1, verdict == "ok")
            after = barrier.appended
            if step[2]:                        # a door that confirms asks about its range
                ranges.append((before, after))
                asked.append([])
                barrier.when_stored(after, lambda lo=before, hi=after, seen=asked[-1]: seen.append(
                    (list(barrier.refused_in(lo, hi)), barrier.durable)), since=before)
        elif step[0] == "answer" and store.unanswered:
            store.answer(step[1], step[2])
        elif step[0] == "settle":
            barrier.settle()
            floor = min((since for _, _, since in barrier._waiting), default=barrier.appended)
            assert all(seq > floor for seq in barrier.refusals)
        elif step[0] == "wait":                # a caller that does not ask (no `since`)
            barrier.when_stored(barrier.appended, lambda: None)
    while store.unanswered:
        store.answer(0, True)
    for (lo, hi), calls in zip(ranges, asked):
        [(seen, durable)] = calls
        assert seen == sorted(n for n in store.refused if lo < n <= hi)
        assert durable >= hi
    barrier.settle()
    assert barrier.refusals == []


def test_a_late_barrier_keeps_a_refusal_passed_inside_a_publish_until_its_door_asks():
    barrier = LateBarrier()
    before = barrier.appended
    first = barrier.append()
    barrier.refuse(first)
    barrier.stored(first)                 # refused and passed inside the publish
    seen = []
    barrier.when_stored(first, lambda: seen.append(list(barrier.refused_in(before, first))),
                        since=before)
    assert seen == [[first]]
    barrier.settle()
    assert barrier.refusals == []


def test_a_plain_barrier_never_refuses():
    barrier = StorageBarrier()
    assert not barrier.late and barrier.refused_in(0, barrier.append()) == ()


def test_a_late_barrier_keeps_no_more_than_the_unconfirmed_window():
    """A client that makes many refusals without confirming (a full queue, published to
    in a loop) costs the barrier nothing once they are passed and settled; while one
    confirmation waits, only the records from its start on are kept."""
    store, seen = _Store(), []
    barrier = store.barrier
    for _ in range(10_000):
        store.append()
        store.answer(-1, False)
        barrier.settle()
    assert barrier.refusals == []
    before = barrier.appended
    store.append()                       # a confirmed publish RabbitMQ has not answered
    barrier.when_stored(barrier.appended, lambda: seen.append(
        list(barrier.refused_in(before, before + 1))), since=before)
    for _ in range(1_000):               # refused, not passed: the store holds them too
        store.append()
        store.answer(-1, False)
        barrier.settle()
    assert len(barrier.refusals) == 1_000 and barrier.durable == before
    store.answer(0, False)
    barrier.settle()
    assert seen == [[before + 1]] and barrier.refusals == []
