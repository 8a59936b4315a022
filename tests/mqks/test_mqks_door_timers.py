"""The MQKS door's timers on the fast layer (tests.support.wire): StringTransports and a
task.Clock. Delete-when-unused is the core's one-off timer on the injected clock; flow
holds are let go by the broker's periodic sweep. test_mqks_scenarios.py (S13, S14) and
test_mqks_robustness.py prove the same over real sockets.
"""
import pytest

from mqksbridge.protocols.twino.codec import Frame, MessageType, new_id
from tests.support.wire import Harness
from tests.twino.test_twino_door_timers import create_queue


def test_when_unused_deletes_the_queue_exactly_that_long_after_its_last_consumer(harness):
    c, p = harness.mqks(), harness.mqks()
    consume = "consume --confirm q1 e1 --delete-queue-when-unused=1"
    assert c.request(f"c1 {consume}") == ["c1 ok "]
    assert c.request("d1 delete_consumer --confirm c1") == ["d1 ok "]
    harness.advance(0.99)
    assert p.request("v1 _eval len(state.queues)") == ["v1 ok 1"]
    assert c.request(f"c2 {consume}") == ["c2 ok "]           # cancels the timer
    harness.advance(5)
    assert p.request("v2 _eval len(state.queues)") == ["v2 ok 1"]
    assert c.request("d2 delete_consumer --confirm c2") == ["d2 ok "]  # starts it anew
    harness.advance(0.99)
    assert p.request("v3 _eval len(state.queues)") == ["v3 ok 1"]
    harness.advance(0.02)
    assert p.request("v4 _eval len(state.queues)") == ["v4 ok 0"]
    assert p.request("m1 publish --confirm e1 gone") == ["m1 ok "]
    assert c.request(f"c3 {consume}") == ["c3 ok "]           # a new, empty queue


def test_a_disconnect_starts_the_when_unused_timer_too(harness):
    c, p = harness.mqks(), harness.mqks()
    assert c.request("c1 consume --confirm q1 e1 --delete-queue-when-unused=2") == ["c1 ok "]
    c.close()
    harness.advance(1.9)
    assert "q1" in harness.broker.queues
    harness.advance(0.2)
    assert "q1" not in harness.broker.queues
    assert p.request("v _eval len(state.queues)") == ["v ok 0"]


@pytest.fixture
def flow():
    """Queues hold 10 messages before a publisher is held, for at most 1 s; a consumer
    is paused once 200 bytes wait for its socket."""
    built = Harness({"broker": {"flow_limit": 10, "flow_max_hold": 1.0},
                     "mqks": {"high_water": 200}})
    yield built
    built.stop()


def test_a_held_publisher_is_let_go_by_the_sweep_after_max_hold(flow):
    """The consumer's socket is full and stays full: the publisher is held once the queue
    holds the limit, let go by the sweep after flow_max_hold, and not held again by a
    queue that delivered nothing meanwhile (stalled)."""
    c, p = flow.mqks(), flow.mqks()
    assert c.request("c1 consume --confirm fq fe") == ["c1 ok "]
    c.transport.producer.pauseProducing()    # what a full socket tells the Outbox
    p.send_lines(*(f"m{n} publish fe {'x' * 50}" for n in range(40)))
    assert p.transport.producerState == "paused"               # held: not read any more
    assert flow.broker.flow.holds == 1
    flow.advance(0.5)
    assert p.transport.producerState == "paused"
    flow.advance(1)                          # the sweep past max_hold lets go
    assert p.transport.producerState == "producing" and not flow.broker.flow.held
    p.send_lines(*(f"n{n} publish fe y" for n in range(40)))
    assert p.transport.producerState == "producing"            # stalled: holds no one
    c.transport.producer.resumeProducing()   # the socket drains: everything, in order
    flow.turn()
    lines = c.lines()
    assert lines == ([f"c1 ok m{n} event=fe {'x' * 50}" for n in range(40)]
                     + [f"c1 ok n{n} event=fe y" for n in range(40)])


def test_a_held_publisher_is_let_go_as_soon_as_the_consumer_catches_up(flow):
    c, p = flow.mqks(), flow.mqks()
    assert c.request("c1 consume --confirm fq fe") == ["c1 ok "]
    c.transport.producer.pauseProducing()
    p.send_lines(*(f"m{n} publish fe {'x' * 50}" for n in range(40)))
    assert p.transport.producerState == "paused"
    c.transport.producer.resumeProducing()
    flow.turn()
    assert p.transport.producerState == "producing"            # no clock needed
    assert len(c.lines()) == 40


def test_an_ack_timeout_behind_an_mqks_consumer_nacks_the_twino_producer(harness):
    producer, mqks = harness.twino(), harness.mqks()
    create_queue(producer, "ch", 1, "round-robin", RequestAcknowledge=True,
                 AcknowledgeTimeout=1500)
    assert mqks.request("c consume --confirm ch/1 --manual-ack") == ["c ok "]
    pushed = Frame(MessageType.QUEUE_MESSAGE, pending_ack=True, message_id=new_id(),
                   target="ch", content_type=1, content=b"slow")
    producer.send_frame(pushed)
    [line] = mqks.lines()
    assert line.startswith("c ok ") and line.endswith(" slow")   # ...and never acked
    harness.advance(1)
    assert producer.frames() == []
    harness.advance(1)
    [nack] = producer.frames()
    assert (nack.type, nack.message_id, nack.header("Nack-Reason")) == (
        MessageType.ACKNOWLEDGE, pushed.message_id, "timeout")
    [again] = mqks.lines()           # round robin: handed back, retry + 1 (docs/delivery.md)
    assert ",retry=1," in again and again.endswith(" slow")
