"""bridge.logs.Repeats: a budget of warnings per window, the rest counted and reported."""
from twisted.logger import Logger, LogLevel

from mqksbridge.bridge.logs import Repeats


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def test_a_burst_per_window_then_the_count_with_the_next_one_let_through():
    events, clock = [], Clock()
    log = Logger(namespace="test", observer=events.append)
    repeats = Repeats(clock, burst=3, interval=10.0)
    for i in range(8):
        repeats.warn(log, "conn-1", "bad {i}", i=i)
    assert [e["i"] for e in events] == [0, 1, 2]
    clock.now += 9.9
    repeats.warn(log, "conn-1", "bad {i}", i=8)
    assert len(events) == 3 and repeats.suppressed == 6
    clock.now += 0.1                                     # a new window
    repeats.warn(log, "conn-1", "bad {i}", i=9)
    assert [e.get("suppressed") for e in events[3:]] == [6, None]
    assert events[4]["i"] == 9 and all(e["log_level"] == LogLevel.warn for e in events)
    repeats.flush(log, "conn-1")                         # nothing held back: no line
    assert len(events) == 5
