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


def test_connections_share_their_doors_budget_and_reconnecting_gets_no_fresh_one():
    """Ten garbage connections a second, each under its own budget, wrote 47 KB of log a
    second: the door's budget (the connections' parent) bounds them all together."""
    events, clock = [], Clock()
    log = Logger(namespace="test", observer=events.append)
    door = Repeats(clock, burst=5, interval=10.0, name="mqks door")
    for conn in range(4):                                  # four connections, 3 lines each
        repeats = Repeats(clock, burst=10, interval=10.0, parent=door)
        for i in range(3):
            repeats.warn(log, f"conn-{conn}", "bad {conn}.{i}", conn=conn, i=i)
        repeats.flush(log, f"conn-{conn}")                 # it goes: nothing of its own held
    assert [(e["conn"], e["i"]) for e in events] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert door.suppressed == 7
    clock.now += 10.0                                      # the door's next window
    last = Repeats(clock, burst=10, interval=10.0, parent=door)
    last.info(log, "conn-9", "closed {why}", why="garbage")
    assert events[5]["source"] == "mqks door" and events[5]["suppressed"] == 7
    assert events[6]["why"] == "garbage" and events[6]["log_level"] == LogLevel.info


def test_a_connections_own_count_at_close_needs_room_in_its_doors_budget():
    events, clock = [], Clock()
    log = Logger(namespace="test", observer=events.append)
    door = Repeats(clock, burst=3, interval=10.0, name="twino door")
    noisy = Repeats(clock, burst=1, interval=10.0, parent=door)
    for i in range(4):
        noisy.warn(log, "conn-1", "bad {i}", i=i)          # 1 logged, 3 held by the connection
    noisy.flush(log, "conn-1")                             # room in the door: logged
    assert [e.get("suppressed") for e in events] == [None, 3]
    other = Repeats(clock, burst=1, interval=10.0, parent=door)
    other.warn(log, "conn-2", "bad", )                     # the door's last line
    other.warn(log, "conn-2", "bad")                       # held by the connection
    other.flush(log, "conn-2")                             # no room: the door counts it
    assert len(events) == 3 and door.suppressed == 1 and other.suppressed == 0
