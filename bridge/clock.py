"""Time in bridge/: one injected clock, and one way to run periodic work.

The clock is an IReactorTime (`seconds`, `callLater`): the reactor when the broker runs, a
`twisted.internet.task.Clock` in tests, so every timer (keep-alive, handshake and session
expiry, ack timeouts, delete-when-unused, flow holds) moves only when a test advances it.
ReactorClock shows it to the core through the core's Clock interface. The reactor itself
stays for I/O: listeners and the per-turn output flush (bridge.outbox).
"""
from twisted.application import internet
from twisted.logger import Logger

log = Logger(namespace="mqksbridge.clock")


class ReactorClock:
    """An IReactorTime seen through the core's Clock interface."""

    def __init__(self, clock):
        self._clock = clock

    def now(self):
        return self._clock.seconds()

    def call_later(self, delay, fn, *args):
        return self._clock.callLater(delay, fn, *args)


def periodic(interval, work, clock, name):
    """A TimerService running `work()` every `interval` seconds of `clock` (first at
    start). A step that raises is logged and the next one runs on time: a LoopingCall
    whose call raises would stop for good, and with it every expiry it drives."""
    timer = internet.TimerService(interval, _step, work, name)
    timer.clock = clock
    return timer


def _step(work, name):
    try:
        work()
    except Exception:
        log.failure("periodic {name} failed; it runs again at its next interval", name=name)


class TurnClock:
    """`clock.seconds()` read once per reactor turn: the first reading of a turn is kept
    (a callLater(0) forgets it when the next turn starts). The journal stamps arrival and
    settle times with it: every message of one read gets the same time, so a turn's
    records share their time lines and stamps and are encoded in bulk (one reading per
    turn instead of two per message; a stamp is at most one turn late)."""

    __slots__ = ("clock", "reactor", "reading")

    def __init__(self, clock, reactor):
        self.clock = clock
        self.reactor = reactor
        self.reading = None         # this turn's reading (hot paths: `reading or seconds()`)

    def seconds(self):
        now = self.reading
        if now is None:
            now = self.reading = self.clock.seconds()
            self.reactor.callLater(0, self._forget)
        return now

    def _forget(self):
        self.reading = None
