"""Batched, backpressured output for stream connections.

Everything a connection must send during one reactor turn (replies, deliveries for all
its consumers) is appended to a list and written once, by a single flush scheduled per
turn for all connections that have output. While the transport says its buffer is full
(IPushProducer), flushes wait and output keeps collecting here; once a connection's
pending bytes pass the high-water mark its core client is paused, so queues keep the
messages instead of piling them up in memory.

A connection may also `defer` output whose bytes are made at flush time: all of a turn's
deferred items go to the connection's `render` in one call, so a converter can check a
whole batch in one pass (one C loop over joined bodies) instead of once per message.
Direct writes render what is deferred first, so output keeps its order.

Pausing the client only at the mark, not whenever the transport is full, matters: the
transport reports full after nearly every large turn (it writes on the next poll), and a
client paused then makes every message read in between take the queue's backlog path.

Past the mark the connection's input (bridge.inputs) is held too, for the reason OUTPUT:
a client that sends requests and never reads their replies (`_eval`s, pings, list
operations) is not read any further until its output drains, so its replies cannot pile
up either. Both let go once the outbox is under the mark with the transport writing again.

Past the mark, a consumer of a push-all or broadcast queue still gets its copy of every
message (core.queue: each one present gets it, paused or not): a consumer that never reads
grew its outbox without end (the soak's stuck Twino consumer: 4 MB a minute at 300
messages/s, its copies encoded and kept). So a connection whose transport is full and whose
pending output passes `limit` (OVER_LIMIT x the mark unless given) is a slow consumer that
is cut off: logged, its output dropped, the connection aborted (its unacked messages go
back to their queues when it is gone, as for any close). Doors whose consumers can be in
such queues (Twino) give a `limit`, OVER_LIMIT x their mark; Malamute drops a slow
reader's stream copies itself (ZmtpRouter.busy), MQKS hands paused clients nothing. A
closed outbox keeps nothing: what is written after `close` would never be sent.

A turn's bytes go to the socket in the flush itself when the transport holds nothing
unsent (`write_now`): Twisted's `write` would cost two epoll_ctl, an epoll_wait and a
reactor turn more, for every write, which at a message a turn (a round trip) is half of
what the broker does per hop. Outboxes with a `limit` write through the transport always.

A failure while making or handing over one connection's output (a converter bug in
`render`, a transport that raises) costs that connection only: it is logged, the
connection is closed (`lose`, by default the transport's loseConnection) and every other
connection on the turn's list is still flushed.
"""
import itertools
from operator import attrgetter

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IPushProducer
from twisted.internet.tcp import Connection
from twisted.logger import Logger
from zope.interface import implementer

from mqksbridge.bridge.inputs import OUTPUT

log = Logger(namespace="mqksbridge.outbox")

_ORDER = attrgetter("order")
OVER_LIMIT = 8                           # Twino: output cut off at 8 x the high-water mark


class FlushScheduler:
    """One callLater(0) per reactor turn, flushing every connection marked dirty. What is
    marked has `flush()`, `failed()` (called when its flush raises: it closes that one)
    and `order`, taken from `enrol()` when it was made.

    A turn flushes in `order`, not in the order things were marked: a flush can change
    what another connection sees next (it resumes a paused client, which takes messages
    from a queue; it releases held input, whose kept requests then run), so two ways of
    doing the same work that mark connections in another order (a run of publishes,
    delivered queue by queue, and the same publishes one by one) must still flush alike."""

    def __init__(self, reactor):
        self._reactor = reactor
        self.seconds = reactor.seconds
        self._dirty = []
        self._call = None
        self._enrolled = itertools.count()

    def enrol(self):
        """The flush order of a new connection's output: the order it was made in."""
        return next(self._enrolled)

    def mark(self, outbox):
        self._dirty.append(outbox)
        if self._call is None:
            self._call = self._reactor.callLater(0, self.flush)

    def flush(self):
        self._call = None
        while self._dirty:
            dirty, self._dirty = self._dirty, []
            if len(dirty) > 1:
                dirty.sort(key=_ORDER)
            for outbox in dirty:
                try:
                    outbox.flush()
                except Exception:
                    outbox.failed()


def no_delay(transport):
    """Turn Nagle off on a TCP connection. The outbox writes once per reactor turn; with
    Nagle on, a lone delivery at a low rate waits for the peer's delayed ACK (tens of ms).
    libzmq does the same on its TCP sockets."""
    if isinstance(transport.getHost(), (IPv4Address, IPv6Address)) and hasattr(
            transport, "setTcpNoDelay"):
        transport.setTcpNoDelay(True)


def write_now(transport, data):
    """Hand `data` to the socket in this call when its transport holds nothing unsent (the
    usual case at low rates), else to the transport. A Twisted transport's `write` only
    buffers and has the reactor watch the socket: an epoll_ctl to start, a reactor turn and
    an epoll_wait to find it writable, the send, an epoll_ctl to stop, for every write. For
    a message a turn (a round trip, a latency run) that is half of a hop's syscalls and
    instructions. What the socket does not take now, and everything while output is
    buffered, goes the transport's way, in order. Only a TCP (or Unix) connection itself
    qualifies: a TLS transport wraps one and hands unknown attributes such as
    `writeSomeData` on to it (ProtocolWrapper), which would put plaintext on the socket;
    in-memory transports write as they always do."""
    if (not isinstance(transport, Connection) or transport.dataBuffer
            or transport._tempDataLen or transport.TLS or not transport.connected
            or transport.disconnecting or transport._writeDisconnected):
        transport.write(data)
        return
    sent = transport.writeSomeData(data)
    if sent.__class__ is not int:        # lost: the transport's own write path finds out
        transport.write(data)
    elif sent < len(data):
        transport.write(data[sent:])


