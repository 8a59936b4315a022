"""The MQKS door: text lines over TCP, onto the core model.

Stream `mqks` (configurable) carries MQKS events; `consume q ev..` binds queue q to the
exact events and adds a consumer. Replies are byte-exact with the original server except
where specs/mqks.md says why not (no 0.1 s delayed confirm, TAB answered with an error,
bounded line length, a safe `_eval`).
"""
import bisect
import random
import string
from functools import partial
from itertools import groupby
from operator import itemgetter

from twisted.internet import interfaces, protocol
from twisted.logger import Logger
from zope.interface import implementer

from mqksbridge.bridge.clock import periodic
from mqksbridge.bridge.convert import mqks as convert
from mqksbridge.bridge.engine import (
    BROKER, MANAGE, QUEUE, Client, Consumer, Denied, bounded, check)
from mqksbridge.bridge.guard import each
from mqksbridge.bridge.inputs import Input
from mqksbridge.bridge.names import to_name, to_wire
from mqksbridge.bridge.listeners import LIMIT, DoorFactory, ListenerService
from mqksbridge.bridge.logs import Repeats, door_repeats
from mqksbridge.bridge.outbox import Outbox, no_delay
from mqksbridge.bridge.traffic import DoorTraffic
from mqksbridge.protocols.mqks.errors import MqksProtocolError, Reason
from mqksbridge.protocols.mqks.framing import LineFramer
from mqksbridge.protocols.mqks.masks import apply_rebind
from mqksbridge.protocols.mqks.replies import (delivery_prefix, error, error_id, ok, update,
                                               update_payload, when_unused_equal)
from mqksbridge.protocols.mqks.requests import (fast_request, parse_ack, parse_consume,
                                                parse_eval, parse_publish, parse_rebind,
                                                parse_request, plain_run)
from mqksbridge.protocols.mqks.safe_eval import eval_reply
from mqksbridge.bridge.mqks.stats import eval_names

DOOR = "mqks"
SWEEP_INTERVAL = 1.0                 # seconds between looks at pre-authentication deadlines
log = Logger(namespace="mqksbridge.mqks")


class Outlet:
    """Where one MQKS consumer's messages go (its Consumer.tag): the prefix of every line
    it gets, its connection's outbox, write, defer and counters, and its id. Slotted:
    reading three attributes costs about 6 ns more than unpacking a tuple (a named tuple's
    unpacking, 26 ns more)."""

    __slots__ = ("prefix", "outbox", "write", "defer", "traffic", "cid")

    def __init__(self, cid, conn):
        self.prefix = delivery_prefix(cid)
        self.outbox = conn.outbox
        self.write, self.defer = conn.write, conn.outbox.defer
        self.traffic = conn.traffic      # the connection's admin counters (bridge.traffic)
        self.cid = cid


def _nothing():
    """No work: a rebind only waits for the bindings it set (answer_in_place)."""


def _deliver(consumer, entry):
    """Same-door messages relay their pre-built tail at once; the rest (foreign messages,
    redeliveries) are converted at flush time, a turn's worth together (Outbox.defer)."""
    outlet = consumer.tag
    message = entry.message
    if message.raw_door == DOOR and not entry.retry:
        traffic = outlet.traffic         # admin counters: messages out, mqks -> mqks flow
        n = traffic.own + 1
        traffic.own = n
        if not n & traffic.mask:         # one in mask + 1 timed (bridge.traffic)
            traffic.sampled(message)
        outlet.write(outlet.prefix + message.raw)
    else:
        outlet.traffic.delivered(message)
        outlet.defer((outlet.prefix, message, entry.retry), message.size + 80)


