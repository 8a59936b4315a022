"""A ZeroMQ ROUTER socket made of Twisted connections speaking ZMTP (protocols.zmtp).

Each accepted connection gets a routing id once its handshake is done: the identity the
peer announced, or five bytes made up the way libzmq makes them (a zero byte, then a
32-bit counter). A second connection announcing an identity in use is closed, as libzmq's
ROUTER does without ROUTER_HANDOVER. Messages arrive in batches,
`on_message(routing_id, messages, held)` once per read; it returns how many it handled,
fewer when a request left the connection's input held (`held`, its bridge.inputs reasons):
the rest is kept and handed over once the input is let go. A connection that ends is
reported once as `on_gone(routing_id)`.

Output goes through an Outbox per connection (one write per reactor turn). While a peer's
transport is full its output collects there; past the Outbox's mark the peer's Gate pauses
the core client attached to it, so queued work waits in the core. `busy(rid)` tells a
sender of droppable traffic (stream copies) that `high_water` messages went out since the
transport filled up, the bound libzmq's SNDHWM gave. A session's deliveries go by its
connection (`link(rid)`: `send`, `send_run` for a run encoded at once, and `offer` for
droppable traffic), with no lookup.

An endpoint can serve CURVE (`CurveEndpoint`, RFC 26): its connections share the ROUTER's
routing ids, and a SealingOutbox encrypts what they are sent once their handshake is done.
"""
import itertools
import os

from twisted.internet import protocol
from twisted.logger import Logger

from mqksbridge.bridge.guard import each
from mqksbridge.bridge.inputs import Input
from mqksbridge.bridge.listeners import Refused
from mqksbridge.bridge.logs import Repeats
from mqksbridge.bridge.outbox import Outbox, no_delay
from mqksbridge.bridge.traffic import DoorTraffic
from mqksbridge.protocols.zmtp import codec
from mqksbridge.protocols.zmtp.codec import (Connection, PeerError, Ping, PlainHello, Ready,
                                             ZmtpError)
from mqksbridge.protocols.zmtp.curve import CurveConnection, Reply

log = Logger(namespace="mqksbridge.zmtp")


class Gate:
    """What an Outbox pauses: remembers the state, and passes it on to the core client
    attached once a session opens (a fresh connection has none yet)."""

    __slots__ = ("paused", "client", "backlog", "fill")

    def __init__(self):
        self.paused = False
        self.client = None
        self.backlog = 0                 # messages written since the transport filled up
        self.fill = 0                    # ...the `fill`-th time (Outbox.pauses)

    def attach(self, client):
        self.client = client
        if self.paused and not client.paused:
            client.pause()

    def pause(self):
        self.paused = True
        if self.client is not None and not self.client.paused:
            self.client.pause()

    def resume(self):
        self.paused = False
        if self.client is not None and self.client.paused:
            self.client.resume()