@implementer(IPushProducer)
class Outbox:
    """Per-connection pending output; registered as the transport's push producer."""

    def __init__(self, transport, scheduler, client, high_water=256 * 1024, render=None,
                 lose=None, input=None, limit=None):
        self.transport = transport
        self.input = input               # bridge.inputs.Input: held past the mark
        self.render = render             # deferred items -> bytes (see defer)
        self.lose = lose or transport.loseConnection   # closes this connection (failed)
        self.deferred = []
        self.scheduler = scheduler
        self.order = scheduler.enrol()
        self.client = client
        self.high_water = high_water
        self.limit = limit               # None: never cut off (see the module docstring)
        self.parts = []
        self.pending = 0
        self.dirty = False
        self.transport_paused = False
        self.pauses = 0                  # how many times the transport filled up
        self.closed = False
        self.sent = 0                    # bytes handed to the transport (admin counters)
        self.failures = 0                # failed(): logged the first time only
        # With a cut-off limit, a turn's bytes go through the transport's buffer: the
        # cut-off counts on the transport filling up, and a socket written directly takes
        # its kernel buffer first (autotuned up to tcp_wmem's 4 MB on loopback).
        self.direct = limit is None
        transport.registerProducer(self, True)

    def write(self, data):
        if self.closed:
            return                       # would never be sent
        if self.deferred:
            self._render()
        self.parts.append(data)
        self.pending += len(data)
        if not self.dirty:
            self.dirty = True
            self.scheduler.mark(self)
        if self.pending > self.high_water:
            self._over()

    def defer(self, item, size):
        """Queue `item` for `render` at flush time; `size` (its bytes, about) counts toward
        the high-water mark as a write would."""
        if self.closed:
            return
        self.deferred.append(item)
        self.pending += size
        if not self.dirty:
            self.dirty = True
            self.scheduler.mark(self)
        if self.pending > self.high_water:
            self._over()

    def _over(self):
        if not self.client.paused:
            self._full()
        elif self.limit is not None and self.pending > self.limit and self.transport_paused:
            self.cut_off()

    def cut_off(self):
        """A slow consumer past `limit`: drop its output and abort the connection."""
        peer = self.transport.getPeer()
        log.warn("{peer}: {pending} bytes of output not read, over the limit of {limit}; "
                 "the connection is closed", peer=peer, pending=self.pending,
                 limit=self.limit)
        self.closed = True
        self.parts, self.deferred, self.pending = [], [], 0
        abort = getattr(self.transport, "abortConnection", None) or self.lose
        abort()

    def _full(self):
        """Past the mark: stop feeding this connection and stop reading it."""
        self.client.pause()
        if self.input is not None:
            self.input.hold(OUTPUT)

    def _render(self):
        """Deferred items to bytes; runs inside whatever wrote (often another client's
        publish), so a render that raises is this connection's failure, not the writer's."""
        items, self.deferred = self.deferred, []
        try:
            self.parts.append(self.render(items))
        except Exception:
            self.failed()

    def flush(self):
        self.dirty = False
        if self.transport_paused or self.closed:
            return                       # resumeProducing flushes
        if self.deferred:
            self._render()
            if self.closed:
                return                   # the render failed
        if self.parts:
            data = b"".join(self.parts) if len(self.parts) > 1 else self.parts[0]
            self.parts = []
            self.pending = 0
            self.sent += len(data)
            if self.direct:
                write_now(self.transport, data)
            else:
                self.transport.write(data)
        if self.client.paused and not self.transport_paused:
            self.client.resume()
        input = self.input
        if (input is not None and input.reasons and OUTPUT in input.reasons
                and not self.transport_paused and self.pending <= self.high_water):
            input.release(OUTPUT)        # the client's resume may have filled us again

    def close(self):
        """Hand what is pending to the transport, then stop producing (connection going
        away: the transport writes its buffer before it closes). The producer is let go
        too: a TLS transport sends its close only once no producer is registered."""
        if self.deferred and not self.closed:
            self._render()
        if self.parts and not self.closed:
            data = b"".join(self.parts)
            self.sent += len(data)
            self.transport.write(data)
            self.parts = []
            self.pending = 0
        if not self.closed:
            self.transport.unregisterProducer()
        self.closed = True

    def failed(self):
        """Called inside an `except`: log the failure, drop what is pending, stop feeding
        this connection (its client is paused, so queues keep their messages for others)
        and close it. Its manual-ack messages go back to their queues when it is gone."""
        self.failures += 1
        if self.failures > 1:
            return                       # what is left of its output fails on its way out
        peer = self.transport.getPeer()
        log.failure("output for {peer} failed; that connection is closed", peer=peer)
        self.closed = True
        self.parts, self.deferred, self.pending = [], [], 0
        if not self.client.paused:
            self.client.pause()
        try:
            self.lose()
        except Exception:
            log.failure("closing {peer} failed", peer=peer)

    # IPushProducer: the transport's own buffer is full / drained.
    def pauseProducing(self):
        self.transport_paused = True
        self.pauses += 1

    def resumeProducing(self):
        self.transport_paused = False
        try:
            self.flush()
        except Exception:
            self.failed()

    def stopProducing(self):
        self.closed = True
