"""The injected clock: the only way the core learns the time or schedules anything.

The bridge adapts its injected Twisted clock to this interface; tests use FakeClock.
Timers are for rare one-off events (delete-when-unused), never one per message; periodic
work is not scheduled here at all: whoever runs the broker calls Broker.tick(now).
"""
import heapq
import itertools
from typing import Callable, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...
    def active(self) -> bool: ...


class Clock(Protocol):
    def now(self) -> float: ...
    def call_later(self, delay: float, fn: Callable, *args) -> Timer: ...


class _FakeTimer:
    __slots__ = ("when", "fn", "args", "cancelled", "fired")

    def __init__(self, when, fn, args):
        self.when, self.fn, self.args = when, fn, args
        self.cancelled = self.fired = False

    def cancel(self):
        self.cancelled = True

    def active(self):
        return not (self.cancelled or self.fired)


class FakeClock:
    """A clock that moves only when a test calls advance()."""

    def __init__(self, start: float = 1_000_000.0):
        self._now = start
        self._heap = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay, fn, *args):
        timer = _FakeTimer(self._now + max(0.0, delay), fn, args)
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
        return timer

    def advance(self, seconds: float) -> None:
        """Move time forward, firing due timers in order (timers may schedule more)."""
        target = self._now + seconds
        while self._heap and self._heap[0][0] <= target:
            when, _, timer = heapq.heappop(self._heap)
            self._now = max(self._now, when)
            if timer.active():
                timer.fired = True
                timer.fn(*timer.args)
        self._now = target
