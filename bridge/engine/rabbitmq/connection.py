"""One AMQP connection of a gateway to its RabbitMQ cluster, kept up.

The gateway knows several nodes (`urls`); it connects to the first that answers, and when
the connection is lost, to the next one, after a pause that doubles on each failure up to
`max_delay` (a cluster restarting is not hammered) and starts again short once a
connection is up. The owner hears `opened(protocol)` each time a connection is ready for
channels and `lost(reason)` each time one goes (what was in flight on it is unknown: the
owner fails its pending confirms and forgets the deliveries RabbitMQ will redeliver).
"""
import pika
from pika.adapters.twisted_connection import TwistedProtocolConnection
from twisted.internet import defer, endpoints, ssl
from twisted.logger import Logger

log = Logger(namespace="mqksbridge.cluster")


def endpoint(reactor, url, name=None):
    """(Twisted client endpoint, pika parameters) for an amqp:// or amqps:// URL; `name`
    is the connection's name in RabbitMQ's views (client property connection_name)."""
    params = pika.URLParameters(url)
    if name is not None:
        params.client_properties = {"connection_name": name}
    if url.startswith("amqps:"):
        point = endpoints.SSL4ClientEndpoint(reactor, params.host, params.port,
                                             ssl.optionsForClientTLS(params.host))
    else:
        point = endpoints.TCP4ClientEndpoint(reactor, params.host, params.port)
    return point, params


class Connection:
    """The connection to the first reachable of `urls`, made again when lost."""

    def __init__(self, reactor, urls, opened, lost, first_delay=0.1, max_delay=5.0,
                 name=None):
        if not urls:
            raise ValueError("the cluster engine needs at least one amqp:// URL")
        self.reactor = reactor
        self.urls = list(urls)
        self.opened, self.lost = opened, lost
        self.name = name
        self.first_delay, self.max_delay = first_delay, max_delay
        self.protocol = None        # the open TwistedProtocolConnection, or None
        self.url = None             # the URL it reached
        self.failure = None         # why the last attempt failed (for status)
        self._next = 0              # index of the URL to try next
        self._delay = first_delay
        self._retry = None
        self._stopping = False

    def start(self):
        self._stopping = False
        self._attempt()

    def _attempt(self):
        self._retry = None
        url = self.urls[self._next]
        self._next = (self._next + 1) % len(self.urls)
        point, params = endpoint(self.reactor, url, self.name)
        made = endpoints.connectProtocol(point, TwistedProtocolConnection(
            params, custom_reactor=self.reactor))
        made.addCallback(self._handshake, url)
        made.addErrback(self._failed, url)

    @defer.inlineCallbacks
    def _handshake(self, protocol, url):
        protocol.transport.setTcpNoDelay(True)      # small frames go at once (no Nagle)
        yield protocol.ready
        if self._stopping:
            protocol.close()
            return
        self.protocol, self.url, self.failure = protocol, url, None
        self._delay = self.first_delay
        protocol.closed.addBoth(self._closed, protocol)
        log.info("connected to {url}", url=_safe(url))
        self.opened(protocol)

    def _failed(self, failure, url):
        self.failure = f"{_safe(url)}: {failure.getErrorMessage()}"
        log.warn("cannot reach {why}; trying the next node", why=self.failure)
        self._later()

    def _closed(self, reason, protocol):
        if self.protocol is protocol:
            self.protocol = None
            self.lost(reason)
        self._later()

    def _later(self):
        if self._stopping or self._retry is not None:
            return
        self._retry = self.reactor.callLater(self._delay, self._attempt)
        self._delay = min(self._delay * 2, self.max_delay)

    def stop(self):
        """Close for good; a Deferred fired once closed."""
        self._stopping = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        protocol, self.protocol = self.protocol, None
        if protocol is None or protocol.closed is None:
            return defer.succeed(None)
        closed = protocol.closed
        protocol.close()
        return closed


def _safe(url):
    """A URL without its password, for logs and status."""
    params = pika.URLParameters(url)
    scheme = url.split(":", 1)[0]
    return f"{scheme}://{params.credentials.username}@{params.host}:{params.port}" \
           f"/{params.virtual_host}"
