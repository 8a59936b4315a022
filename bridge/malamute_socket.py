"""The door's ROUTER socket: bridge.zmq_reader plus what Malamute backpressure needs.

The door must tell a vanished peer (its session ends, unsent work goes back) from a busy
one (its pipe is at the high-water mark: stream messages are dropped, mailbox and service
deliveries wait in the core), and must learn when a busy peer drains so its deliveries
resume. A peer is busy while the reader holds a backlog for it.
"""
import zmq
from zmq.backend import Socket as BackendSocket
from twisted.application import service
from twisted.internet import defer, task
from twisted.logger import Logger

from bridge.zmq_reader import RouterReader

log = Logger(namespace="mqksbridge.malamute")
_SNDMORE, _RCVMORE = int(zmq.SNDMORE), int(zmq.RCVMORE)
_send, _recv, _get = BackendSocket.send, BackendSocket.recv, BackendSocket.get


class FastSocket(zmq.Socket):
    """Multipart send/recv without pyzmq's per-frame flag-enum arithmetic, which costs
    more than the frames themselves (3-frame sends: 150k/s -> 470k/s here). With
    ROUTER_MANDATORY a refusal comes on the routing frame, never mid-message."""

    def send_multipart(self, msg_parts, flags=0, copy=True, track=False, **kwargs):
        if not copy or track or kwargs:
            return super().send_multipart(msg_parts, flags, copy, track, **kwargs)
        flags = int(flags)
        more = flags | _SNDMORE
        last = len(msg_parts) - 1
        for i, part in enumerate(msg_parts):
            _send(self, part, more if i < last else flags)

    def recv_multipart(self, flags=0, copy=True, track=False):
        if not copy or track:
            return super().recv_multipart(flags, copy, track)
        flags = int(flags)
        parts = [_recv(self, flags)]
        while _get(self, _RCVMORE):
            parts.append(_recv(self, flags))
        return parts


class FastContext(zmq.Context):
    _socket_class = FastSocket


class MalamuteSocket(RouterReader):
    def __init__(self, reactor, on_message, endpoints, **options):
        super().__init__(reactor, on_message, endpoints, context=FastContext.instance(),
                         **options)

    def send(self, routing_id, frames):
        """False only when the peer is unreachable (disconnected)."""
        gone = self.unroutable
        super().send(routing_id, frames)
        return self.unroutable == gone


class MalamuteService(service.Service):
    """Binds the door's endpoints while running and drives its expiry sweep.

    `endpoints` lists what was bound (wildcard ports resolved); `ready` fires with it.
    """

    def __init__(self, reactor, door, endpoints, *, high_water, check_interval):
        self.reactor = reactor
        self.door = door
        self.requested = list(endpoints)
        self.socket = MalamuteSocket(reactor, door.received, endpoints, sndhwm=high_water,
                                     rcvhwm=high_water)
        self.check_interval = check_interval
        self.ready = defer.Deferred()
        self._sweep = task.LoopingCall(door.sweep)
        self._sweep.clock = reactor

    @property
    def endpoints(self):
        return self.socket.endpoints

    def startService(self):
        super().startService()
        try:
            self.socket.start()
        except zmq.ZMQError as exc:
            log.error("cannot bind malamute endpoints {endpoints}: {error}",
                      endpoints=self.requested, error=exc)
            self.ready.errback(exc)
            self.ready.addErrback(lambda _: None)
            self.reactor.callWhenRunning(self.reactor.stop)
            return
        self.door.transport = self.socket
        self._sweep.start(self.check_interval, now=False)
        log.info("malamute listening on {endpoints}", endpoints=self.endpoints)
        self.ready.callback(self.endpoints)

    def stopService(self):
        super().stopService()
        if self._sweep.running:
            self._sweep.stop()
        self.socket.stop()
