"""The Malamute door: ZeroMQ ROUTER sessions onto the core model (specs/malamute.md).

Sessions are keyed by routing id. Only open sessions are kept: a peer in the start state
owns nothing, so garbage from many routing ids costs no memory. Streams, mailboxes and
services are the core's streams, mailboxes and queues, shared with every other door.
A real mlm_client halts on anything unexpected, so this door only ever sends OK 200,
ERROR 300/500, PONG and the three DELIVERs (specs/malamute.md, "Broker semantics").
"""
import itertools
from collections import Counter
from functools import partial

from twisted.logger import Logger

from mqksbridge.bridge.clock import periodic
from mqksbridge.bridge.engine import (
    CONSUME, DROPPED, MAILBOX, QUEUE, STREAM, Client, Consumer, Denied, Taken)
from mqksbridge.bridge.guard import each
from mqksbridge.bridge.config import size_limit
from mqksbridge.bridge.convert.malamute import RAW_MAILBOX, RAW_SERVICE, RAW_STREAM, message, run
from mqksbridge.bridge.logs import door_repeats
from mqksbridge.bridge.malamute.peer import Peer
from mqksbridge.bridge.malamute import curve_keys
from mqksbridge.bridge.malamute.endpoints import ZmqListener
from mqksbridge.bridge.malamute.zmtp_router import CurveEndpoint, ZmtpRouter
from mqksbridge.bridge.traffic import DoorTraffic
from mqksbridge.protocols.malamute import codec, zrex
from mqksbridge.protocols.malamute import session as ev
from mqksbridge.protocols.malamute.codec import COMMAND_INVALID, FAILED, encode_error
from mqksbridge.protocols.malamute.session import Send, Session
from mqksbridge.protocols.zmtp import codec as zmtp_codec

DOOR = "malamute"
log = Logger(namespace="mqksbridge.malamute")

ERROR_500 = encode_error(COMMAND_INVALID)
# SENDs made into Messages and handed over at a time: a run's Messages live until it is
# handed over, and at Python's default GC threshold (700 new objects: broker.gc_threshold
# [], an embedding) a whole read's worth alive at once cost a young collection or two per
# run (service-wire-1: 17.9k -> 15.0k instructions a request; the same within 1% at the
# broker's 50,000).
RUN = 256
_SUBSCRIBE = (ev.StreamRead, ev.ServiceOffer)
_REPLIES = {id(ev.OK): codec.OK, id(ev.PONG): codec.PONG,      # the session's replies,
            id(ev.ERROR_INVALID): ERROR_500, id(ev.ERROR_FAILED): encode_error(FAILED)}


