"""A pyzmq ROUTER socket driven by a Twisted reactor.

ZeroMQ's ``ZMQ_FD`` is not a data descriptor: it signals "the socket has
commands to process", and any libzmq call on the socket (send, recv, reading
``ZMQ_EVENTS``) may consume that signal.  Waiting for the FD alone therefore
stalls: a send made outside a read pass can swallow the wake-up for messages
that are already queued, and nothing ever fires again.  So this reader
- drains on every wake-up until ``EAGAIN``, but at most ``batch`` messages per
  pass, then schedules the next pass with one ``callLater(0)`` (fairness to
  the rest of the reactor);
- after every send made outside a pass, re-reads ``ZMQ_EVENTS`` and schedules
  a pass if input is waiting;
- starts with one pass, since messages may predate ``addReader``.

Sending uses ``ZMQ_ROUTER_MANDATORY``: without it libzmq silently drops a
message for an unknown peer or a peer whose pipe is at its high-water mark.
With it, an unknown (gone) peer raises ``EHOSTUNREACH``, counted in
``unroutable``; a full pipe raises ``EAGAIN`` and the message waits in that
peer's backlog (per-peer FIFO, so order holds and one slow peer does not
block the others).  Backlogs are bounded per peer and in total; overflow is
dropped and counted in ``dropped``, so a stuck peer costs bounded memory.
Backlogs are retried on every pass and every ``retry_interval`` seconds
while any exist (a peer that becomes writable does not always wake the FD
for us).
"""

import collections

import zmq
from twisted.internet.interfaces import IReadDescriptor
from twisted.logger import Logger
from zope.interface import implementer

log = Logger(namespace="mqksbridge.zmq")

DEFAULT_ENDPOINTS = ("tcp://*:9999",)


