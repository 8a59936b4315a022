"""The service tree's root, which stops the broker in an order clients can live with.

On stopService (twistd: SIGTERM or SIGINT), within `timeout` seconds in all:

1. every connection stops being read: no new publishes, so nothing new is confirmed;
2. every outbox is flushed (replies, confirms, deliveries already made);
3. listeners stop: no new connections (the admin endpoint too). Steps 1 to 3 run in one
   reactor turn, so no connection is accepted between them;
4. the other services stop, and their stopService Deferreds are waited for: this is the
   hook for work that must finish first (a journal's pending fsyncs);
5. outboxes are flushed again (confirms those fsyncs released), then each connection
   gets its door's goodbye (a Twino Terminate frame; MQKS and Malamute have none: their
   pending output is written and the socket closed) and we wait until they are closed.

What is still open at the deadline is aborted and logged, so a stop always ends in time.
The deadline is on the injected clock (the broker's and the doors' time), so a test moves
it with task.Clock rather than waiting for it.
"""
from twisted.application import service
from twisted.internet import defer
from twisted.logger import ILogObserver, Logger

from mqksbridge.bridge.inputs import SHUTDOWN
from mqksbridge.bridge.listeners import ListenerService

log = Logger(namespace="mqksbridge.shutdown")


class BridgeService(service.MultiService):
    """MultiService whose stop is the ordered shutdown above, timed on `clock` (an
    IReactorTime). `doors` (name -> door, each with `.traffic`), `scheduler` (the
    FlushScheduler) and `broker` are set by build."""

    def __init__(self, clock, timeout=10.0):
        super().__init__()
        self.clock = clock
        self.timeout = timeout
        self.doors = {}
        self.scheduler = None
        self.broker = None
        self.admin = None
        self.log_observer = None         # set for --log-format json (see setServiceParent)
        self.stopped = None              # how the last stop went (tests, the log)

    def setServiceParent(self, parent):
        """twistd's Application takes its log observer as a component (Twisted's way to
        choose an application's log format); twistd's own --logger still wins."""
        super().setServiceParent(parent)
        if self.log_observer is not None and hasattr(parent, "setComponent"):
            parent.setComponent(ILogObserver, self.log_observer)

    def connections(self):
        return [t for door in self.doors.values() for t in list(door.traffic.live.values())]

    def stopService(self):
        service.Service.stopService(self)
        return defer.ensureDeferred(self._stop())

    async def _stop(self):
        deadline = self.clock.seconds() + self.timeout
        children = list(self)[::-1]
        for traffic in self.connections():
            traffic.input.hold(SHUTDOWN)
        self._flush()
        listeners = [s for s in children if isinstance(s, ListenerService)]
        await self._bounded([defer.maybeDeferred(s.stopService) for s in listeners],
                            deadline, "listeners")
        others = [s for s in children if not isinstance(s, ListenerService)]
        await self._bounded([defer.maybeDeferred(s.stopService) for s in others if s.running],
                            deadline, "services")
        self._flush()
        open_ = self.connections()
        for traffic in open_:
            try:
                traffic.goodbye()
            except Exception:
                log.failure("goodbye to {id} failed", id=traffic.id)
        waits = [door.traffic.when_empty() for door in self.doors.values()]
        done = await self._bounded(waits, deadline, "connections")
        aborted = self.connections()
        for traffic in aborted:
            traffic.transport.abortConnection()
        self.stopped = {"goodbyes": len(open_), "aborted": len(aborted), "in_time": done}
        self._log_backlog()
        log.info("shutdown: {goodbyes} connections closed, {aborted} aborted (deadline "
                 "{timeout}s)", goodbyes=len(open_) - len(aborted), aborted=len(aborted),
                 timeout=self.timeout)

    def _flush(self):
        if self.scheduler is not None:
            self.scheduler.flush()

    async def _bounded(self, deferreds, deadline, what):
        """Wait for all, at most until the deadline; True when all fired in time."""
        if not deferreds:
            return True
        waiting = defer.DeferredList(deferreds, consumeErrors=True)
        late = []

        def give_up():
            late.append(True)
            waiting.cancel()              # cancels each one: the list then fires
        timer = self.clock.callLater(max(0.0, deadline - self.clock.seconds()), give_up)
        results = await waiting
        if timer.active():
            timer.cancel()
        if late:
            log.warn("shutdown: {what} did not finish within the deadline", what=what)
            return False
        for ok, result in results:
            if not ok:
                log.failure("shutdown: stopping {what} failed", result, what=what)
        return True

    def _log_backlog(self):
        """What stays queued (durable queues' in their journals, the rest lost), for the record."""
        if self.broker is None:
            return
        waiting = {name: len(q) for name, q in self.broker.queues.items() if len(q)}
        if waiting:
            biggest = sorted(waiting.items(), key=lambda kv: -kv[1])[:20]
            log.info("shutdown: {total} messages still queued in {count} queues: {queues}",
                     total=sum(waiting.values()), count=len(waiting),
                     queues=", ".join(f"{name}={n}" for name, n in biggest))