class MalamuteDoor:
    """Door-wide state: open sessions, address owners, counters, the expiry sweep."""
    security = None                  # bridge.security with users (build), else no checks

    def __init__(self, broker, *, timeout=60.0, check_interval=1.0, mailbox_size_warn=None,
                 credit=True, max_subscriptions=1000, max_pattern=255,
                 max_subject=zrex.MAX_SUBJECT, handshake_timeout=10.0):
        self.broker = broker
        self.transport = None            # the ZmtpRouter: send/link/attach_client
        self.peers = {}                  # routing id -> Peer (open sessions only)
        self.owners = {}                 # mailbox address -> Peer
        self.counters = Counter()
        self.mailbox_warn = mailbox_size_warn
        self.credit = credit
        self.max_subscriptions = max_subscriptions   # reads + offers per session
        self.max_pattern = max_pattern                # bytes
        self.max_subject = max_subject                # see zrex.Pattern
        self.generation = 0              # advanced by every expiry sweep
        self.max_age = max(1, round(timeout / check_interval))
        self.handshake_timeout = handshake_timeout   # seconds to the OPEN's session
        self._id = map("mlm-%d".__mod__, itertools.count(1)).__next__   # message ids
        self._warned = set()             # mailboxes over their warn level
        self.losses = Counter()          # (what, name) dropped since the last sweep, for the log
        self._handlers = {
            ev.Close: self.end, ev.Drop: self.end, ev.StreamWrite: self._stream_write,
            ev.StreamRead: self._stream_read, ev.StreamCancel: self._stream_cancel,
            ev.ServiceOffer: self._service_offer, ev.Credit: self._credit,
        }
        self._sends = {ev.STREAM: self._stream_sends, ev.MAILBOX: self._mailbox_sends,
                       ev.SERVICE: self._service_sends}
        broker.subscribe(self._taken_elsewhere)

    # -- input --------------------------------------------------------------------------
    def received(self, rid, frames):
        """One multipart message from routing id `rid` (routing frame removed)."""
        self.received_all(rid, (frames,))

    def received_all(self, rid, messages, held=()):
        """The messages one read brought from `rid`, in order; returns how many were
        handled: fewer than all when a command left the connection's input held (`held`,
        its bridge.inputs reasons: its replies passed the high-water mark), the rest is
        the connection's to keep.

        The SENDs, nearly all the traffic, go a run at a time: the session reads a run's
        header once (`Session.send`) and the run's messages are published with what it
        gave. Everything else goes through the session one command at a time. The
        session is looked up again only after something that may have opened or ended it.
        """
        sends = self._sends
        peer = self._active(rid)
        now = self.broker.clock.now()    # the arrival time of every SEND of this read
        i, count = 0, len(messages)
        while i < count:
            frames = messages[i]
            if peer is not None and frames:
                send = peer.session.send(frames[0])
                if send.__class__ is Send:
                    try:
                        i = sends[send.kind](peer, send, messages, i, now)
                    except Exception as exc:     # before the run's first message
                        self._run_failed(peer, frames, exc)
                        i = -(i + 1)
                    if i < 0:                # the session failed: look it up again
                        i, peer = -i, self._active(rid)
                    continue
                if send is not None:         # refused or unreadable
                    i += 1
                    self._apply(rid, peer, peer.session, send)
                    peer = self._active(rid)
                    continue
            i += 1
            self._command(rid, peer, frames)
            if held:
                return i
            peer = self._active(rid)
        return count

    def _active(self, rid):
        """The open session of `rid`, marked as seen; None before OPEN or after the end."""
        peer = self.peers.get(rid)
        if peer is not None:
            peer.seen = self.generation
        return peer

    def _command(self, rid, peer, frames):
        """Anything but a run of SENDs an open session takes: through the session."""
        session = Session() if peer is None else peer.session
        self._apply(rid, peer, session, session.receive_frames(frames))

    def _apply(self, rid, peer, session, outcome):
        """Send the session's reply, then act on its events."""
        if outcome.error is not None:
            self._malformed(outcome.error)
            return
        reply = outcome.reply
        if peer is not None and outcome.events and outcome.events[0].__class__ in _SUBSCRIBE:
            refusal = self._over_limits(peer, outcome.events[0]) or \
                self._not_permitted(peer, outcome.events[0])
            if refusal is not None:
                self._refuse(peer, refusal)
                return
        if peer is None and outcome.events:
            refusal = self._taken(rid, outcome.events[0].address)
            if refusal is not None:          # ERROR 300, no session (docs/security.md)
                self.counters["opens_refused"] += 1
                self.losses["open refused: " + refusal, outcome.events[0].address] += 1
                self.transport.send(rid, encode_error(FAILED, refusal))
                return
        if reply is not None:
            self.transport.send(rid, _REPLIES.get(id(reply)) or codec.encode(reply))
        for event in outcome.events:
            if peer is None:                 # only an OPEN leaves the start state
                self._open(rid, session, event.address)
            else:
                self._guarded(self._handlers[event.__class__], peer, event)

    def _guarded(self, handler, peer, event):
        try:
            handler(peer, event)
        except Denied as exc:                # ERROR 300, as for any refused subscription
            self.security.refused(DOOR, "denied", peer.address, str(exc))
            self._refuse(peer, str(exc))
        except Exception:
            self._failed(peer, event)

    def _run_failed(self, peer, frames, exc):
        """A SEND of a run not taken: refused by the user's permissions (ERROR 300, as
        any refusal) or a bug (ERROR 500); called inside an `except`."""
        if isinstance(exc, Denied):
            self.security.refused(DOOR, "denied", peer.address, str(exc))
            self._refuse(peer, str(exc))
        else:
            self._failed(peer, frames)

    def _failed(self, peer, command):
        """A bug costs this session, never the broker (called inside an `except`)."""
        log.failure("malamute command failed: {command!r}", command=command)
        if not peer.gone:
            self.transport.send(peer.rid, ERROR_500)
            self.end(peer)

    def _over_limits(self, peer, event):
        """Why a new STREAM-READ or SERVICE-OFFER is refused, or None."""
        if isinstance(event, ev.StreamRead):
            if event.pattern in peer.reads.get(event.stream, ()):
                return None                  # the same pair again changes nothing
        elif (event.service, event.pattern) in peer.offers:
            return None
        if len(event.pattern.encode("utf-8", "surrogateescape")) > self.max_pattern:
            return "pattern longer than %d bytes" % self.max_pattern
        if peer.subscriptions >= self.max_subscriptions:
            return "more than %d stream reads and service offers" % self.max_subscriptions
        return None

    def _not_permitted(self, peer, event):
        """Why the session's user may not make this STREAM-READ or SERVICE-OFFER, or None:
        checked before the OK goes out (an ERROR after an OK would tell a real client
        that its subscription was made). The core checks again when it is added."""
        principal = peer.client.principal
        if principal is None:
            return None
        try:
            if isinstance(event, ev.StreamRead):
                if principal.subjects(CONSUME, event.stream) is None:
                    raise Denied(principal.user, CONSUME, STREAM, event.stream)
            else:
                principal.check(CONSUME, QUEUE, event.service)
        except Denied as exc:
            self.security.refused(DOOR, "denied", peer.address, str(exc))
            return str(exc)
        return None

    def _refuse(self, peer, reason):
        """ERROR 300 and the session ends: a real mlm_client reports the failure and stops
        (ERROR 500 would make it re-open and replay the same subscriptions for ever)."""
        self.counters["subscriptions_refused"] += 1
        self.losses["subscription refused: " + reason, peer.address] += 1
        self.transport.send(peer.rid, encode_error(FAILED, reason))
        peer.session.expire("refused")
        self.end(peer)

    def _malformed(self, error):
        self.counters["malformed"] += 1
        self.losses["malformed frame", error.reason] += 1

    # -- session lifecycle ----------------------------------------------------------------
    def _taken(self, rid, address):
        """Why an OPEN may not have `address`, or None: a live client of another door owns
        that mailbox (a Twino client id is a Malamute address), or, with users, one of
        another user (a Malamute owner of the same user is taken over, as the original
        does for a client that reconnects), or the client may not read it. With users a
        session acts as its PLAIN login's user, else as [anonymous] (refused without one)."""
        principal = None
        if self.security is not None:
            principal = self._principal(rid)
            if principal is None:
                self.security.refused(DOOR, "anonymous", address)
                return "authentication required"
        if not address:
            return None
        mailbox = self.broker.mailboxes.get(address)
        try:
            if mailbox is not None:
                mailbox.claim(Client("", DOOR, principal=principal))
            elif principal is not None:
                principal.check(CONSUME, MAILBOX, address)
        except Denied as exc:
            self.security.refused(DOOR, "denied", address, str(exc))
            return str(exc)
        except Taken as exc:
            return f"address {address!r} is in use by a {exc.owner.door} client" \
                if exc.owner.door != DOOR else f"address {address!r} is another user's"
        return None

    def _principal(self, rid):
        conn = self.transport.peers.get(rid)
        principal = getattr(conn, "principal", None)
        return principal if principal is not None else self.security.anonymous()

    def _open(self, rid, session, address):
        """OK is out already: take the address over, then release its stored mail."""
        client = Client(f"malamute/{rid.hex()}", DOOR, name=address, type="malamute",
                        address=rid.hex(),
                        principal=self._principal(rid) if self.security is not None else None)
        self.broker.connect(client)
        peer = self.peers[rid] = Peer(self, rid, session, client, address, self.generation)
        peer.traffic = self.transport.attach_client(rid, client) or peer.traffic
        peer.link = self.transport.link(rid) or peer.link
        self.counters["opened"] += 1
        if address:
            old = self.owners.get(address)
            if old is not None:
                self._take_over(old)
            self.owners[address] = peer
            self.broker.mailbox(address).attach(client, peer.mailbox,
                                                deliver_run=peer.mailbox_run)

    def _take_over(self, old):
        """A newer session took `old`'s address: `old` ends, as the original does."""
        self.counters["takeovers"] += 1
        log.info("malamute address {address!r} taken over", address=old.address)
        old.session.expire("takeover")
        self.end(old)

    def _taken_elsewhere(self, event, mailbox=None, client=None, **data):
        """Lifecycle listener: a session on another gateway took an address over from a
        session here (the cluster engine's `mailbox-taken`)."""
        if event == "mailbox-taken":
            old = self.owners.get(mailbox.name)
            if old is not None and old.client is client:
                self._take_over(old)

    def end(self, peer, event=None):
        """Forget a session: offers, reads and mailbox go; unsent requests are requeued."""
        if peer.gone:
            return
        peer.gone = True
        if self.peers.get(peer.rid) is peer:
            del self.peers[peer.rid]
        if peer.address and self.owners.get(peer.address) is peer:
            del self.owners[peer.address]
        each(log, "malamute session end", (lambda: self.broker.disconnect(peer.client),))

    def lost(self, rid):
        """The peer's connection ended: its session (if any) ends with it."""
        peer = self.peers.get(rid)
        if peer is not None:
            self.vanished(peer)

    def vanished(self, peer):
        """The peer is gone (disconnected without CLOSE)."""
        self.counters["vanished"] += 1
        each(log, "malamute session gone", (lambda: peer.session.expire("vanished"),
                                            lambda: self.end(peer)))

    def _credit(self, peer, event):
        """Ignored (like the original) unless enabled: then the client's service offers
        only take as many requests as it granted."""
        if not self.credit:
            return
        peer.credit = True
        for consumer in peer.offers.values():
            consumer.add_credit(event.amount)

    # -- streams ------------------------------------------------------------------------
    def _stream_write(self, peer, event):
        self.broker.stream(event.stream)

    def _stream_read(self, peer, event):
        patterns = peer.reads.setdefault(event.stream, set())
        if event.pattern in patterns:
            return
        stream = self.broker.stream(event.stream)
        stream.add_reader(peer.client, event.pattern,
                          zrex.compile(event.pattern, self.max_subject), peer.stream)
        patterns.add(event.pattern)
        peer.subscriptions += 1
        peer.client.streams.add(event.stream)

    def _stream_cancel(self, peer, event):
        self.broker.stream(event.stream).remove_readers(peer.client)
        peer.client.streams.discard(event.stream)
        peer.subscriptions -= len(peer.reads.pop(event.stream, ()))

    def _stream_sends(self, peer, send, messages, i, now):
        """messages[i] and the STREAM-SENDs after it with the same header, published to
        the session's stream. Returns the index after the run (negated when the session
        failed on the way)."""
        stream = self.broker.streams.get(send.target) or self.broker.stream(send.target)
        publish, new_id = stream.publish, self._id
        header, sender, subject, raw = send.header, peer.address, send.subject, send.deliver
        client = peer.client
        start, count = i, len(messages)
        while i < count:
            frames = messages[i]
            if not frames or frames[0] != header:
                break
            i += 1
            try:
                publish(message(RAW_STREAM, new_id(), sender, subject, "",
                                (frames[1],) if len(frames) == 2 else tuple(frames[1:]),
                                raw, None, now), client)
            except Exception as exc:
                self._run_failed(peer, frames, exc)
                return -i
        peer.traffic.messages_in += i - start
        return i

    # -- mailboxes ------------------------------------------------------------------------
    def _expiry(self, timeout):
        return self.broker.clock.now() + timeout / 1000.0 if timeout else None

    def _mailbox_sends(self, peer, send, messages, i, now):
        """messages[i] and the MAILBOX-SENDs after it with the same header, into the
        mailbox they name: handed over at once where the mailbox can (Mailbox.hand_run),
        else sent one by one. Returns the index after the run (negated when the session
        failed on the way)."""
        address = send.target
        mailbox = self.broker.mailbox(address)
        start = i
        i, mail = run(RAW_MAILBOX, self._id, peer.address, send, messages, i, RUN,
                      self._expiry(send.timeout) if send.timeout else None, now)
        if len(mail) == 1 or not mailbox.hand_run(mail):    # a lone one: plainly, cheaper
            failed = self._one_by_one(
                peer, messages, start, mail,
                lambda one, client: mailbox.send(one, client) != DROPPED,
                "mailbox_dropped", ("mail over the limit of mailbox", address))
            if failed is not None:
                return failed
            if (self.mailbox_warn is not None and mailbox.bytes > self.mailbox_warn
                    and mailbox.name not in self._warned):
                self._warned.add(mailbox.name)
                log.warn("malamute mailbox {name!r} holds {size} bytes", name=mailbox.name,
                         size=mailbox.bytes)
        peer.traffic.messages_in += i - start
        return i

    # -- services -------------------------------------------------------------------------
    def _service_sends(self, peer, send, messages, i, now):
        """messages[i] and the SERVICE-SENDs after it with the same header (a client sends
        bursts of requests to one service): the queue and the expiry once per run, the run
        handed over at once where the queue can (Queue.hand_run), else put one by one.
        Returns the index after the run, negated when the session failed on the way."""
        service = send.target
        queue = self.broker.queues.get(service)
        if queue is None:
            queue = self.broker.queue(service)
        start = i
        i, requests = run(RAW_SERVICE, self._id, peer.address, send, messages, i, RUN,
                          self._expiry(send.timeout) if send.timeout else None, now)
        if len(requests) == 1 or not queue.hand_run(requests):      # (as for mail)
            failed = self._one_by_one(
                peer, messages, start, requests,
                lambda request, client: queue.put_message(request, None, client),
                "service_dropped", ("request refused by service", service))
            if failed is not None:
                return failed
        peer.traffic.messages_in += i - start
        return i

    def _one_by_one(self, peer, messages, start, items, put, counter, loss):
        """A run's plain path: `put(item, client)` for each (False: refused, counted in
        `counter` and `losses[loss]`); items[k] was messages[start + k]. None, or the
        negated index after the message whose put raised (the session failed there)."""
        client = peer.client
        for k, item in enumerate(items):
            try:
                if not put(item, client):
                    self.counters[counter] += 1
                    self.losses[loss] += 1
            except Exception as exc:
                self._run_failed(peer, messages[start + k], exc)
                return -(start + k + 1)
        return None

    def _service_offer(self, peer, event):
        """The OK is out first, so the new offer may then pick up waiting requests."""
        key = (event.service, event.pattern)
        if key not in peer.offers:
            consumer = Consumer(f"{peer.client.id}/{len(peer.offers)}", peer.client,
                                peer.service,
                                filter=zrex.compile(event.pattern, self.max_subject),
                                credit=0 if peer.credit else None,
                                deliver_run=peer.service_run)
            peer.offers[key] = consumer
            peer.subscriptions += 1
            self.broker.consume(self.broker.queue(event.service), consumer)

    # -- time -------------------------------------------------------------------------------
    def _expire(self, peer):
        """The session ends and so does its connection (a ROUTER in libzmq cannot close a
        peer, so the original left it open; the real client reconnects, gets ERROR 500 on
        its next command, then re-opens and replays, as after any lost session)."""
        self.counters["expired"] += 1
        each(log, "malamute expiry", (peer.session.expire, lambda: self.end(peer),
                                      lambda: self.transport.disconnect(peer.rid)))

    def _unopened(self):
        """Close connections that did not finish the ZMTP handshake and OPEN in time
        (oldest first, so the walk stops at the first one still in time)."""
        deadline = self.broker.clock.now() - self.handshake_timeout
        late = []
        for conn in self.transport.unopened:
            if conn.traffic.opened_at >= deadline:
                break
            late.append(conn)
        if late:
            self.counters["handshake_timeouts"] += len(late)
            self.losses["connection closed without OPEN in time", ""] += len(late)
            each(log, "malamute handshake timeout",
                 (lambda conn=conn: conn.refuse("no OPEN in time", quiet=True)
                  for conn in late))

    def sweep(self):
        """Once per check interval: expire silent sessions, close connections that did
        not open one in time, re-arm warnings, report."""
        self.generation += 1
        oldest = self.generation - self.max_age
        each(log, "malamute expiry", (lambda peer=peer: self._expire(peer)
                                      for peer in [p for p in self.peers.values()
                                                   if p.seen < oldest]))
        each(log, "malamute handshake timeout", (self._unopened,))
        if self._warned:
            mailboxes = self.broker.mailboxes
            self._warned = {name for name in self._warned if name in mailboxes
                            and mailboxes[name].bytes > self.mailbox_warn / 2}
        if self.losses:
            for (what, name), count in self.losses.items():
                log.warn("malamute: {count} x {what} {name!r}", what=what, name=name,
                         count=count)
            self.losses.clear()


