"""A listener service that remembers what it bound to (tests use port 0)."""
from twisted.application import service
from twisted.internet import defer, endpoints, protocol
from twisted.logger import Logger

log = Logger(namespace="mqksbridge.listen")


class ListenerService(service.Service):
    """Listen on a Twisted endpoint string while running; `ready` fires with the port."""

    def __init__(self, reactor, description, factory):
        self.reactor = reactor
        self.description = description
        self.factory = factory
        self.port = None
        self.ready = defer.Deferred()

    def startService(self):
        super().startService()
        endpoint = endpoints.serverFromString(self.reactor, self.description)
        endpoint.listen(self.factory).addCallbacks(self._listening, self._failed)

    def _listening(self, port):
        self.port = port
        log.info("listening on {description}", description=self.description)
        self.ready.callback(port)

    def _failed(self, failure):
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
    """One connection protocol per accepted socket, every one sharing the door's state."""

    def __init__(self, connection_class, door):
        self.connection_class = connection_class
        self.door = door

    def buildProtocol(self, addr):
        return self.connection_class(self.door)
