"""The Twino door: TMQP/2.0 (Twino MQ 3.x) over TCP, onto the core model.

Channels are core channels, queue (C, N) is core queue `C/N`, direct messages go through
core mailboxes, routers are core streams. specs/twino.md "Broker semantics" says what a
client sees and where we deliberately differ from a 3.7.2 server. The work is split:
queues (data path), ops (operations 601-663), direct (client to client), events
(subscriptions), routers (0x17 and bindings).
"""
import sys
from functools import partial

from twisted.internet import protocol
from twisted.logger import Logger

from mqksbridge.bridge.clock import periodic
from mqksbridge.bridge.convert.twino import wire_id
from mqksbridge.bridge.engine import CONSUME, MAILBOX, Client, Denied
from mqksbridge.bridge.guard import each
from mqksbridge.bridge.inputs import Input
from mqksbridge.bridge.listeners import LIMIT, DoorFactory, ListenerService
from mqksbridge.bridge.logs import Repeats, door_repeats
from mqksbridge.bridge.outbox import OVER_LIMIT, Outbox, no_delay
from mqksbridge.bridge.security import LoginFailed
from mqksbridge.bridge.traffic import DoorTraffic
from mqksbridge.bridge.twino.direct import DIRECT, MAX_PENDING, TwinoDirect
from mqksbridge.bridge.twino.events import TwinoEvents
from mqksbridge.bridge.twino.ops import TwinoOperations
from mqksbridge.bridge.twino.queues import TwinoQueues
from mqksbridge.bridge.twino.routers import TwinoRouters
from mqksbridge.protocols.twino.codec import (
    PING_BYTES, PONG_BYTES, PROTOCOL, QUEUE_MESSAGE, Frame, MessageType, ResultCode,
    TwinoProtocolError, encode, new_id, refused, server_ack,
)
from mqksbridge.protocols.twino.handshake import (
    FrameReceived, Hello, PingReceived, ProtocolError, TwinoServerConnection,
)

DOOR = "twino"
log = Logger(namespace="mqksbridge.twino")