class ZmtpConnection(protocol.Protocol):
    """One peer of the ROUTER."""

    rid = None
    principal = None                     # who a PLAIN login proved it is (core.permissions)
    silent = True                        # no message yet (router.unopened)

    def __init__(self, router, curve=None):
        self.router = router
        if curve is not None:            # the endpoint's CURVE secret key
            self.zmtp = CurveConnection(curve, "ROUTER", router.max_message, router.max_frames)
        else:
            self.zmtp = Connection("ROUTER", router.max_message, router.max_frames,
                                   router.mechanism)
        self.gate = Gate()
        self.outbox = None
        self.kept = None                 # messages of a read not handed over (input held)
        self.failing = None              # a violation's reason, refused once kept is served

    def connectionMade(self):
        if self.router.tcp_nodelay:
            no_delay(self.transport)
        self.input = Input(self.transport, self._carry_on)
        kind = SealingOutbox if isinstance(self.zmtp, CurveConnection) else Outbox
        self.outbox = kind(self.transport, self.router.scheduler, self.gate, input=self.input)
        peer = self.transport.getPeer()
        self.traffic = self.router.traffic.open(
            f"{getattr(peer, 'host', 'unix')}:{getattr(peer, 'port', 0)}", self.transport,
            self.outbox, self.goodbye, self.input)
        self.router.unopened[self] = None
        self.outbox.write(self.zmtp.preamble())

    def _spoke(self):
        """The first message after the handshake: the handshake deadline is met (a client
        may open its session later, or talk without one and get ERROR 500)."""
        self.silent = False
        self.router.unopened.pop(self, None)

    def send(self, frames):
        """Queue one message for this peer; False once its output is closed (the peer is
        gone or going). The router's `send` without the lookup: a session's deliveries
        hold their connection (ZmtpRouter.link)."""
        outbox = self.outbox
        if outbox.closed:
            return False
        if outbox.transport_paused:
            gate = self.gate
            if gate.fill != outbox.pauses:   # it filled up anew: count afresh
                gate.fill, gate.backlog = outbox.pauses, 0
            gate.backlog += 1
        outbox.write(codec.pair(frames[0], frames[1]) if len(frames) == 2
                     else codec.message(frames))
        return True

    def send_run(self, data, count):
        """`send` for `count` messages encoded as one (codec.pairs): False, and nothing
        queued, when the output is closed or `data` would take it past its mark (then one
        `send` at a time pauses the peer's client where it should)."""
        outbox = self.outbox
        if outbox.closed or outbox.pending + len(data) > outbox.high_water:
            return False
        if outbox.transport_paused:
            gate = self.gate
            if gate.fill != outbox.pauses:
                gate.fill, gate.backlog = outbox.pauses, 0
            gate.backlog += count
        outbox.write(data)
        return True

    def busy(self):
        """Whether droppable traffic should be dropped: the transport is full and
        `high_water` messages went out since it filled up (this time)."""
        outbox, gate = self.outbox, self.gate
        return (outbox.transport_paused and gate.fill == outbox.pauses
                and gate.backlog >= self.router.high_water)

    def offer(self, frames):
        """`send` for droppable traffic (stream copies): None, and nothing queued, while
        the peer is `busy`."""
        if self.outbox.transport_paused and self.busy():
            return None
        return self.send(frames)

    def goodbye(self):
        """Malamute has no goodbye command: pending output goes out, then the close."""
        self.outbox.close()
        self.transport.loseConnection()

    def dataReceived(self, data):
        self.traffic.bytes_in += len(data)
        zmtp = self.zmtp
        if zmtp.state == "closed":
            return                       # refused: the close is under way
        try:
            messages = zmtp.receive_data(data)
        except ZmtpError as exc:         # what came before it is served first (specs/errors.md)
            messages, self.failing = exc.done, exc.reason
        if zmtp.events:
            self._events(messages)
        elif messages:
            self._deliver(messages)
        if self.failing is not None and self.kept is None:
            self._fail()

    def _fail(self):
        """The violation met in a read, once the messages before it are handed over."""
        if not self.outbox.closed:       # unless a message of them closed it already
            self.refuse(self.failing)

    def _deliver(self, messages):
        if self.silent:
            self._spoke()
        if self.kept is not None:        # a transport that reads on while held (TLS)
            self.kept += messages
            return
        done = self.router.deliver(self.rid, messages, self.input.reasons)
        if done is not None and done < len(messages) and not self.outbox.closed:
            self.kept = messages[done:]

    def _carry_on(self):
        """The input is no longer held: hand over the messages kept from the last read (then
        refuse the violation that came after them, if one did)."""
        if self.kept is not None:
            messages, self.kept = self.kept, None
            self._deliver(messages)
            if self.failing is not None and self.kept is None:
                self._fail()

    def _events(self, messages):
        """The handshake's end comes before any message; pings and goodbyes after."""
        events, self.zmtp.events = self.zmtp.events, []
        for event in events:
            if isinstance(event, PlainHello):
                return self._login(event)    # nothing else can come before WELCOME
            if isinstance(event, Ready):
                if not self.router.attach(self, event.identity):
                    return self.refuse("routing id already in use")
                reply = self.zmtp.ready_reply()
                if reply:
                    self.outbox.write(reply)
                if isinstance(self.outbox, SealingOutbox):
                    self.outbox.seal = self.zmtp.seal
            elif isinstance(event, Reply):   # CURVE's WELCOME
                self.outbox.write(event.data)
        if messages:
            self._deliver(messages)
        for event in events:
            if isinstance(event, Ping):
                self.outbox.write(codec.pong(event.context))
            elif isinstance(event, PeerError):
                self.router.warnings.info(log, "zmtp", "zmtp peer closing: {reason}",
                                          reason=event.reason)
                return self.transport.loseConnection()

    def _login(self, hello):
        """PLAIN: the router's `login` (the users file, checked in a worker thread) decides,
        as a ZAP handler does for libzmq: WELCOME, or ERROR "400" and the close."""
        d = self.router.login(hello.username.decode("utf-8", "surrogateescape"),
                              hello.password.decode("utf-8", "surrogateescape"))
        d.addCallbacks(self._welcome, self._deny)

    def _welcome(self, principal):
        if self.zmtp.state != "authenticating":
            return
        if not self.router.admit(principal):     # the user's max_connections are open
            return self._refuse_login("max_connections", "300")
        self.principal = principal
        self.outbox.write(self.zmtp.welcome())

    def _deny(self, failure):
        self._refuse_login(failure.getErrorMessage(), "400")

    def _refuse_login(self, reason, status):
        """ZAP's status codes: 400 a bad login, 300 a temporary refusal (libzmq clients
        report either as EVENT_HANDSHAKE_FAILED_AUTH with the code, and reconnect)."""
        self.router.refused += 1
        self.router.warnings.info(log, "zmtp", "zmtp PLAIN login refused ({status}): {reason}",
                                  status=status, reason=reason)
        if self.zmtp.state != "closed":
            self.outbox.write(self.zmtp.deny(status))
            self.outbox.close()
            self.transport.loseConnection()

    def refuse(self, reason, quiet=False):
        """A protocol violation costs this connection only: ERROR (once the greeting is
        through), then close. `quiet`: the caller counts and logs it."""
        self.router.refused += 1
        self.router.unopened.pop(self, None)
        if not quiet:
            self.router.warnings.info(log, "zmtp", "zmtp connection refused: {reason}",
                                      reason=reason)
        if self.zmtp.state != "greeting":
            self.outbox.write(codec.error(reason))
        self.zmtp.state = "closed"
        self.outbox.close()
        self.transport.loseConnection()

    def connectionLost(self, reason):
        self.kept = None
        self.input.forget()
        steps = [lambda: self.router.detach(self)]
        if self.principal is not None:
            steps.append(lambda: self.router.release(self.principal))
        if self.outbox is not None:
            self.outbox.closed = True
            steps.insert(0, lambda: self.router.traffic.close(self.traffic))
        self.router.unopened.pop(self, None)
        each(log, "zmtp connection lost", steps)


