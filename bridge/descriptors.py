"""File descriptors, the one resource every door draws from: raised to the limit at start,
and a listener that runs out stops accepting for a moment.

Without this, 1,100 idle sockets under the usual soft limit of 1,024 took every door off the
air: Twisted's listening port, on EMFILE, frees a reserved descriptor, accepts every pending
connection only to close it, logs four lines for each, and does it again at the next
connect. Here the listening socket instead answers "nothing to accept" (EAGAIN) once the
process is out of descriptors, and the port stops reading for `ACCEPT_PAUSE` seconds:
connecting clients wait in the listen backlog (1,024, bridge.listeners) and are accepted
when descriptors are free again, established connections keep being served, and the log
gets one line when it starts and one when it ends. Per-door connection limits
(bridge.traffic.DoorTraffic.admit) keep one door's crowd from using up what the others need.
"""
import errno
import resource

from twisted.application import service
from twisted.logger import Logger

log = Logger(namespace="mqksbridge.descriptors")

ACCEPT_PAUSE = 1.0           # seconds a listener out of descriptors stops accepting
EXHAUSTED = {errno.EMFILE: "EMFILE", errno.ENFILE: "ENFILE", errno.ENOBUFS: "ENOBUFS",
             errno.ENOMEM: "ENOMEM"}


def raise_nofile_limit():
    """Raise the soft RLIMIT_NOFILE to the hard limit (no privilege needed); returns
    (before, after). A hard limit of RLIM_INFINITY cannot be a soft one on Linux, so the
    kernel's per-process ceiling (fs.nr_open) is used then."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            return soft, soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warn("cannot raise the file descriptor limit from {soft} to {target}: {exc}",
                     soft=soft, target=target, exc=exc)
            return soft, soft
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class DescriptorLimit(service.Service):
    """Raises the descriptor limit when the application starts (before any listener)."""

    def startService(self):
        super().startService()
        before, after = raise_nofile_limit()
        if after != before:
            log.info("file descriptor limit raised from {before} to {after}",
                     before=before, after=after)


class _PausingSocket:
    """Stands in for a listening port's socket: an accept that fails for lack of
    descriptors (or kernel memory) pauses the port and reads as EAGAIN, so Twisted's
    accept loop simply ends (and does not drain and close the backlog)."""

    __slots__ = ("_socket", "_pause")

    def __init__(self, sock, pause):
        self._socket = sock
        self._pause = pause

    def accept(self):
        try:
            accepted = self._socket.accept()
        except OSError as exc:
            if exc.errno not in EXHAUSTED:
                raise
            self._pause.exhausted(exc.errno)
            raise BlockingIOError(errno.EAGAIN, "paused: " + EXHAUSTED[exc.errno]) from None
        if self._pause.since is not None:
            self._pause.recovered()
        return accepted

    def __getattr__(self, name):
        return getattr(self._socket, name)


class AcceptPause:
    """Pauses one listening port (a twisted tcp/unix Port) while accepting fails."""

    def __init__(self, port, clock, name, pause=ACCEPT_PAUSE):
        self.port = port
        self.clock = clock
        self.name = name
        self.pause = pause
        self.since = None            # when the current shortage began
        self.pauses = 0              # pauses in the current shortage
        self._resume = None
        port.socket = _PausingSocket(port.socket, self)

    def exhausted(self, code):
        self.port.stopReading()
        if self.since is None:
            self.since, self.pauses = self.clock.seconds(), 0
            log.warn("{name}: cannot accept ({code}: out of file descriptors or memory); "
                     "accepting again every {pause} s, new connections wait meanwhile",
                     name=self.name, code=EXHAUSTED[code], pause=self.pause)
        self.pauses += 1
        if self._resume is None:
            self._resume = self.clock.callLater(self.pause, self._try_again)

    def _try_again(self):
        self._resume = None
        port = self.port
        if getattr(port, "connected", False) and not getattr(port, "disconnecting", False):
            port.startReading()

    def recovered(self):
        log.warn("{name}: accepting again after {seconds:.1f} s ({pauses} pauses)",
                 name=self.name, seconds=self.clock.seconds() - self.since,
                 pauses=self.pauses)
        self.since = None

    def stop(self):
        if self._resume is not None and self._resume.active():
            self._resume.cancel()
        self._resume = None


def pause_when_exhausted(port, clock, name):
    """Install an AcceptPause on a listening port that has a socket (TCP, TLS, UNIX);
    None for ports of other kinds."""
    sock = getattr(port, "socket", None)
    if sock is None or not hasattr(sock, "accept") or not hasattr(port, "stopReading"):
        return None
    return AcceptPause(port, clock, name)