@implementer(IReadDescriptor)
class RouterReader:
    """Bind a ROUTER socket on ``endpoints`` and feed ``on_message(routing_id, frames)``."""

    def __init__(self, reactor, on_message, endpoints=DEFAULT_ENDPOINTS, *, context=None,
                 batch=256, sndhwm=1000, rcvhwm=1000, peer_backlog=1000,
                 total_backlog=100_000, retry_interval=0.01):
        self._reactor = reactor
        self._on_message = on_message
        self._requested = tuple(endpoints)
        self._context = context or zmq.Context.instance()
        self.batch = batch
        self._sndhwm, self._rcvhwm = sndhwm, rcvhwm
        self.peer_backlog, self.total_backlog = peer_backlog, total_backlog
        self.retry_interval = retry_interval
        self._socket = None
        self._backlog = {}          # routing id -> deque of frame lists
        self._drained = {}          # routing id -> callback once its backlog is gone
        self.backlogged = 0
        self._pass = None           # pending callLater for the next read pass
        self._retry = None          # pending callLater for a backlog retry
        self._in_pass = False
        self.endpoints = []         # as bound (wildcard ports resolved)
        self.received = self.sent = self.dropped = self.unroutable = 0

    # -- lifecycle ----------------------------------------------------------

    def start(self):
        sock = self._context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.SNDHWM, self._sndhwm)
        sock.setsockopt(zmq.RCVHWM, self._rcvhwm)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            for endpoint in self._requested:
                sock.bind(endpoint)
                self.endpoints.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        except zmq.ZMQError:
            sock.close(0)
            self.endpoints = []
            raise
        self._socket = sock
        self._reactor.addReader(self)
        self._schedule_pass()

    def stop(self):
        if self._socket is None:
            return
        self._reactor.removeReader(self)
        for call in (self._pass, self._retry):
            if call is not None and call.active():
                call.cancel()
        self._pass = self._retry = None
        self._socket.close(0)
        self._socket = None
        self.dropped += self.backlogged
        self._backlog.clear()
        self.backlogged = 0

    # -- IReadDescriptor ----------------------------------------------------

    def fileno(self):
        return self._socket.getsockopt(zmq.FD) if self._socket is not None else -1

    def logPrefix(self):
        return "RouterReader"

    def doRead(self):
        if self._pass is not None and self._pass.active():
            self._pass.cancel()
        self._read_pass()

    def connectionLost(self, reason):
        # The reactor closes every reader when it stops; anything else is worth a note.
        log.info("ROUTER reader closed: {reason}", reason=reason.getErrorMessage())
        self.stop()

    # -- reading ------------------------------------------------------------

    def _schedule_pass(self):
        if self._pass is None or not self._pass.active():
            self._pass = self._reactor.callLater(0, self._read_pass)

    def _read_pass(self):
        self._pass = None
        sock = self._socket
        if sock is None:
            return
        self._in_pass = True
        try:
            for _ in range(self.batch):
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.received += 1
                try:
                    self._on_message(frames[0], frames[1:])
                except Exception:
                    log.failure("on_message failed")
                if self._socket is None:
                    return          # stopped by the callback
        finally:
            self._in_pass = False
        if self._backlog:
            self._flush()
        if sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            self._schedule_pass()

    def _recheck(self):
        """After a send outside a pass: the send may have eaten the FD's wake-up."""
        if self._in_pass or self._socket is None or (self._pass is not None and self._pass.active()):
            return
        if self._socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            self._schedule_pass()

    # -- sending ------------------------------------------------------------

    def send(self, routing_id, frames):
        """Send ``frames`` to a peer; False when the message had to be dropped."""
        if self._socket is None:
            self.dropped += 1
            return False
        queue = self._backlog.get(routing_id)
        if queue is not None:
            ok = self._enqueue(routing_id, frames)
        else:
            ok = self._send_now(routing_id, frames)
        self._recheck()
        return ok

    def _send_now(self, routing_id, frames):
        try:
            self._socket.send_multipart([routing_id, *frames], zmq.NOBLOCK)
        except zmq.Again:
            return self._enqueue(routing_id, frames)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            self.unroutable += 1
            return False
        self.sent += 1
        return True

    def _enqueue(self, routing_id, frames):
        queue = self._backlog.get(routing_id)
        if queue is None:
            queue = self._backlog[routing_id] = collections.deque()
        if len(queue) >= self.peer_backlog or self.backlogged >= self.total_backlog:
            self.dropped += 1
            return False
        queue.append(frames)
        self.backlogged += 1
        if self._retry is None:
            self._retry = self._reactor.callLater(self.retry_interval, self._retry_flush)
        return True

    def _retry_flush(self):
        self._retry = None
        self._flush()
        self._recheck()

    def _flush(self):
        sock = self._socket
        for routing_id in list(self._backlog):
            queue = self._backlog[routing_id]
            while queue:
                try:
                    sock.send_multipart([routing_id, *queue[0]], zmq.NOBLOCK)
                except zmq.Again:
                    break
                except zmq.ZMQError as exc:
                    if exc.errno != zmq.EHOSTUNREACH:
                        raise
                    self.unroutable += len(queue)
                    self.backlogged -= len(queue)
                    queue.clear()
                    break
                queue.popleft()
                self.backlogged -= 1
                self.sent += 1
            if not queue:
                del self._backlog[routing_id]
        if self._backlog and self._retry is None:
            self._retry = self._reactor.callLater(self.retry_interval, self._retry_flush)
        if self._drained:
            for rid in [rid for rid in self._drained if rid not in self._backlog]:
                self._drained.pop(rid)()

    def blocked(self, routing_id):
        """Whether sends to this peer are waiting in its backlog (its pipe is full)."""
        return routing_id in self._backlog

    def when_drained(self, routing_id, callback):
        """Call `callback()` once this peer's backlog has been sent (or at once if none)."""
        if routing_id in self._backlog:
            self._drained[routing_id] = callback
        else:
            callback()

    def forget(self, routing_id):
        """Discard a peer's backlog (its session ended); returns how many were dropped."""
        self._drained.pop(routing_id, None)
        queue = self._backlog.pop(routing_id, None)
        if not queue:
            return 0
        self.backlogged -= len(queue)
        self.dropped += len(queue)
        return len(queue)
