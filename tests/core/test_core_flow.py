"""Publisher flow control (core.flow) with a fake clock: who is held, when, and for how long."""
import pytest

from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.core import queue as qmod
from tests.support.inputs import Input

LIMIT = 10


def publisher(name="pub"):
    client = Client(name, "test")
    client.input = Input()
    return client


def msg(i):
    return Message(str(i), "e", (b"x",))


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def broker(clock):
    """A broker ticked every second of the fake clock, as bridge/ ticks the real one."""
    broker = Broker(clock, flow_limit=LIMIT, flow_max_hold=1.0)

    def sweep():
        clock.call_later(1.0, sweep)
        broker.tick()
    clock.call_later(1.0, sweep)
    return broker


def slow_consumer(broker, queue, client=None):
    """A consumer whose client is paused (its socket is full): messages queue up."""
    client = client or Client("slow", "test")
    got = []
    broker.add_consumer(queue, Consumer("c-" + client.id, client,
                                        lambda c, e: got.append(e.message.id)))
    client.pause()
    return client, got


def publish(broker, client, queue, ids):
    """Puts as a door makes them: the publishing client passed with each message."""
    for i in ids:
        queue.put_message(msg(i), None, client)


def test_a_congested_queue_holds_its_publisher_until_half_drained(broker):
    q = broker.queue("q")
    reader, got = slow_consumer(broker, q)
    pub = publisher()
    publish(broker, pub, q, range(LIMIT - 1))
    assert pub.input.calls == []
    publish(broker, pub, q, range(LIMIT - 1, 3 * LIMIT))     # the rest of that read
    assert pub.input.calls == ["pause"] and pub.held == {q}
    reader.resume()                                           # everything drains
    assert len(got) == 3 * LIMIT and len(q) == 0
    assert pub.input.calls == ["pause", "resume"] and not pub.held and not q.held
    assert broker.flow.holds == 1


def test_release_waits_for_the_low_mark(broker):
    q = broker.queue("q")
    reader, got = slow_consumer(broker, q)
    pub = publisher()
    publish(broker, pub, q, range(LIMIT + 4))
    consumer = q.consumers[0]
    consumer.credit = LIMIT + 4 - LIMIT // 2 - 1              # drain to just above the mark
    reader.resume()
    assert len(q) == LIMIT // 2 + 1 and pub.input.calls == ["pause"]
    consumer.add_credit(1)
    assert len(q) == LIMIT // 2 and pub.input.calls == ["pause", "resume"]


def test_storage_queues_and_non_delivering_modes_hold_no_one(broker):
    pub = publisher()
    storage = broker.queue("storage")                          # no consumers at all
    publish(broker, pub, storage, range(3 * LIMIT))
    paused = broker.queue("paused")
    slow_consumer(broker, paused, Client("r", "test"))
    paused.set_mode(qmod.PAUSED)
    publish(broker, pub, paused, range(3 * LIMIT))
    assert pub.input.calls == [] and broker.flow.holds == 0


def test_a_consumer_of_the_queue_is_never_held(broker):
    q = broker.queue("q")
    both = publisher("both")
    slow_consumer(broker, q, both)                              # it must stay free to ack
    publish(broker, both, q, range(3 * LIMIT))
    assert both.input.calls == [] and not both.held


def test_clients_without_input_and_puts_without_a_publisher_are_left_alone(broker):
    q = broker.queue("q")
    slow_consumer(broker, q)
    publish(broker, Client("no-input", "test"), q, range(3 * LIMIT))
    for i in range(3 * LIMIT):                                  # no publisher set
        q.put_message(msg(i))
    assert broker.flow.holds == 0


