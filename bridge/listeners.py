"""A listener service that remembers what it bound to (tests use port 0).

Every stream listener gets a backlog of BACKLOG pending connections unless its endpoint
string names one (Twisted's default of 50 made 938 of 1,000 simultaneous connects wait out
a SYN retry), and pauses accepting while the process is out of descriptors
(bridge.descriptors). A door over its connection limit refuses in its own words (Refused).
"""
import sys

from twisted.application import service
from twisted.internet import defer, endpoints, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqksbridge.bridge.descriptors import pause_when_exhausted

log = Logger(namespace="mqksbridge.listen")

class CannotListen(Exception):
    """An address twistd could not bind while starting (already logged in one line)."""


def quiet_cannot_listen(kind, value, traceback, default=sys.excepthook):
    """sys.excepthook for twistd: a CannotListen ends the process with status 1 after
    twistd removed its pid file, without a traceback under the log line that says why."""
    if not isinstance(value, CannotListen):
        default(kind, value, traceback)


BACKLOG = 1024     # pending connections per listener (libzmq listens with 100)
PORT_KINDS = ("tcp", "tcp6", "ssl", "mtls")     # endpoint types whose first argument is a port
STREAM_KINDS = PORT_KINDS + ("unix",)           # endpoint types that take backlog=


def with_backlog(description):
    """The endpoint string with `backlog=BACKLOG` added when it is a stream listener
    that does not set one."""
    kind = description.split(":", 1)[0].strip().lower()
    if kind in STREAM_KINDS and "backlog=" not in description:
        return f"{description}:backlog={BACKLOG}"
    return description


class ListenerService(service.Service):
    """Listen on a Twisted endpoint string while running; `ready` fires with the port."""

    def __init__(self, reactor, description, factory, configured=None):
        self.reactor = reactor
        self.description = with_backlog(description)
        self.configured = configured or description     # as the user wrote it, for messages
        self.factory = factory
        self.port = None
        self.accept_pause = None               # bridge.descriptors.AcceptPause, once bound
        self.ready = defer.Deferred()
        self._waiting = None                   # the listen() Deferred once started

    def privilegedStartService(self):
        """twistd binds here, before it drops privileges (ports below 1024). An address
        that is taken or refused then fails twistd's start-up, so the process exits with
        status 1 and the reason instead of running without that listener."""
        super().privilegedStartService()
        self._listen(raise_now=True)

    def _report(self, failure):
        """One line: the endpoint as configured and the system's reason, without the
        translated endpoint string or a traceback."""
        error = getattr(failure.value, "socketError", None)
        reason = getattr(error, "strerror", None) or failure.getErrorMessage()
        log.error("cannot listen on {endpoint}: {reason} (stop what holds it, or configure "
                  "another endpoint)", endpoint=self.configured, reason=reason)
        self.ready.errback(failure)
        self.ready.addErrback(lambda _: None)     # reported here; nobody else must

    def startService(self):
        super().startService()
        if self._waiting is None:              # started without twistd (tests, embedding)
            self._listen(raise_now=False)

    def _listen(self, raise_now):
        endpoint = endpoints.serverFromString(self.reactor, self.description)
        d = self._waiting = endpoint.listen(self.factory)
        d.addCallback(self._listening)
        if not (raise_now and d.called):
            d.addErrback(self._failed)
            return
        outcome = []
        d.addBoth(outcome.append)              # TCP and UNIX bind at once: this runs now
        if isinstance(outcome[0], Failure):
            self._report(outcome[0])
            raise CannotListen(self.configured)   # twistd exits 1 (quiet_cannot_listen)

    def _listening(self, port):
        self.port = port
        self.accept_pause = pause_when_exhausted(port, self.reactor, self.description)
        log.info("listening on {description}", description=self.description)
        self.ready.callback(port)

    def _failed(self, failure):
        """A listener that fails after start-up (no twistd, or an endpoint that binds
        later) stops the reactor: a broker missing a door must not look healthy."""
        self._report(failure)
        if self.reactor.running:
            self.reactor.stop()
        else:
            self.reactor.callWhenRunning(self.reactor.stop)

    def stopService(self):
        super().stopService()
        if self.accept_pause is not None:
            self.accept_pause.stop()
        if self.port is not None:
            port, self.port = self.port, None
            return port.stopListening()


class Refused(protocol.Protocol):
    """A connection over its door's limit: the door's refusal (bytes), then the close."""

    def __init__(self, refusal):
        self.refusal = refusal

    def connectionMade(self):
        self.transport.write(self.refusal)
        self.transport.loseConnection()


REMOTE, LIMIT = "remote", "limit"      # why a connection is refused before it starts


class DoorFactory(protocol.Factory):
    """One connection protocol per accepted socket, every one sharing the door's state;
    a peer `refuse_peer(address)` refuses (not loopback, without users: bridge.security)
    or one past the door's max_connections gets the connection class's
    `refusal(door, REMOTE or LIMIT)` instead. `user` is who a listener's clients act as
    when they show nothing else (mqks.listen_users; docs/security.md); `auth`: its
    clients log in with a first line (mqks.auth)."""

    def __init__(self, connection_class, door, user=None, auth=False, refuse_peer=None):
        self.connection_class = connection_class
        self.door = door
        self.user = user
        self.auth = auth
        self.refuse_peer = refuse_peer

    def buildProtocol(self, addr):
        if self.refuse_peer is not None and self.refuse_peer(addr):
            return Refused(self.connection_class.refusal(self.door, REMOTE))
        if not self.door.traffic.admit():
            return Refused(self.connection_class.refusal(self.door, LIMIT))
        connection = self.connection_class(self.door)
        connection.factory = self
        return connection
