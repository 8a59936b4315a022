"""ZeroMQ endpoint strings (`tcp://*:9999`, `ipc:///path`, `ipc://@name`) as Twisted
listeners, so Malamute users keep the endpoints they already configure.

`*` as a tcp port asks for any free port (libzmq's wildcard); `*` or `0.0.0.0` as a host
listens on every interface. `ipc://@name` is Linux's abstract socket namespace. A bound
endpoint reports itself the way libzmq's ZMQ_LAST_ENDPOINT does, port resolved.
"""
from twisted.internet.endpoints import quoteStringArgument

from mqksbridge.bridge.listeners import BACKLOG, ListenerService


class EndpointError(ValueError):
    pass


def to_twisted(endpoint):
    """The Twisted endpoint string for a ZeroMQ one."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep or not rest:
        raise EndpointError(f"not a ZeroMQ endpoint: {endpoint!r}")
    if scheme == "tcp":
        host, colon, port = rest.rpartition(":")
        if not colon or not (port == "*" or port.isdigit()):
            raise EndpointError(f"tcp endpoint needs host:port: {endpoint!r}")
        host = host.strip("[]")
        port = "0" if port == "*" else port
        if host in ("*", "0.0.0.0", ""):
            return f"tcp:{port}:backlog={BACKLOG}"
        return f"tcp:{port}:interface={quoteStringArgument(host)}:backlog={BACKLOG}"
    if scheme == "ipc":
        if rest.startswith("@"):         # abstract: no file, so no lock file beside it
            return f"unix:{quoteStringArgument(chr(0) + rest[1:])}:lockfile=0:backlog={BACKLOG}"
        return f"unix:{quoteStringArgument(rest)}:backlog={BACKLOG}"
    raise EndpointError(f"unsupported ZeroMQ transport {scheme!r} (tcp:// or ipc://)")


class ZmqListener(ListenerService):
    """A ListenerService for one ZeroMQ endpoint; `endpoints` lists it once bound."""

    def __init__(self, reactor, endpoint, factory):
        super().__init__(reactor, to_twisted(endpoint), factory, configured=endpoint)
        self.requested = endpoint

    @property
    def endpoints(self):
        if self.port is None:
            return []
        if not self.requested.startswith("tcp://"):
            return [self.requested]
        host = self.port.getHost()
        bound = f"[{host.host}]" if ":" in host.host else host.host
        return [f"tcp://{bound}:{host.port}"]
