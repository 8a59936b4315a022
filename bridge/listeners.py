"""A listener service that remembers what it bound to (tests use port 0)."""
from twisted.application import service
from twisted.internet import defer, endpoints, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger(namespace="mqksbridge.listen")


class ListenerService(service.Service):
    """Listen on a Twisted endpoint string while running; `ready` fires with the port."""

    def __init__(self, reactor, description, factory):
        self.reactor = reactor
        self.description = description
        self.factory = factory
        self.port = None
        self.ready = defer.Deferred()
        self._waiting = None                   # the listen() Deferred once started

    def privilegedStartService(self):
        """twistd binds here, before it drops privileges (ports below 1024). An address
        that is taken or refused then fails twistd's start-up, so the process exits with
        status 1 and the reason instead of running without that listener."""
        super().privilegedStartService()
        self._listen(raise_now=True)

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
            log.error("cannot listen on {description}: {reason}", description=self.description,
                      reason=outcome[0].getErrorMessage())
            self.ready.errback(outcome[0])
            self.ready.addErrback(lambda _: None)
            outcome[0].raiseException()

    def _listening(self, port):
        self.port = port
        log.info("listening on {description}", description=self.description)
        self.ready.callback(port)

    def _failed(self, failure):
        """A listener that fails after start-up (no twistd, or an endpoint that binds
        later) stops the reactor: a broker missing a door must not look healthy."""
        log.failure("cannot listen on {description}", failure, description=self.description)
        self.ready.errback(failure)
        self.ready.addErrback(lambda _: None)     # reported above; nobody else must
        if self.reactor.running:
            self.reactor.stop()
        else:
            self.reactor.callWhenRunning(self.reactor.stop)

    def stopService(self):
        super().stopService()
        if self.port is not None:
            port, self.port = self.port, None
            return port.stopListening()


class DoorFactory(protocol.Factory):
    """One connection protocol per accepted socket, every one sharing the door's state.
    `user` is who a listener's clients act as when they show nothing else (mqks.listen_users;
    docs/security.md)."""

    def __init__(self, connection_class, door, user=None):
        self.connection_class = connection_class
        self.door = door
        self.user = user

    def buildProtocol(self, addr):
        connection = self.connection_class(self.door)
        connection.factory = self
        return connection
