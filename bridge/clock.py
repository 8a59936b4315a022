"""Time in bridge/: one injected clock, and one way to run periodic work.

The clock is an IReactorTime (`seconds`, `callLater`): the reactor when the broker runs, a
`twisted.internet.task.Clock` in tests, so every timer (keep-alive, handshake and session
expiry, ack timeouts, delete-when-unused, flow holds) moves only when a test advances it.
ReactorClock shows it to the core through the core's Clock interface. The reactor itself
stays for I/O: listeners and the per-turn output flush (bridge.outbox).
"""
from twisted.application import service
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


def periodic(interval, work, clock, name, phase=0.0):
    """A service running `work()` every `interval` seconds of `clock`: first at start,
    then at start + phase x interval + k x interval. A step that raises is logged and the
    next one runs on time (a LoopingCall whose call raises would stop for good, and with
    it every expiry it drives).

    `phase` (a fraction of the interval) keeps periodic work of equal intervals out of
    one reactor turn: started together, every 1 s timer (young collection, keep-alive
    sweeps, admin sampler) ran in the same turn, and a client's request that came then
    waited for all of them in a row."""
    return Periodic(interval, work, clock, name, phase)


class Periodic(service.Service):
    def __init__(self, interval, work, clock, name, phase=0.0):
        self.interval, self.work, self.clock, self.name = interval, work, clock, name
        self.phase = phase % 1.0
        self._call = None
        self._next = None

    def startService(self):
        super().startService()
        now = self.clock.seconds()
        self._next = now + (self.phase or 1.0) * self.interval
        _step(self.work, self.name)
        self._schedule()

    def _schedule(self):
        if self.running:
            self._call = self.clock.callLater(max(0.0, self._next - self.clock.seconds()),
                                              self._run)

    def _run(self):
        _step(self.work, self.name)
        now = self.clock.seconds()
        self._next += self.interval
        if self._next <= now:            # late (a stalled reactor): skip, keep the phase
            self._next += ((now - self._next) // self.interval + 1) * self.interval
        self._schedule()

    def stopService(self):
        super().stopService()
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


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