class TwinoDoor:
    """Door-wide state: settings, live connections, the keep-alive sweep, frame dispatch."""
    security = None                  # bridge.security with users (build), else no checks

    def __init__(self, broker, scheduler, clock, settings):
        self.broker = broker
        self.scheduler = scheduler
        self.settings = settings
        self.clock = clock.seconds   # the injected clock (bridge.clock): now, in seconds
        self.started = clock.seconds()
        self.node_id = new_id()
        self.connections = set()
        self.traffic = DoorTraffic(DOOR, clock.seconds, int(settings["max_connections"]))
        self.warnings = Repeats(clock.seconds, name="twino door")  # its log lines (build)
        self.queues = TwinoQueues(self)
        self.direct = TwinoDirect(self)
        self.events = TwinoEvents(self)
        self.routers = TwinoRouters(self)
        self.ops = TwinoOperations(self)
        self.handlers = {
            MessageType.QUEUE_MESSAGE: self.queues.push,
            MessageType.ACKNOWLEDGE: self.direct.acknowledge,
            MessageType.QUEUE_PULL_REQUEST: self.queues.pull,
            MessageType.SERVER: self.ops.handle,
            MessageType.DIRECT_MESSAGE: self.direct.send,
            MessageType.RESPONSE: self.direct.respond,
            MessageType.EVENT: self.events.subscribe,
            MessageType.ROUTER: self.routers.publish,
            MessageType.TERMINATE: lambda conn, frame: conn.close("terminate frame"),
            MessageType.PING: lambda conn, frame: conn.write(PONG_BYTES),
        }
        broker.subscribe(self.events.core_event)

    # -- handshake ----------------------------------------------------------------------------
    def hello(self, conn, hello):
        """Accept (echo + 202) or refuse (echo + 401/503, then close) a hello. With users,
        `Client-Token: USER:PASSWORD` logs in (checked in a worker thread: the connection
        reads nothing more meanwhile), and a hello without a token is [anonymous]."""
        token = self.settings["token"]
        if token and hello.token != token:
            return conn.refuse(ResultCode.UNAUTHORIZED, "bad token")
        security = self.security
        if security is None:
            return self._accept(conn, hello, None)
        if not hello.token:
            principal = security.anonymous()
            if principal is None:
                security.refused(DOOR, "anonymous", conn.client.address)
                return conn.refuse(ResultCode.UNAUTHORIZED, "authentication required")
            return self._accept(conn, hello, principal)
        user, _, password = hello.token.partition(":")
        conn.hold()
        security.login(user, password).addCallbacks(
            lambda principal: self._logged_in(conn, hello, principal),
            lambda failure: self._login_failed(conn, failure))

    def _logged_in(self, conn, hello, principal):
        if conn.connected:
            self._accept(conn, hello, principal)
            conn.release()

    def _login_failed(self, conn, failure):
        failure.trap(LoginFailed)
        self.security.refused(DOOR, "login", conn.client.address, failure.value.reason)
        if conn.connected:
            conn.refuse(ResultCode.UNAUTHORIZED, "login failed")

    def _accept(self, conn, hello, principal):
        wanted = hello.client_id
        if principal is not None:
            if wanted and not principal.allows(CONSUME, MAILBOX, wanted):
                self.security.refused(DOOR, "denied", conn.client.address, wanted)
                return conn.refuse(ResultCode.UNAUTHORIZED, f"may not be {wanted!r}")
            if not self.security.admit(principal):
                self.security.refused(DOOR, "limit", conn.client.address, principal.user)
                return conn.refuse(ResultCode.LIMIT_EXCEEDED, "max_connections reached")
        if wanted and len(wanted.encode()) > 255:
            return conn.refuse(ResultCode.BAD_REQUEST, "client id longer than 255 bytes")
        if wanted and wanted in self.broker.clients:
            return conn.refuse(ResultCode.BUSY, f"client id {wanted!r} is in use")
        mailbox = self.broker.mailboxes.get(wanted) if wanted else None
        if mailbox is not None and mailbox.owner is not None:   # a Malamute address
            return conn.refuse(ResultCode.BUSY, f"client id {wanted!r} is a live "
                                                f"{mailbox.owner.door} client's mailbox")
        data = conn.hs.accept()
        client = conn.client
        client.id = conn.hs.client_id
        client.name = hello.name or ""
        client.type = hello.type or ""
        client.principal = principal
        conn.admitted = principal
        client.attrs["twino"] = conn
        conn.decoder = conn.hs.decoder
        conn.write(data)
        self.broker.connect(client)
        self.broker.mailbox(client.id).attach(client, self.mailbox_deliver,
                                              assigned=not wanted)

    def mailbox_deliver(self, mailbox, message):
        conn = mailbox.owner.attrs["twino"]
        conn.traffic.delivered(message)
        try:
            if message.raw_door == DIRECT:
                conn.write(message.raw)
            else:
                self.direct.deliver(conn, message)
        except Exception:                # runs inside another client's send: this
            conn.outbox.failed()         # connection's failure, logged and closed

    def failed(self, conn, frame):
        """A frame whose handling raised: logged, answered 500 if awaited, connection kept
        (upstream drops the connection: B6)."""
        if isinstance(sys.exc_info()[1], Denied):   # a user's rules: nack, else 401
            self.security.refused(DOOR, "denied", conn.client.id, str(sys.exc_info()[1]))
            if frame.pending_ack and frame.message_id:
                return conn.write(encode(server_ack(frame.message_id, frame.target,
                                                    frame.content_type, "unauthorized")))
            return self.ops.answer(conn, frame, ResultCode.UNAUTHORIZED)
        log.failure("twino {type:#x} frame from {client} failed", type=frame.type,
                    client=conn.client.id)
        self.ops.answer(conn, frame, ResultCode.INTERNAL_SERVER_ERROR)

    def disconnected(self, conn):
        """Every step runs even when one raises (bridge.guard)."""
        self.connections.discard(conn)
        if conn.admitted is not None:
            self.security.release(conn.admitted)
        client = conn.client
        registered = client.id is not None and self.broker.clients.get(client.id) is client
        each(log, "twino disconnect", (
            lambda: self.events.forget(conn),
            *((lambda: self.broker.disconnect(client),
               lambda: self._drop_empty_mailbox(client.id)) if registered else ())))

    def _drop_empty_mailbox(self, client_id):
        mailbox = self.broker.mailboxes.get(client_id)
        if mailbox is not None and mailbox.owner is None and not mailbox.stored:
            del self.broker.mailboxes[client_id]

    # -- keep-alive ---------------------------------------------------------------------------
    def sweep(self):
        """Once per check_interval: close unfinished handshakes, PING idle clients, close
        those that stayed silent after a PING."""
        now = self.clock()
        interval = self.settings["ping_interval"]
        due = [conn for conn in self.connections    # those _keep_alive has something for:
               if conn.decoder is None or conn.ping_sent is not None    # a step each for a
               or now - conn.last_seen > interval   # thousand idle ones took 1 ms a second
               or conn.closed_at is not None]
        each(log, "twino sweep", [partial(self._keep_alive, conn, now) for conn in due])

    def _keep_alive(self, conn, now):
        settings = self.settings
        if conn.closed_at is not None:
            # closed, but the close waits for a peer that does not read its buffered output
            # (a stuck consumer): after ping_timeout it is aborted, or the connection and its
            # consumers would stay for as long as the peer keeps the socket open
            if now - conn.closed_at > settings["ping_timeout"]:
                conn.transport.abortConnection()
        elif conn.decoder is None:
            if now - conn.opened_at > settings["handshake_timeout"]:
                conn.close("no handshake in time")
        elif conn.ping_sent is not None:
            if conn.last_seen >= conn.ping_sent:     # traffic since (a coarse clock may
                conn.ping_sent = None                # not have moved: anything counts)
            elif now - conn.ping_sent > settings["ping_timeout"]:
                conn.close("no answer to PING")
        elif now - conn.last_seen > settings["ping_interval"]:
            conn.ping_sent = now
            conn.write(PING_BYTES)


