"""Per-queue length and byte limits by name, and what a put into a full queue does
(core.limits overflow policies; docs/delivery.md, "Limits")."""
import pytest

from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.core.limits import ByName, overflow_error


def msg(i, size=1):
    return Message(str(i), "e", (b"x" * size,))


def stored(queue):
    return [e.message.id for e in (*queue.priority, *queue.entries)]


def make(**settings):
    return Broker(FakeClock(), **settings)


def test_reject_is_the_default():
    broker = make(queue_length_limit=[("jobs.*", 2)])
    q = broker.queue("jobs.a")
    assert [q.put_message(msg(i)) for i in range(3)] == [True, True, False]
    assert stored(q) == ["0", "1"] and q.dropped == 1
    assert broker.queue("other").max_messages is None


def test_drop_oldest_keeps_the_newest():
    broker = make(queue_length_limit=3, queue_overflow=[("logs.*", "drop-oldest")])
    q = broker.queue("logs.a")
    assert all(q.put_message(msg(i)) for i in range(10))
    assert stored(q) == ["7", "8", "9"] and q.dropped == 7
    assert broker.queue("jobs").overflow == "reject"


def test_drop_oldest_by_bytes_and_a_message_too_large_for_the_queue():
    broker = make(queue_size_limit=10, queue_overflow="drop-oldest")
    q = broker.queue("q")
    for i in range(4):
        assert q.put_message(msg(i, 4))
    assert stored(q) == ["2", "3"] and q.bytes == 8
    assert not q.put_message(msg("big", 11))          # nothing makes room for it
    assert stored(q) == [] and q.bytes == 0


def test_dead_letter_moves_the_oldest():
    broker = make(queue_length_limit=[("dlq", None), ("*", 2)],
                  queue_overflow=[("dlq", "reject"), ("*", "dead-letter:dlq")])
    q = broker.queue("q")
    for i in range(5):
        assert q.put_message(msg(i))
    assert stored(q) == ["3", "4"] and q.dead_lettered == 3
    assert stored(broker.queues["dlq"]) == ["0", "1", "2"]


def test_two_queues_dead_lettering_to_each_other_do_not_ping_pong():
    broker = make(queue_length_limit=1, queue_overflow=[("a", "dead-letter:b"),
                                                        ("b", "dead-letter:a")])
    a, b = broker.queue("a"), broker.queue("b")
    b.put_message(msg("b0"))
    for i in range(3):
        assert a.put_message(msg(i))
    assert stored(a) == ["2"] and len(b) == 1


def test_a_dead_letter_delivery_that_fills_another_queue_lets_that_queue_dead_letter():
    """Only the dead-letter queue itself drops instead of forwarding: a consumer of it that
    publishes on (inline, as a relay does) into another full queue sees that queue's own
    policy."""
    broker = make(queue_length_limit=[("b", None), ("d", None), ("*", 1)],
                  queue_overflow=[("a", "dead-letter:b"), ("c", "dead-letter:d")])
    a, b, c = broker.queue("a"), broker.queue("b"), broker.queue("c")
    relay = Client("relay", "test")
    broker.add_consumer(b, Consumer("r", relay, lambda consumer, entry: c.put_message(
        Message("re-" + entry.message.id, "e", (b"x",)))))
    assert a.put_message(msg(0)) and a.put_message(msg(1))    # 0 goes to b, on to c
    assert a.put_message(msg(2))                              # 1 goes to b; c full: re-0 to d
    assert stored(c) == ["re-1"] and stored(broker.queues["d"]) == ["re-0"]


def test_unacked_messages_are_never_taken():
    broker = make(queue_length_limit=1, queue_overflow="drop-oldest")
    q = broker.queue("q")
    got = []
    client = Client("c", "test")
    client.pause()                                    # holds what comes after the first
    c = Consumer("c", client, lambda consumer, entry: got.append(entry), manual_ack=True)
    client.resume()
    broker.add_consumer(q, c)
    assert q.put_message(msg(0))                      # handed over, unacked
    client.pause()
    for i in range(1, 4):
        assert q.put_message(msg(i))
    assert [e.message.id for e in got] == ["0"] and stored(q) == ["3"]
    assert "0" in {e.message.id for e in c.unacked.values()}


@pytest.mark.parametrize("policy", ["reject", "drop-oldest", "dead-letter:x"])
def test_policies_are_known(policy):
    assert overflow_error(policy) is None


@pytest.mark.parametrize("policy", ["", "drop", "dead-letter:", 3, None])
def test_other_policies_are_refused(policy):
    assert overflow_error(policy)


def test_rules_by_name_first_match_wins():
    rules = ByName([("a.*", "drop-oldest"), ("*", "dead-letter:d")], "reject")
    assert rules("a.b") == "drop-oldest" and rules("b") == "dead-letter:d"
    assert ByName(None, "reject")("x") == "reject"