def admit(security, principal):
    """A PLAIN login's user may have one more connection (max_connections), or is refused
    and counted."""
    if security.admit(principal):
        return True
    security.refused(DOOR, "limit", principal.user)
    return False


def build(config, broker, scheduler, reactor, clock, security=None):
    """The Malamute door: one ZMTP ROUTER listening on every configured ZeroMQ endpoint,
    and the session expiry sweep (last, so a door's first service is a listener)."""
    settings = config["malamute"]
    door = MalamuteDoor(
        broker, timeout=float(settings["timeout"]),
        check_interval=float(settings["check_interval"]),
        mailbox_size_warn=size_limit(settings["mailbox_size_warn"]),
        credit=bool(settings["credit"]),
        max_subscriptions=int(settings["max_subscriptions"]),
        max_pattern=int(settings["max_pattern"]), max_subject=int(settings["max_subject"]),
        handshake_timeout=float(settings["handshake_timeout"]))
    door.security = security if security is not None and security.enabled else None
    plain = settings["mechanism"] == "plain"
    door.transport = ZmtpRouter(scheduler, door.received_all, door.lost,
                                high_water=int(settings["high_water"]),
                                tcp_nodelay=settings["tcp_nodelay"],
                                max_message=int(settings["max_message_size"]),
                                max_frames=int(settings["max_frames"]),
                                traffic=DoorTraffic(DOOR, clock.seconds,
                                                    int(settings["max_connections"])),
                                mechanism=zmtp_codec.PLAIN if plain else zmtp_codec.NULL,
                                login=security.login if plain else None,
                                admit=partial(admit, security) if plain else None,
                                release=security.release if plain else None,
                                warnings=door_repeats(config, clock.seconds, DOOR),
                                refuse_peer=security.peer_filter(DOOR)
                                if security is not None else None)
    door.traffic = door.transport.traffic
    sweep = periodic(float(settings["check_interval"]), door.sweep, clock,
                     "malamute session expiry sweep", phase=0.85)
    curve = {endpoint: CurveEndpoint(door.transport, curve_keys.load(path))
             for endpoint, path in settings["curve"].items()}
    return door, [*(ZmqListener(reactor, endpoint, curve.get(endpoint, door.transport))
                    for endpoint in settings["listen"]), sweep]
