"""bridge.clock: periodic work as services on the injected clock, and the service tree
built on a task.Clock (every sweep moves only when the clock does)."""
import pytest_twisted
from twisted.internet import task
from twisted.logger import globalLogPublisher

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.clock import ReactorClock, periodic
from mqksbridge.bridge.service import build
from mqksbridge.core import Client, Consumer, Message

NO_LISTENERS = {"mqks": {"listen": []}, "malamute": {"listen": []}, "twino": {"listen": []},
                "admin": {"listen": []}}


def test_periodic_runs_on_its_clock_from_start_to_stop():
    clock, calls = task.Clock(), []
    timer = periodic(2.0, lambda: calls.append(clock.seconds()), clock, "test")
    timer.startService()
    clock.pump([1] * 5)
    assert calls == [0, 2, 4]
    timer.stopService()
    clock.pump([1] * 10)
    assert calls == [0, 2, 4] and not clock.getDelayedCalls()


def test_a_phase_moves_the_runs_after_the_first():
    clock, calls = task.Clock(), []
    timer = periodic(1.0, lambda: calls.append(clock.seconds()), clock, "test", phase=0.25)
    timer.startService()
    clock.pump([0.25] * 12)
    assert calls == [0, 0.25, 1.25, 2.25]
    timer.stopService()
    assert not clock.getDelayedCalls()


def test_a_late_run_keeps_the_phase_and_skips_what_it_missed():
    clock, calls = task.Clock(), []
    timer = periodic(1.0, lambda: calls.append(clock.seconds()), clock, "test", phase=0.5)
    timer.startService()
    clock.advance(3.75)                  # a reactor held for over three intervals
    clock.pump([0.25] * 4)
    assert calls == [0, 3.75, 4.5]
    timer.stopService()


@pytest_twisted.ensureDeferred
async def test_the_service_trees_timers_of_one_interval_run_in_different_turns():
    """Started together, the young collection, the keep-alive sweeps and the admin sampler
    (all every second) ran in one reactor turn, one after the other: a request that came
    then waited for all of them. Each has its own phase."""
    clock = task.Clock()
    config = configuration.load(overrides=NO_LISTENERS)
    top = build(config, clock=clock)[0]
    top.startService()
    try:
        due = [call.getTime() for call in clock.getDelayedCalls()]
        assert len(due) >= 6
        assert len(set(due)) == len(due), sorted(due)
    finally:
        await top.stopService()


def test_a_periodic_step_that_raises_is_logged_and_the_next_one_runs():
    """A bare LoopingCall stops for good when its call raises; ours logs and goes on."""
    clock, calls, failures = task.Clock(), [], []

    def work():
        calls.append(clock.seconds())
        if len(calls) == 2:
            raise RuntimeError("a sweep bug")

    def observer(event):
        if event.get("log_failure") is not None:
            failures.append(event["log_failure"])
    globalLogPublisher.addObserver(observer)
    try:
        timer = periodic(1.0, work, clock, "test")
        timer.startService()
        clock.pump([1] * 3)
    finally:
        globalLogPublisher.removeObserver(observer)
    timer.stopService()
    assert calls == [0, 1, 2, 3]
    assert len(failures) == 1 and failures[0].check(RuntimeError)


def test_reactor_clock_shows_an_injected_clock_to_the_core():
    clock, fired = task.Clock(), []
    core = ReactorClock(clock)
    clock.advance(7)
    core.call_later(1.5, fired.append, "x")
    assert core.now() == 7
    clock.advance(1.5)
    assert fired == ["x"]


@pytest_twisted.ensureDeferred
async def test_the_service_tree_keeps_the_time_of_its_clock():
    """build(config, clock=task.Clock()): the broker's sweep, and every timer, run on it.
    The tree's stop is awaited: it ends the journal's worker thread."""
    clock = task.Clock()
    config = configuration.load(overrides=NO_LISTENERS)
    top, broker, doors, listeners = build(config, clock=clock)
    top.startService()
    try:
        queue = broker.queue("q")
        queue.put_message(Message("1", "s", (b"x",), expires_at=clock.seconds() + 1.5))
        unused = broker.queue("u", when_unused=3)
        gone = Consumer("c", Client("cl", "test"), None)
        broker.add_consumer(unused, gone)
        broker.remove_consumer(gone)         # its when-unused timer starts now
        clock.advance(1)
        assert len(queue) == 1 and "u" in broker.queues
        clock.advance(1)                     # the sweep at 2 s expires it
        assert len(queue) == 0 and queue.expired == 1
        clock.advance(1)                     # the one-off timer on the same clock
        assert "u" not in broker.queues
    finally:
        await top.stopService()
    assert not clock.getDelayedCalls()       # every periodic service stopped with the tree