def _deliver_run(consumer, messages):
    """_deliver for each of a run of first deliveries, as one write: True when it took them
    all; False, taking none, when one is not an MQKS message or the run would pass the
    connection's high-water mark (one by one, the client is paused where _deliver would)."""
    outlet = consumer.tag
    raws = [m.raw for m in messages if m.raw_door == DOOR]
    if len(raws) != len(messages):
        return False
    prefix = outlet.prefix
    data = prefix + prefix.join(raws)
    outbox = outlet.outbox
    if outbox.pending + len(data) > outbox.high_water:
        return False
    traffic = outlet.traffic             # as _deliver: each count with low bits clear is timed
    own = traffic.own
    traffic.own = last = own + len(messages)
    step = traffic.mask + 1
    for n in range((own // step + 1) * step, last + 1, step):
        traffic.sampled(messages[n - own - 1])
    outlet.write(data)
    return True


_message = convert.message
_messages = convert.messages
_EVENT = _CONSUMER = itemgetter(2)           # in a publish's parts, in an ack's


class MqksDoor:
    """Door-wide state: the consumer registry (ids are global across connections)."""

    def __init__(self, broker, scheduler, stream="mqks", max_line=1 << 20,
                 high_water=1 << 20, max_event=1024, security=None, max_connections=0,
                 warn_burst=10, warnings=None, handshake_timeout=10.0, tcp_nodelay=True):
        self.broker = broker
        self.handshake_timeout = handshake_timeout   # TLS and the `auth` line, at most
        self.tcp_nodelay = tcp_nodelay   # Nagle off on each connection (bridge.outbox)
        self.waiting = {}            # connection -> its deadline, oldest first (sweep)
        self.security = security if security is not None and security.enabled else None
        self.clock = broker.clock.now    # the core's clock: arrival times, once per read
        self.traffic = DoorTraffic(DOOR, self.clock, max_connections)
        # log lines about clients: the door's budget, and each connection's (bridge.logs)
        self.warnings = warnings or Repeats(self.clock, name="mqks door")
        self.warn_burst = warn_burst
        self.scheduler = scheduler
        self.stream = broker.stream(stream)
        self._route, self._route_run = self.stream.publish, self.stream.publish_run
        # event bytes -> one str per event (saves memory per message)
        self._subjects, self._remember_subject = bounded(65536)
        self.max_line = max_line
        self.max_event = max_event   # longer events are refused (docs/limits.md)
        self.high_water = high_water
        self.consumers = {}          # consumer id (bytes) -> Consumer
        self.connections = set()
        self._actions = {
            b"consume": self.consume, b"rebind": self.rebind, b"ack": self.ack,
            b"reject": self.reject, b"delete_consumer": self.delete_consumer,
            b"delete_queue": self.delete_queue, b"ping": self.ping, b"_eval": self.eval,
        }

    # -- line dispatch ---------------------------------------------------------------
    def handle(self, conn, line):
        """Serve one request line; every failure becomes `{id} error {eid}`."""
        try:
            req_id, action, data, confirm = parse_request(line)
        except MqksProtocolError as exc:
            return self.fail(conn, exc.req_id, exc, line)
        if action == b"publish":
            try:
                self.publish(conn, req_id, data, confirm)
            except MqksProtocolError as exc:
                self.fail(conn, req_id, exc, line)
            return
        handler = self._actions.get(action)
        try:
            if handler is None:
                raise MqksProtocolError(Reason.ACTION, "unknown action %r" % action)
            handler(conn, req_id, data, confirm)
        except MqksProtocolError as exc:
            self.fail(conn, req_id, exc, line)
        except Denied as exc:                # a user's rules (docs/security.md)
            self.security.refused(DOOR, "denied", conn.client.id, str(exc))
            self.fail(conn, req_id, exc, line)
        except Exception as exc:  # a bug must cost one request, not the broker
            log.failure("mqks request failed: {line!r}", line=line)
            self.fail(conn, req_id, exc, line)

    def fail(self, conn, req_id, reason, line):
        conn.write(self.error(conn, req_id, reason, line))

    def error(self, conn, req_id, reason, line):
        """The `{id} error {eid}` line; the reason is logged under the eid, never sent."""
        eid = error_id()
        conn.warnings.warn(log, conn.client.id, "mqks error {eid} from {client}: {reason} "
                           "in {line!r}", eid=eid.decode(), client=conn.client.id,
                           reason=str(reason), line=line[:200])
        return error(req_id, eid)

    # -- actions -----------------------------------------------------------------------
    def publish(self, conn, req_id, data, confirm):
        """`--confirm`: the `ok` says the event is stored. When it reached a durable queue
        that is once its records are on disk (core.storage); a connection's confirmations
        keep their order, so one that follows a waiting one waits with it.

        A bound queue that refused its copy (full, with the overflow policy `reject`)
        makes the answer `{id} error {eid}` instead: `ok` would say every copy is queued
        (docs/limits.md), as does a copy the cluster refuses after the publish (a nack:
        core.storage LateBarrier). Without --confirm nothing is said; the queue's flow
        control holds the publisher (core.flow)."""
        event, body = parse_publish(data)
        conn.traffic.messages_in += 1
        storage, stream = self.broker.storage, self.stream
        before, refused = storage.appended, stream.refused
        if self.publish_plain(conn, req_id, event, body, conn.read_at) is not False \
                and confirm:
            if stream.refused == refused:
                reply = ok(req_id)
            else:
                reply = self.error(conn, req_id, "queue %r did not take its copy (its limit, "
                                   "overflow reject)" % stream.refused_by.name, event)
            if storage.appended != before:
                conn.confirm_after = storage.appended
                if storage.late and stream.refused == refused:   # once the cluster took it
                    return conn.when_stored(storage, (before, req_id, event, reply))
            if conn.confirm_after <= storage.durable:
                conn.write(reply)
            elif conn.waiting:              # when_stored, inline: its waiter is set
                conn.waiting.append(reply)
                conn.waiting_seqs.append(conn.confirm_after)
            else:
                conn.when_stored(storage, reply)

    def publish_plain(self, conn, req_id, event, body, now):
        """The hot path: one Message, relayable raw tail, routed by exact subject, stamped
        with `now` (its read's time). False when the event is refused (too long; checked
        only when it is new)."""
        subject = self._subjects.get(event)
        if subject is None:
            if len(event) > self.max_event:
                self.fail(conn, req_id, "event longer than %d bytes" % self.max_event,
                          event[:200])
                return False
            subject = self._subject(event)
        client = conn.client
        try:
            self._route(_message(req_id, subject, body, client.id, event, now), client)
        except Denied as exc:                # only a guarded stream raises it
            self.security.refused(DOOR, "denied", client.id, str(exc))
            self.fail(conn, req_id, exc, event[:200])
            return False

    def publish_run(self, conn, run, now):
        """publish_plain for each of a read's run of plain publishes (their request parts):
        each stretch of one event made into Messages in one pass and routed as one
        (Stream.publish_run). With users (every publish checked) one by one; an event not
        seen yet is checked and remembered by its first publish, which goes alone."""
        publish = self.publish_plain
        if self.broker.guarded:
            for req_id, _, event, body in run:
                publish(conn, req_id, event, body, now)
            return
        subjects, client = self._subjects, conn.client
        for event, publishes in groupby(run, _EVENT):
            publishes = list(publishes)
            subject = subjects.get(event)
            if subject is None:              # the first checks the event and remembers it
                req_id, _, _, body = publishes.pop(0)
                publish(conn, req_id, event, body, now)
                subject = subjects.get(event)
                if subject is None:          # refused: each is answered
                    for req_id, _, _, body in publishes:
                        publish(conn, req_id, event, body, now)
                    continue
                if not publishes:
                    continue
            self._route_run(_messages(publishes, subject, event, client.id, now), client)

    def ack_run(self, conn, run):
        """ack_plain for each of a read's run of plain acks (their request parts): the
        consumer looked up once per stretch of acks to it (an ack removes no consumer), and
        a stretch of plain ids acked as one (Consumer.ack_run: an unknown id without `%`
        is ignored either way); `--all` and ids that may be a foreign message's go one by
        one, in order."""
        foreign = self._foreign
        for cid, acks in groupby(run, _CONSUMER):
            consumer = self._consumer(conn, cid)
            if consumer is None:
                continue
            ids = [parts[3] for parts in acks]
            if b"%" not in b" ".join(ids) and b"--all" not in ids:
                consumer.ack_run(list(map(to_name, ids)))
                continue
            ack = consumer.ack
            for msg_id in ids:
                if msg_id == b"--all":
                    consumer.ack_all()
                elif not ack(to_name(msg_id)):
                    foreign(ack, msg_id)

    def consume(self, conn, cid, data, confirm):
        queue_raw, replace, add, when_unused, manual_ack = parse_consume(data)
        if cid in self.consumers:
            raise MqksProtocolError(Reason.IN_USE, "consumer id %r is already in use" % cid)
        name = to_name(queue_raw)
        queue = self.broker.queues.get(name)
        old_setting = queue.when_unused if queue is not None else None
        setting_changed = not when_unused_equal(old_setting, when_unused)
        consumer = Consumer(to_name(cid), conn.client, _deliver, manual_ack=manual_ack,
                            on_cancel=self._cancelled, tag=Outlet(cid, conn),
                            deliver_run=_deliver_run)
        events = self._events(name)
        new_events = apply_rebind(events, replace=replace, add=add)
        if conn.client.principal is not None:      # before anything changes (or is confirmed)
            conn.client.principal.check_consumer(conn.client, name)
        bindings_changed = self.stream.set_bindings(name, map(to_name, new_events), conn.client)
        if queue is None:
            queue = self.broker.queue(name)
        if setting_changed:
            queue.when_unused = when_unused
        if bindings_changed or setting_changed:
            self.broker.emit("queue-defined", queue=queue)     # durable definitions
            others = list(queue.consumers)
            if add:
                others.append(consumer)
            self._send_updates(queue_raw, new_events, queue.when_unused, others)
        self.consumers[cid] = consumer
        self.broker.answer_in_place(partial(self._confirm, conn, cid, confirm),
                                    partial(self.broker.consume, queue, consumer))

    def rebind(self, conn, req_id, data, confirm):
        queue_raw, replace, remove, masks, add = parse_rebind(data)
        name = to_name(queue_raw)
        new_events = apply_rebind(self._events(name), replace, remove, masks, add)
        if self.stream.set_bindings(name, map(to_name, new_events), conn.client):
            queue = self.broker.queues.get(name)
            if queue is not None:
                self.broker.emit("queue-defined", queue=queue)
                self._send_updates(queue_raw, new_events, queue.when_unused, queue.consumers)
        self.broker.answer_in_place(partial(self._confirm, conn, req_id, confirm), _nothing)

    @staticmethod
    def _confirm(conn, req_id, confirm):
        if confirm:
            conn.write(ok(req_id))

    def ack(self, conn, req_id, data, confirm):
        cid, msg_id = parse_ack(data)
        if confirm and self._consumer(conn, cid) is not None:
            conn.write(ok(req_id))
        self.ack_plain(cid, b"--all" if msg_id is None else msg_id, conn)

    def _consumer(self, conn, cid):
        """The consumer `cid`; with users, only one of this connection's own (another
        client's consumer is as unknown: ids are global in MQKS)."""
        consumer = self.consumers.get(cid)
        if consumer is not None and self.security is not None and consumer.client is not conn.client:
            return None
        return consumer

    def ack_plain(self, cid, msg_id, conn):
        """Ack one message (or `--all`); unknown consumers are ignored silently."""
        consumer = self._consumer(conn, cid)
        if consumer is None:
            return
        if msg_id == b"--all":
            consumer.ack_all()
        else:
            consumer.ack(to_name(msg_id)) or self._foreign(consumer.ack, msg_id)

    def reject(self, conn, req_id, data, confirm):
        cid, msg_id = parse_ack(data)
        consumer = self._consumer(conn, cid)
        if consumer is None:
            return
        if confirm:
            conn.write(ok(req_id))
        if msg_id is None:
            consumer.reject_all()
        else:
            consumer.reject(to_name(msg_id)) or self._foreign(consumer.reject, msg_id)

    def delete_consumer(self, conn, req_id, cid, confirm):
        """Confirm first: as with reject, the original queued `ok ` before any other
        consumer picked up the requeued messages, and our requeue delivers at once."""
        consumer = self._consumer(conn, cid)
        if consumer is None:
            return
        del self.consumers[cid]
        if confirm:
            conn.write(ok(req_id))
        self.broker.cancel(consumer)

    def delete_queue(self, conn, req_id, queue_raw, confirm):
        name = to_name(queue_raw)
        check(conn.client, MANAGE, QUEUE, name)
        queue = self.broker.queues.get(name)
        if self.stream.set_bindings(name, ()) and queue is not None:
            self._send_updates(queue_raw, (), queue.when_unused, queue.consumers)
        self.broker.delete_queue(name)
        if confirm:
            conn.write(ok(req_id))

    def ping(self, conn, req_id, data, confirm):
        """A pong follows the confirmations before it (clients use ping as a barrier)."""
        storage = self.broker.storage
        if conn.confirm_after > storage.durable:
            conn.when_stored(storage, ok(req_id, data))
        else:
            conn.write(ok(req_id, data))

    def eval(self, conn, req_id, data, confirm):
        expression = parse_eval(data)
        check(conn.client, MANAGE, BROKER, "")      # it shows every client of every door
        conn.write(ok(req_id, eval_reply(expression, eval_names(self, conn))))

    # -- helpers -------------------------------------------------------------------------
    def _subject(self, event):
        return self._remember_subject(event, event.decode("utf-8", "surrogateescape"))

    @staticmethod
    def _foreign(settle, msg_id):
        """A foreign message's id is shown percent-encoded; settle it by its real id."""
        if b"%" in msg_id:
            settle(to_name(convert.unpct(msg_id)))

    def _events(self, name):
        return {to_wire(e) for e in self.stream.bound_subjects(name)}

    def _send_updates(self, queue_raw, events, when_unused, consumers):
        payload = update_payload(queue_raw, events, when_unused)
        for consumer in consumers:
            if consumer.client.door == DOOR and consumer.tag is not None:
                consumer.tag.write(update(consumer.tag.cid, payload, consumer.manual_ack))

    def _cancelled(self, consumer):
        """The core removed one of our consumers (its queue was deleted)."""
        cid = consumer.tag.cid
        if self.consumers.get(cid) is consumer:
            del self.consumers[cid]

    def sweep(self):
        """Once a second: connections past their pre-authentication deadline (one sweep,
        no timer per connection; all share one timeout, so the oldest come first)."""
        now = self.clock()
        for conn, deadline in list(self.waiting.items()):
            if deadline > now:
                break
            del self.waiting[conn]
            conn.too_slow()

    def disconnected(self, conn):
        each(log, "mqks disconnect", (lambda: self._forget(conn.client),
                                      lambda: self.broker.disconnect(conn.client)))

    def _forget(self, client):
        for consumer in list(client.consumers.values()):
            cid = consumer.tag.cid
            if self.consumers.get(cid) is consumer:
                del self.consumers[cid]


@implementer(interfaces.IHandshakeListener)
class MqksConnection(protocol.Protocol):
    """One TCP connection: frame lines, hand each to the door, batch the output.

    Before it is served a client may have to finish its TLS handshake (a TLS listener)
    and, with users, show who it is: a client certificate or its listener's user at once
    (`handshakeCompleted`, else `connectionMade`), an `auth` line on an auth listener.
    That phase lasts `mqks.handshake_timeout` at most (MqksDoor.sweep, once a second); a
    refused client gets its error line, and is aborted if it has not let the close finish
    by then (a TLS peer that never answers the close)."""

    def __init__(self, door):
        self.door = door
        self.confirm_after = 0       # storage sequence the last waiting confirmation needs
        self.waiting = []            # reply lines waiting for the disk, in order
        self.waiting_seqs = []       # and the storage sequence each needs (ascending)

    def when_stored(self, storage, line):
        """Send `line` once every record up to `confirm_after` is on disk, after the lines
        waiting before it. One storage waiter per connection, not one per line: a group
        commit releases a connection's confirmations of a batch as one write.

        On a store that refuses late (storage.late) a publish's line is `(before, req_id,
        event, reply)`: `reply` unless a record after `before` was refused."""
        if not self.waiting:
            storage.when_stored(self.confirm_after, partial(self._stored, storage),
                                line[0] if line.__class__ is tuple else None)
        self.waiting.append(line)
        self.waiting_seqs.append(self.confirm_after)

    def _stored(self, storage):
        seqs = self.waiting_seqs
        k = bisect.bisect_right(seqs, storage.durable)
        lines = self.waiting
        if storage.late:
            lines[:k] = [self._verdict(storage, line, seq) for line, seq in zip(lines, seqs[:k])]
        if k == len(lines):
            self.waiting, self.waiting_seqs = [], []
        else:                           # the rest are in a later batch: wait for it
            lines = lines[:k]
            del self.waiting[:k], seqs[:k]
            first = self.waiting[0]
            storage.when_stored(seqs[0], partial(self._stored, storage),
                                first[0] if first.__class__ is tuple else None)
        self.write(lines[0] if k == 1 else b"".join(lines))

    def _verdict(self, storage, line, seq):
        """A waiting line as sent: a publish's reply, or its error if the cluster refused
        a copy after the door had published it (as for a bound queue that refused it)."""
        if line.__class__ is not tuple:
            return line
        before, req_id, event, reply = line
        if not storage.refused_in(before, seq):
            return reply
        return self.door.error(self, req_id, "the cluster refused a copy (a bound queue full "
                               "with overflow reject, or without a majority)", event)

    @staticmethod
    def refusal(door, reason):
        """Refused before it starts (max_connections, or not loopback without users): MQKS
        has no greeting, so an error line for no request, its eid logged."""
        eid = error_id()
        why = ("max_connections reached" if reason == LIMIT else
               "not a loopback peer (security.allow_remote_anonymous)")
        door.warnings.warn(log, "refused", "mqks error {eid}: connection refused: {why}",
                           eid=eid.decode(), why=why)
        return error(None, eid)

    def connectionMade(self):
        if self.door.tcp_nodelay:
            no_delay(self.transport)
        peer = self.transport.getPeer()
        address = f"{getattr(peer, 'host', 'unix')}:{getattr(peer, 'port', 0)}"
        suffix = "".join(random.choices(string.ascii_letters + string.digits, k=4))
        self.client = Client(f"{address}.{suffix}", DOOR, address=address)
        self.door.broker.connect(self.client)
        self.input = self.client.input = Input(self.transport, self._carry_on)
        self.kept = None                     # lines of a read not served yet (input held)
        self.read_at = 0.0                   # when the lines being served were read
        self.outbox = Outbox(self.transport, self.door.scheduler, self.client,
                             self.door.high_water, convert.deliveries, input=self.input)
        self.write = self.outbox.write
        self.framer = LineFramer(self.door.max_line)
        door_warnings = self.door.warnings
        self.warnings = Repeats(door_warnings.clock, self.door.warn_burst,
                                door_warnings.interval, parent=door_warnings)
        self.door.connections.add(self)
        self.traffic = self.door.traffic.open(address, self.transport, self.outbox, self.goodbye,
                                              self.input)
        self.traffic.client = self.client
        self.identified = self.door.security is None
        self.login = None                    # the `auth` line's login while it is checked
        self.tls_pending = tls = interfaces.ISSLTransport.providedBy(self.transport)
        if tls or (not self.identified and self._auth_listener()):
            self._start_deadline()
        elif not self.identified:
            self.identify()                  # refused at once when it is nobody

    def _auth_listener(self):
        return getattr(getattr(self, "factory", None), "auth", False)

    def handshakeCompleted(self):
        """TLS is up: a client certificate is known now (an `auth` listener waits on)."""
        self.tls_pending = False
        if self.identified is False and not self._auth_listener():
            self.identify()
        elif self.identified:
            self._stop_deadline()

    def _start_deadline(self):
        """handshake_timeout from now (MqksDoor.sweep); a later one replaces it."""
        waiting = self.door.waiting
        waiting.pop(self, None)
        waiting[self] = self.door.clock() + self.door.handshake_timeout

    def _stop_deadline(self):
        self.door.waiting.pop(self, None)

    def too_slow(self):
        """The pre-authentication phase is over: refuse a client still in it; abort one
        refused before that has not closed."""
        if self.identified is None:
            self.transport.abortConnection()
        elif self.tls_pending:               # nothing can be said before TLS is up
            self.door.warnings.warn(log, "refused", "mqks {client}: no TLS handshake within "
                                    "{s} s, aborted", client=self.client.address,
                                    s=self.door.handshake_timeout)
            self.identified = None
            self.transport.abortConnection()
        elif not self.identified:
            self._refuse("login", None, f"no login within {self.door.handshake_timeout} s")

    def _refuse(self, reason, req_id, detail, user=None):
        """Refuse a client not served yet: counted and logged with the eid of the error
        line it is sent, then the close (aborted if the peer holds it past the deadline)."""
        eid = error_id()
        who = self.client.address + (f" (user {user!r})" if user else "")
        self.door.security.refused(DOOR, reason, who, f"{detail}; error {eid.decode()}")
        self.identified = None
        self.kept = None
        self.write(error(req_id, eid))
        self.goodbye()
        self._start_deadline()               # the close must be done by then

    def identify(self):
        """With users: who this client is, known at connect (once TLS is up on a TLS
        listener): a client certificate's user, else its listener's user, else the
        anonymous one; refused (error line, closed) when none, or over its user's
        max_connections."""
        security = self.door.security
        principal = security.certificate(self.transport)
        if principal is None:
            user = getattr(getattr(self, "factory", None), "user", None)
            principal = security.user(user) if user else security.anonymous()
        if principal is None:
            self._refuse("anonymous", None, "no credentials and no [anonymous] table")
            return False
        if not security.admit(principal):
            self._refuse("limit", None, "max_connections reached", principal.user)
            return False
        self.client.principal = principal
        self.identified = True
        self._stop_deadline()
        return True

    def authenticate(self, data):
        """An `auth` listener (mqks.auth, our extension: specs/mqks.md): the first line
        must be `{id} auth USER PASSWORD`. The password is checked in a worker thread
        (bridge.security); meanwhile the socket is not read and the lines after it wait,
        at most max_line bytes of them. A good login is answered `{id} ok␠`, anything
        else `{id} error {eid}` and the close."""
        try:
            lines = self.framer.feed(data)
        except MqksProtocolError:            # the one the framer raises: a line too long
            return self._refuse("login", None, "line too long before auth")
        if self.login is not None:           # a transport that reads on while paused (TLS)
            kept = self.kept[0] + lines
            if sum(map(len, kept)) > self.door.max_line:
                return self._refuse("login", None, "too much data before the auth reply")
            self.kept = (kept, False)
            return
        if not lines:
            return
        try:
            req_id, action, data, _ = parse_request(lines[0])
        except MqksProtocolError as exc:
            return self._refuse("login", exc.req_id, str(exc))
        if action != b"auth":
            return self._refuse("login", req_id, "the first line is not auth")
        user, _, password = data.partition(b" ")
        self.kept = (lines[1:], False)
        self.transport.pauseProducing()
        self.login = self.door.security.login(user.decode("utf-8", "surrogateescape"),
                                              password.decode("utf-8", "surrogateescape"))
        self.login.addCallbacks(self._logged_in, self._login_failed,
                                callbackArgs=(req_id,), errbackArgs=(req_id,))

    def _logged_in(self, principal, req_id):
        security = self.door.security
        if self.outbox.closed:
            return
        if not security.admit(principal):
            return self._refuse("limit", req_id, "max_connections reached", principal.user)
        self.client.principal = principal
        self.identified = True
        self._stop_deadline()
        self.write(ok(req_id))
        self.transport.resumeProducing()
        self._carry_on()

    def _login_failed(self, failure, req_id):
        if not self.outbox.closed:
            self._refuse("login", req_id, failure.getErrorMessage())

    def goodbye(self):
        """MQKS has no goodbye line: what is pending goes out, then the socket closes."""
        self.outbox.close()
        self.transport.loseConnection()

    def dataReceived(self, data):
        if not self.identified:              # refused (None), or before its `auth` line
            if self.identified is False and self._auth_listener():
                self.authenticate(data)
            return
        self.traffic.bytes_in += len(data)
        too_long = False
        try:
            lines = self.framer.feed(data)
        except MqksProtocolError as exc:     # a line too long: serve those before it
            lines, too_long = exc.done, True
        if self.kept is not None:            # a transport that reads on while held (TLS)
            kept, was_too_long = self.kept
            self.kept = (kept + lines, was_too_long or too_long)
            return
        self._serve(lines, too_long)

    def _serve(self, lines, too_long):
        """Serve a read's lines in order. When a request leaves the input held (its replies
        passed the high-water mark, bridge.inputs) the rest is kept for `_carry_on`: the
        lines one read brings may ask for far more output than the mark (`_eval`s)."""
        door = self.door
        handle, publish_run, ack_run = door.handle, door.publish_run, door.ack_run
        held = self.input.reasons
        published = 0                        # admin counter, added once per read
        self.read_at = now = door.clock()    # every publish of this read arrived now
        i, n = 0, len(lines)
        try:
            while i < n:
                first = fast_request(lines[i])
                if first is not None:
                    run, i = plain_run(lines, i, first)
                    if first[1] == b"publish":
                        published += len(run)
                        publish_run(self, run, now)
                    else:
                        ack_run(self, run)
                else:
                    handle(self, lines[i])
                    i += 1
                    if held:
                        self.kept = (lines[i:], too_long)
                        return
        finally:
            self.traffic.messages_in += published
        if too_long:
            door.fail(self, None, "line longer than %d bytes" % door.max_line, b"")
            self.outbox.close()
            self.transport.loseConnection()

    def _carry_on(self):
        """The input is no longer held: serve the lines kept from the last read."""
        if self.kept is not None:
            (lines, too_long), self.kept = self.kept, None
            self._serve(lines, too_long)

    def connectionLost(self, reason):
        self._stop_deadline()
        self.kept = None
        self.input.forget()
        self.outbox.closed = True
        self.door.connections.discard(self)
        door = self.door
        steps = [lambda: door.traffic.close(self.traffic), lambda: self.warnings.flush(log, self.client.id),
                 lambda: door.disconnected(self)]
        if door.security is not None and self.identified:
            steps.append(lambda: door.security.release(self.client.principal))
        each(log, "mqks connection lost", steps)


def build(config, broker, scheduler, reactor, clock, security=None):
    """The MQKS door and one listener per configured endpoint (its timers are the core's:
    delete-when-unused); with users, each listener's clients act as its `listen_users`
    entry unless a client certificate names another user."""
    settings = config["mqks"]
    door = MqksDoor(broker, scheduler, stream=settings["stream"],
                    max_line=settings["max_line"], high_water=settings["high_water"],
                    max_event=int(settings["max_event"]), security=security,
                    max_connections=int(settings["max_connections"]),
                    warn_burst=int(config["log"]["warn_burst"]),
                    warnings=door_repeats(config, broker.clock.now, DOOR),
                    handshake_timeout=settings["handshake_timeout"],
                    tcp_nodelay=settings["tcp_nodelay"])
    users, auth = settings["listen_users"], set(settings["auth"])
    refuse_peer = security.peer_filter(DOOR) if security is not None else None
    return door, [*(ListenerService(reactor, endpoint,
                                    DoorFactory(MqksConnection, door, users.get(endpoint),
                                                auth=endpoint in auth, refuse_peer=refuse_peer))
                    for endpoint in settings["listen"]),
                  periodic(SWEEP_INTERVAL, door.sweep, clock, "mqks handshake sweep",
                           phase=0.65)]