def test_a_stalled_queue_lets_go_and_holds_no_one_until_it_delivers(broker, clock):
    q = broker.queue("q")
    reader, got = slow_consumer(broker, q)
    pub = publisher()
    publish(broker, pub, q, range(2 * LIMIT))
    assert pub.input.calls == ["pause"]
    clock.advance(2.5)                                          # two sweeps, nothing delivered
    assert pub.input.calls == ["pause", "resume"]
    publish(broker, pub, q, range(100, 100 + 3 * LIMIT))        # free to fill it now
    assert pub.input.calls == ["pause", "resume"] and len(q) == 5 * LIMIT
    q.consumers[0].credit = 1                                   # one delivery: moving again
    reader.resume()
    assert got == ["0"]
    publish(broker, pub, q, [999])
    assert pub.input.calls == ["pause", "resume", "pause"]


def test_a_moving_queue_keeps_holding_past_max_hold_only_until_the_sweep(broker, clock):
    q = broker.queue("q")
    reader, got = slow_consumer(broker, q)
    pub = publisher()
    publish(broker, pub, q, range(2 * LIMIT))
    q.consumers[0].credit = 2                                   # a trickle, not a drain
    reader.resume()
    clock.advance(2.5)
    assert pub.input.calls == ["pause", "resume"]               # let go, but not stalled
    publish(broker, pub, q, [999])
    assert pub.input.calls == ["pause", "resume", "pause"]


def test_two_queues_holding_one_publisher(broker):
    q1, q2 = broker.queue("q1"), broker.queue("q2")
    r1, _ = slow_consumer(broker, q1, Client("r1", "test"))
    r2, _ = slow_consumer(broker, q2, Client("r2", "test"))
    pub = publisher()
    publish(broker, pub, q1, range(LIMIT))
    publish(broker, pub, q2, range(LIMIT))
    assert pub.input.calls == ["pause"] and pub.held == {q1, q2}
    r1.resume()
    assert pub.input.calls == ["pause"]
    r2.resume()
    assert pub.input.calls == ["pause", "resume"]


def test_a_departing_publisher_or_queue_ends_the_hold(broker):
    q = broker.queue("q")
    reader, _ = slow_consumer(broker, q)
    pub, other = publisher("a"), publisher("b")
    broker.connect(pub)
    publish(broker, pub, q, range(LIMIT))
    publish(broker, other, q, range(LIMIT))
    broker.disconnect(pub)
    assert not pub.held and pub.input.calls == ["pause"]        # nothing to resume: gone
    broker.delete_queue("q")
    assert other.input.calls == ["pause", "resume"] and not broker.flow.held


def test_without_a_limit_nobody_is_ever_held(clock):
    broker = Broker(clock)
    q = broker.queue("q")
    slow_consumer(broker, q)
    pub = publisher()
    publish(broker, pub, q, range(10 * LIMIT))
    assert pub.input.calls == [] and len(q) == 10 * LIMIT


# -- a full queue that rejects holds the publisher it refused ----------------------------

def test_a_rejecting_full_queue_holds_its_publisher_until_half_its_limit(clock):
    broker = Broker(clock, flow_limit=None, queue_length_limit=[("jobs", 4)])
    queue, pub = broker.queue("jobs"), publisher()
    assert [queue.put_message(msg(i), None, pub) for i in range(5)] == [True] * 4 + [False]
    assert pub.input.calls == ["pause"] and broker.flow.holds == 1   # with no flow limit too
    assert not queue.put_message(msg(5), None, pub)                 # held once
    client, got = slow_consumer(broker, queue)
    client.resume()                                  # takes all four, the queue is empty
    assert got == ["0", "1", "2", "3"] and pub.input.calls == ["pause", "resume"]


def test_a_rejecting_queue_nobody_drains_lets_go_after_max_hold_then_only_counts(clock):
    broker = Broker(clock, flow_limit=LIMIT, flow_max_hold=1.0, queue_length_limit=2)
    queue, pub = broker.queue("jobs"), publisher()
    for i in range(3):
        queue.put_message(msg(i), None, pub)
    assert pub.input.calls == ["pause"]
    clock.advance(1.0)
    broker.tick()
    assert pub.input.calls == ["pause", "resume"]
    assert not queue.put_message(msg(3), None, pub)                 # stalled: counted only
    assert pub.input.calls == ["pause", "resume"] and queue.dropped == 2