class TwinoConnection(protocol.Protocol):
    """One TCP connection: handshake through the sans-IO machine, then frames to the door."""

    def __init__(self, door):
        self.door = door
        self.decoder = None          # set once the hello is accepted
        self.connected = False
        self.aliases = {}            # wire id -> core id, for foreign ids Twino cannot carry
        self.requests = {}           # ids of direct requests sent to other doors' clients
        self.ping_sent = None
        self.closed_at = None        # when close() began (a graceful close may wait)
        self.admitted = None         # the principal counted for max_connections
        self.held = None             # while a login is checked: [events left, data read]
        self.confirm_after = 0       # storage sequence the last waiting producer ack needs

    def hold(self):
        """A login is being checked: what comes meanwhile waits (reading is paused)."""
        self.held = [[], []]
        self.transport.pauseProducing()

    def release(self):
        """The login is decided and accepted: what waited is handled, in order."""
        events, data = self.held
        self.held = None
        self.transport.resumeProducing()
        self._events(events)
        for chunk in data:
            if self.connected:
                self.dataReceived(chunk)

    @staticmethod
    def refusal(door, reason):
        """Refused before it starts, with the hello answer written before the hello is
        read (the connection costs nothing while it waits): over max_connections the one
        a busy server gives (echo + 503), a peer beyond loopback without users 401."""
        code = ResultCode.BUSY if reason == LIMIT else ResultCode.UNAUTHORIZED
        return PROTOCOL + encode(refused(code, new_id()))

    def connectionMade(self):
        door = self.door
        if door.settings["tcp_nodelay"]:
            no_delay(self.transport)
        peer = self.transport.getPeer()
        address = f"{getattr(peer, 'host', 'unix')}:{getattr(peer, 'port', 0)}"
        self.client = Client(None, DOOR, address=address)
        self.input = self.client.input = Input(self.transport, self._carry_on)
        self.kept = None                     # frames of a read not handled yet (input held)
        self.outbox = Outbox(self.transport, door.scheduler, self.client,
                             door.settings["high_water"], input=self.input,
                             limit=OVER_LIMIT * door.settings["high_water"])
        self.write = self.outbox.write
        self.hs = TwinoServerConnection(door.settings["max_frame_size"],
                                        max_hello=door.settings["max_hello"])
        self.opened_at = self.last_seen = door.clock()
        self.connected = True
        door.connections.add(self)
        self.traffic = door.traffic.open(address, self.transport, self.outbox, self.goodbye,
                                         self.input)
        self.traffic.client = self.client

    def dataReceived(self, data):
        if self.held is not None:
            self.held[1].append(data)
            return
        door = self.door
        self.traffic.bytes_in += len(data)
        self.last_seen = door.clock()
        if self.decoder is None:
            return self._handshake(data)
        error = None
        try:
            frames = self.decoder.feed(data)
        except TwinoProtocolError as exc:    # its frames first (specs/errors.md)
            frames, error = exc.done, exc
        if self.kept is not None:            # a transport that reads on while held (TLS)
            kept, kept_error = self.kept
            self.kept = (kept + frames, kept_error or error)
            return
        self._serve(frames, error)

    def _serve(self, frames, error):
        """Handle a read's frames in order. When a request leaves the input held (its
        answers passed the high-water mark, bridge.inputs) the rest is kept for
        `_carry_on`: one read may ask for far more output than the mark (list and pull
        operations)."""
        door = self.door
        handlers, push_run = door.handlers, door.queues.push_run
        held = self.input.reasons
        i, count = 0, len(frames)
        while i < count:
            frame = frames[i]
            if frame.type == QUEUE_MESSAGE:      # pushes come in runs
                try:
                    i = push_run(self, frames, i)
                except Exception:        # before the run began: its first frame failed
                    door.failed(self, frame)
                    i += 1
            else:
                i += 1
                handler = handlers.get(frame.type)
                if handler is not None:
                    try:
                        handler(self, frame)
                    except Exception:
                        door.failed(self, frame)
                    if held and i < count and self.connected:
                        self.kept = (frames[i:], error)
                        return
            if not self.connected:
                return
        if error is not None:
            self.close(f"bad frame: {error}")

    def _carry_on(self):
        """The input is no longer held: handle the frames kept from the last read."""
        if self.kept is not None:
            (frames, error), self.kept = self.kept, None
            self._serve(frames, error)

    def _handshake(self, data):
        self._events(self.hs.receive_data(data))

    def _events(self, events):
        for i, event in enumerate(events):
            if not self.connected:
                return
            if isinstance(event, Hello):
                self.door.hello(self, event)
                if self.held is not None:    # a login is being checked
                    self.held[0] = events[i + 1:]
                    return
            elif isinstance(event, FrameReceived):
                handler = self.door.handlers.get(event.frame.type)
                if handler is not None:
                    try:
                        handler(self, event.frame)
                    except Exception:
                        self.door.failed(self, event.frame)
            elif isinstance(event, PingReceived):
                self.write(PONG_BYTES)
            elif isinstance(event, ProtocolError):
                self.close(event.reason)

    def wire_id(self, message_id):
        """The id a foreign message travels under; acks map it back."""
        found = wire_id(message_id)
        if found is None:
            found = new_id()
            self.aliases[found] = message_id
        return found

    def remember_request(self, message_id):
        """A reply from another door whose tracker is this id becomes the Response."""
        if len(self.requests) >= MAX_PENDING:
            del self.requests[next(iter(self.requests))]
        self.requests[message_id] = True

    def refuse(self, code, reason):
        self.write(self.hs.refuse(code))
        self.close(f"refused with {code}: {reason}")

    def close(self, reason):
        """Flush what is pending and hang up; only this connection is affected (a close
        that a peer which does not read keeps waiting is aborted by the sweep)."""
        if not self.connected:
            return
        self.door.warnings.info(log, self.client.id, "twino connection {address} ({client}) "
                                "closed: {reason}", address=self.client.address,
                                client=self.client.id, reason=reason)
        self.connected = False
        self.closed_at = self.door.clock()
        self.outbox.close()
        self.transport.loseConnection()

    def goodbye(self):
        """Twino's goodbye: a Terminate frame (0x08), then the close (after a finished
        handshake only: before it the client reads the protocol echo first)."""
        if self.connected and self.decoder is not None:
            self.write(encode(Frame(MessageType.TERMINATE, message_id=new_id())))
        self.close("broker shutting down")

    def connectionLost(self, reason):
        """The connection, its client and its transport refer to each other, and the raised
        GC thresholds make the full collections that free such cycles rare: what this
        connection holds (a partial frame of up to max_frame_size) is let go here, and the
        client's reference to it dropped."""
        self.connected = False
        self.kept = None
        self.input.forget()
        self.outbox.closed = True
        door = self.door
        each(log, "twino connection lost", (lambda: door.traffic.close(self.traffic),
                                            lambda: door.disconnected(self)))
        self.decoder = self.hs = None
        self.client.attrs.pop("twino", None)


def build(config, broker, scheduler, reactor, clock, security=None):
    """The Twino door, one listener per configured endpoint, and its keep-alive sweep."""
    settings = config["twino"]
    door = TwinoDoor(broker, scheduler, clock, settings)
    door.security = security if security is not None and security.enabled else None
    door.warnings = door_repeats(config, clock.seconds, DOOR)
    factory = DoorFactory(TwinoConnection, door, refuse_peer=security.peer_filter(DOOR)
                          if security is not None else None)
    services = [ListenerService(reactor, endpoint, factory) for endpoint in settings["listen"]]
    return door, services + [periodic(settings["check_interval"], door.sweep, clock,
                                      "twino keep-alive sweep", phase=0.4)]
