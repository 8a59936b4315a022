"""bridge.engine.rabbitmq.resend on a task.Clock: nacked publishes go out again in waves
(one timer per wave, however many it holds), at most len(DELAYS) times each."""
from twisted.internet import task

from mqksbridge.bridge.engine.rabbitmq.resend import DELAYS, Resends


def resends():
    clock, sent = task.Clock(), []
    return clock, sent, Resends(clock, lambda number, publish: sent.append((number, publish)))


def test_nacked_publishes_go_out_again_together_after_the_first_delay():
    clock, sent, r = resends()
    assert r.take(1, "p1") and r.take(2, "p2")
    assert len(clock.getDelayedCalls()) == 1            # one wave
    clock.advance(DELAYS[0] - 0.001)
    assert sent == []
    clock.advance(0.001)
    assert sent == [(1, "p1"), (2, "p2")] and r.resent == 2
    assert clock.getDelayedCalls() == []


def test_each_publish_is_sent_again_len_delays_times_then_refused():
    clock, sent, r = resends()
    for delay in DELAYS:
        assert r.take(7, "p")
        clock.advance(delay)
    assert sent == [(7, "p")] * len(DELAYS)
    assert r.take(7, "p") is False                      # refused: forgotten
    assert r.tries == {} and clock.getDelayedCalls() == []


def test_a_publish_taken_starts_over_and_stop_leaves_no_timer():
    clock, sent, r = resends()
    r.take(1, "p")
    clock.advance(DELAYS[0])
    r.answered(1)
    assert r.tries == {}
    r.take(1, "p")
    assert r.tries == {1: 1}                            # a first nack again
    r.take(2, "q")
    clock.advance(DELAYS[0])
    r.take(2, "q")                                      # its second wave
    r.stop()
    assert clock.getDelayedCalls() == []
    clock.advance(sum(DELAYS))
    assert sent == [(1, "p"), (1, "p"), (2, "q")]