class SealingOutbox(Outbox):
    """A CURVE connection's Outbox: once `seal` is set (READY is out), every write is
    whole ZMTP frames, encrypted here into MESSAGE frames in the order written."""

    seal = None

    def write(self, data):
        seal = self.seal
        super().write(data if seal is None else seal(data))


class CurveEndpoint(protocol.Factory):
    """The factory of one CURVE endpoint: connections of the ROUTER that handshake with
    CURVE under this endpoint's secret key (bridge.malamute.curve_keys)."""

    def __init__(self, router, secret):
        self.router, self.secret = router, secret

    def buildProtocol(self, addr):
        refused = self.router.refusal(addr)
        return refused if refused is not None else ZmtpConnection(self.router, self.secret)


class ZmtpRouter(protocol.Factory):
    """The ROUTER: routing ids to connections, for any number of listening endpoints."""

    def __init__(self, scheduler, on_message, on_gone, *, high_water=10_000,
                 max_message=codec.DEFAULT_MAX_MESSAGE, max_frames=codec.DEFAULT_MAX_FRAMES,
                 traffic=None, mechanism=codec.NULL, login=None, admit=None, release=None,
                 warnings=None, refuse_peer=None, tcp_nodelay=True):
        self.scheduler = scheduler
        self.tcp_nodelay = tcp_nodelay   # Nagle off on each connection (bridge.outbox)
        self.refuse_peer = refuse_peer   # addr -> True to refuse (bridge.security.peer_filter)
        self.mechanism = mechanism       # NULL, or PLAIN with `login(user, password)`:
        self.login = login               # a Deferred firing with who it is, or failing
        self.admit = admit or (lambda principal: True)      # a login's user may connect
        self.release = release or (lambda principal: None)  # (per-user max_connections)
        self.traffic = traffic or DoorTraffic("zmtp", scheduler.seconds)   # admin counters
        # the door's budget of log lines about its peers (bridge.logs)
        self.warnings = warnings or Repeats(scheduler.seconds, name="zmtp")
        self.deliver = on_message
        self.on_gone = on_gone
        self.high_water = high_water
        self.max_message = max_message
        self.max_frames = max_frames
        self.peers = {}                  # routing id -> ZmtpConnection
        self.unopened = {}               # connections with no session yet, oldest first
        self._ids = itertools.count(int.from_bytes(os.urandom(4), "big"))
        self.refused = 0                 # connections closed for breaking the protocol

    def buildProtocol(self, addr):
        refused = self.refusal(addr)
        return refused if refused is not None else ZmtpConnection(self)

    def refusal(self, addr):
        """A peer `refuse_peer` refuses (not loopback, without users: bridge.security), or
        one past max_connections: our greeting and ERROR in place of READY (the handshake
        command ZMTP has for a refusal), then the close; None for the others."""
        if self.refuse_peer is not None and self.refuse_peer(addr):
            return Refused(codec.GREETING + codec.error("only loopback peers are served"))
        if not self.traffic.admit():
            return Refused(codec.GREETING + codec.error("too many connections"))
        return None

    def attach(self, conn, identity):
        """Give a connection its routing id; False if the identity is taken."""
        if identity:
            if identity in self.peers:
                return False
            rid = identity
        else:
            rid = codec.routing_id(next(self._ids))
            while rid in self.peers:
                rid = codec.routing_id(next(self._ids))
        conn.rid = rid
        self.peers[rid] = conn
        return True

    def detach(self, conn):
        if conn.rid is not None and self.peers.get(conn.rid) is conn:
            del self.peers[conn.rid]
            self.on_gone(conn.rid)

    # -- what the door uses -------------------------------------------------------------------
    def send(self, rid, frames):
        """Queue one message for a peer; False when no such peer is connected."""
        conn = self.peers.get(rid)
        return conn is not None and conn.send(frames)

    def link(self, rid):
        """The connection of peer `rid` (None if there is none), whose `send(frames)` and
        `offer(frames)` a session's deliveries use: no lookup per message."""
        return self.peers.get(rid)

    def disconnect(self, rid):
        """Close a peer's connection once its pending output is out."""
        conn = self.peers.get(rid)
        if conn is not None:
            conn.goodbye()

    def busy(self, rid):
        """Whether droppable traffic to this peer should be dropped: its transport is full
        and `high_water` messages already wait behind it."""
        conn = self.peers.get(rid)
        return conn is None or conn.busy()

    def attach_client(self, rid, client):
        """Pause and resume this core client with the peer's gate; its input is this
        connection (publisher flow control, core.flow). Returns the connection's Traffic."""
        conn = self.peers.get(rid)
        if conn is not None:
            self.unopened.pop(conn, None)
            conn.gate.attach(client)
            client.input = conn.input
            conn.traffic.client = client
            return conn.traffic
