"""Twino channels and queues on the core: push, delivery, consumer and producer acks, pull, CC.

Twino queue (channel C, id N) is core queue `C/N`, grouped under core channel C; queue id 0
is the core queue named C itself, so a Twino client reaches a queue other doors name plainly
(an MQKS `consume jobs`, a Malamute service `jobs`) as (jobs, 0), and the core puts every
queue of a channel's name in it, whoever made it (core.channel). Its Twino-only settings
live in a TwinoQueue kept in `queue.attrs["twino"]`, made on first sight for a queue
another door created (`state_of`). What becomes of a message a member hands back or leaves
unacked is the core's rule (core.queue), not this door's. A push keeps its decoded frame
and what its delivery frame changes in Message.raw: that frame is encoded on the first
delivery to a Twino consumer (never, when only other doors consume the message), then each
delivery only flips the FirstAcquirer and PendingAcknowledge bits. Foreign messages go
through bridge.convert.twino.
"""
import fnmatch
from functools import partial

from twisted.internet import defer

from mqksbridge.bridge.convert import Unrepresentable, dropped
from mqksbridge.bridge.convert.twino import from_frame, queue_delivery
from mqksbridge.bridge.engine import (
    BROADCAST, CACHE, CONSUME, PAUSED, PUBLISH, PULL, PUSH_ALL, QUEUE, ROUND_ROBIN, STOPPED,
    Consumer, Denied, check, numbered, queue_name as core_name)
from mqksbridge.bridge.settings import POLICIES
from mqksbridge.protocols.twino.codec import (
    QUEUE_MESSAGE, Frame, Header, MessageType, NackReason, NoContent, ResultCode,
    TwinoProtocolError, encode, new_id, pull_answer, pull_status, reflag, server_ack,
)
from mqksbridge.protocols.twino.models import (CHANNEL_DEFAULTS, QUEUE_DEFAULTS,
                                               QUEUE_STATUS_NAMES, status_from_option)
from mqksbridge.protocols.twino.names import valid_name

# The core mode of each Twino queue status (index = the server's QueueStatus number).
STATUS_MODES = (BROADCAST, PUSH_ALL, ROUND_ROBIN, PULL, CACHE, PAUSED, STOPPED)
# The persistent delivery handler's producer-ack decisions (Twino 3.7's Twino.MQ.Data):
# None, AfterReceived, AfterSaved, AfterConsumerAckReceived, as our policy words.
PERSISTENT = "persistent"
DECISIONS = {"none": "none", "afterreceived": "received", "received": "received",
             "aftersaved": "saved", "saved": "saved", "afterconsumerackreceived": "relay",
             "acknowledge": "relay", "relay": "relay"}
_CLEAR = {"all": "all", "high-priority": "priority", "default-priority": "regular"}
DOOR = "twino"


class TwinoQueue:
    """What Twino knows about one core queue beyond the core's own options."""

    __slots__ = ("queue", "name", "channel", "id", "raw_door", "tag", "request_ack",
                 "message_timeout", "use_message_id", "hide_names", "policy", "persistent",
                 "nacks",
                 "last_received", "produced")

    def __init__(self, channel, queue_id, name, policy):
        self.queue = None
        self.name = name
        self.channel = channel
        self.id = queue_id
        self.raw_door = "twino:" + name      # Message.raw of a push here is our delivery frame
        self.tag = None
        self.request_ack = True
        self.message_timeout = 0.0
        self.use_message_id = True
        self.hide_names = False
        self.policy = policy
        self.persistent = False              # the persistent delivery handler: durable
        self.nacks = 0
        self.last_received = 0.0
        self.produced = {}                   # MessageProduced subscribers: conn -> None

    def arguments(self):
        """The Twino-side options as `apply` takes them: the queue's Twino arguments in its
        durable definition (bridge.journal.definitions), read back by `state_of`."""
        return {"request_acknowledge": self.request_ack,
                "message_timeout": round(self.message_timeout * 1000),
                "use_message_id": self.use_message_id, "hide_client_names": self.hide_names,
                "message_delivery_handler": f"{PERSISTENT}:{self.policy}" if self.persistent
                else self.policy, "tag": self.tag}

    @property
    def status(self):
        return STATUS_MODES.index(self.queue.mode)

    @property
    def status_name(self):
        return QUEUE_STATUS_NAMES[self.status]

    def apply(self, options):
        """Set the Twino-side options; return the core queue options they imply."""
        core = {}
        for key, value in options.items():
            if key == "status":
                core["mode"] = STATUS_MODES[status_from_option(value)]
            elif key == "mode":
                core["mode"] = value
            elif key == "send_only_first_acquirer":
                core["only_first"] = bool(value)
            elif key == "request_acknowledge":
                self.request_ack = bool(value)
            elif key == "acknowledge_timeout":
                core["ack_timeout"] = (int(value) / 1000.0) or None
            elif key == "message_timeout":
                self.message_timeout = int(value) / 1000.0
            elif key == "use_message_id":
                self.use_message_id = bool(value)
            elif key == "wait_for_acknowledge":
                core["wait_for_ack"] = bool(value)
            elif key == "hide_client_names":
                self.hide_names = bool(value)
            elif key == "message_limit":
                core["max_messages"] = int(value) or None
            elif key == "message_size_limit":
                core["max_message_size"] = int(value) or None
            elif key in ("message_delivery_handler", "delivery_handler"):
                word = str(value).strip().lower()
                decision = persistent_decision(word)
                if decision is not None:
                    self.persistent, self.policy = True, decision
                elif word in POLICIES:
                    self.policy = word
            elif key == "tag":
                self.tag = value
        return core


class Member:
    """A Twino member's consumer of one queue (its Consumer.tag): the connection its
    deliveries go to and the queue's Twino state. Slotted: two attribute reads cost about
    6 ns more than unpacking a tuple (a named tuple's unpacking, 26 ns more)."""

    __slots__ = ("conn", "state")

    def __init__(self, conn, state):
        self.conn, self.state = conn, state


def persistent_decision(word):
    """The producer-ack policy a persistent handler name asks for, or None when the name
    is not one: `persistent` (AfterSaved) or `persistent:<decision>` (specs/twino.md)."""
    name, _, decision = word.partition(":")
    if name != PERSISTENT:
        return None
    return DECISIONS.get(decision.replace("-", "").replace("_", "") or "saved")


def relayed(message):
    """The delivery frame of a push to this queue, encoded once for every receiver.

    Until then a push's Message.raw is the tuple (frame, wire id, source, PendingAck) made
    by push_run (a tuple, not a slotted object: it is made for every push, and a class
    instance costs about 170 ns more). Only a frame whose names or headers held bytes that
    are not UTF-8 can fail: each such byte comes back as a 3-byte U+FFFD, which may not
    fit any more."""
    raw = message.raw
    if type(raw) is tuple:
        frame, wire_id, source, ack = raw
        try:
            raw = encode(Frame(QUEUE_MESSAGE, True, frame.high_priority, frame.ttl,
                               frame.pending_response, ack, wire_id, source, frame.target,
                               frame.content_type, frame.headers, frame.content))
        except TwinoProtocolError as exc:
            raise Unrepresentable(str(exc)) from None
        message.raw = raw
    return raw


def deliver(consumer, entry):
    """Write one delivery. A Twino push relays its own frame, with FirstAcquirer set only for
    the first receiver and PendingAcknowledge as this consumer acks. It runs inside another
    client's push (any door's): a failure is this connection's (logged, closed), never the
    pusher's or the dispatch's."""
    member = consumer.tag
    conn, state = member.conn, member.state
    try:
        message = entry.message
        traffic = conn.traffic                       # admin counters (Traffic.delivered)
        out, origin = traffic.out, message.origin
        n = out[origin] + 1
        out[origin] = n
        if not n & traffic.mask:
            traffic.sampled(message)
        if message.raw_door is state.raw_door:
            try:
                raw = relayed(message)
            except Unrepresentable as exc:
                return undeliverable(consumer, entry, exc.reason)
            conn.write(reflag(raw, entry.deliveries == 1, consumer.manual_ack))
        else:
            try:
                conn.write(queue_delivery(message, conn.wire_id(message.id), state.channel,
                                          state.id, entry.deliveries == 1, consumer.manual_ack,
                                          state.hide_names))
            except Unrepresentable as exc:
                undeliverable(consumer, entry, exc.reason)
    except Exception:
        conn.outbox.failed()


def undeliverable(consumer, entry, reason):
    """A foreign message this consumer cannot receive: counted, logged and settled as a
    nack (a waiting producer hears `unrepresentable`), never cut to fit."""
    dropped(consumer.tag.conn.door.broker, DOOR, entry.message, reason)
    if not consumer.ack(entry.message.id, False, "unrepresentable"):
        entry.notify("nack", consumer, "unrepresentable")


class ProducerAck:
    """Entry observer for a push that waits for its ack: one ack or nack, per the policy
    (after sent, or relaying the consumer's own ack frame). Consumers of other doors settle
    it too: an MQKS ack or reject, an ack timeout, a Malamute worker taking the request."""

    __slots__ = ("conn", "message_id", "state", "relay", "done")

    def __init__(self, conn, message_id, state, relay):
        self.conn, self.message_id, self.state, self.relay = conn, message_id, state, relay
        self.done = False

    def __call__(self, event, entry, consumer, reason, receipt):
        """It runs inside a queue's dispatch, for any door's consumer: a failure costs the
        producer's connection (logged, closed), never the dispatch of other messages."""
        try:
            if self.done:
                return
            state, conn = self.state, self.conn
            if event == "sent":
                if self.relay:
                    return
                frame = server_ack(self.message_id, state.channel, state.id)
            elif event == "dropped":
                frame = server_ack(self.message_id, state.channel, state.id,
                                   reason or NackReason.ERROR)
            elif event == "ack" and (not self.relay or (not consumer.manual_ack
                                                        and consumer.client.door == DOOR)):
                return    # "sent" answered already; a Twino consumer that does not ack has no
                # ack to relay (another door's auto-acking consumer acks by taking the message)
            else:
                frame = self._relayed(consumer, None if event == "ack" else (reason or "none"),
                                      receipt)
            self.done = True
            if event == "nack":
                state.nacks += 1
            if conn.connected:
                conn.write(encode(frame))
        except Exception:
            self.conn.outbox.failed()

    def _relayed(self, consumer, reason, ack):
        """The consumer's ack frame itself (`ack`, the receipt a Twino consumer settled it
        with), else a server-made one naming the consumer (a foreign ack, an ack timeout)."""
        state = self.state
        source = None if state.hide_names or consumer is None else consumer.client.id
        if ack is not None:
            return Frame(MessageType.ACKNOWLEDGE, ack.first_acquirer, False, ack.ttl,
                         ack.pending_response, ack.pending_ack, self.message_id,
                         None if state.hide_names else (ack.source or source), ack.target,
                         ack.content_type, ack.headers, ack.content)
        frame = server_ack(self.message_id, state.channel, state.id, reason)
        frame.source = source
        return frame


class TwinoQueues:
    """Channel/queue resolution with the real server's auto-create defaults, and the data path."""

    def __init__(self, door):
        self.door = door
        self.broker = door.broker
        self.by_key = {}     # (channel name, queue id) -> TwinoQueue: the push hot path

    # -- resolution and creation ------------------------------------------------------------
    def policy_for(self, name):
        for pattern, policy in self.door.settings["producer_ack"]:
            if fnmatch.fnmatchcase(name, pattern):
                return policy
        return self.door.settings["producer_ack_default"]

    def channel_for(self, name, create=True, client=None, verb=CONSUME, queue=None):
        """(channel, 0) or (None, result code). With users, a channel made on the way (a
        join, a push, a pull) needs the client's `verb` on the queue it is made for
        (`queue`, else the channel's own name): Denied otherwise."""
        channel = self.broker.channels.get(name) if name else None
        if channel is not None:
            return channel, 0
        if not valid_name(name or ""):
            return None, ResultCode.BAD_REQUEST
        if not (create and self.door.settings["auto_create_channels"]):
            return None, ResultCode.NOT_FOUND
        if client is not None:
            check(client, verb, QUEUE, queue or name)
        return self.create_channel(name, {}), 0

    def create_channel(self, name, options):
        """DestroyWhenEmpty is the core channel's (the broker's sweep removes it); the other
        channel options are this door's rules for the queues its clients create."""
        settings = dict(CHANNEL_DEFAULTS)
        defaults = dict(QUEUE_DEFAULTS)
        destroy = bool(options.pop("destroy_when_empty", settings.pop("destroy_when_empty")))
        for key, value in options.items():
            (settings if key in settings else defaults)[key] = value
        return self.broker.channel(name, defaults=defaults, attrs={"twino": settings},
                                   destroy_when_empty=destroy)

    def queue_for(self, channel_name, queue_id, create=True, client=None, verb=PUBLISH):
        """(TwinoQueue, 0) or (None, result code), creating channel and queue when allowed.
        With users (`client` given), making them needs the client's `verb` on the queue:
        a stock client that pushes to (or pulls from) its own queues makes them."""
        state = self.by_key.get((channel_name, queue_id))
        if state is not None:
            return state, 0
        name = core_name(channel_name or "", queue_id)
        channel, code = self.channel_for(channel_name, create, client, verb, name)
        if code:
            return None, code
        queue = channel.queues.get(queue_id)
        if queue is not None:
            state = self.state_of(queue)
        else:
            if not (create and self.door.settings["auto_create_queues"]):
                return None, ResultCode.NOT_FOUND
            if client is not None:
                check(client, verb, QUEUE, name)
            code = self.refusal(channel, queue_id)
            if code:
                return None, code
            state, code = self.create_queue(channel, queue_id, {})
            if code:
                return None, code
        self.by_key[(channel_name, queue_id)] = state
        return state, 0

    def refusal(self, channel, queue_id):
        """Why the channel refuses a new queue (its options), or 0."""
        opts = channel.attrs.get("twino", {})
        if not opts.get("allow_multiple_queues", True) and channel.queues:
            return ResultCode.UNAUTHORIZED
        allowed = opts.get("allowed_queues")
        if allowed and queue_id not in allowed:
            return ResultCode.UNAUTHORIZED
        limit = opts.get("queue_limit") or 0
        if limit and len(channel.queues) >= limit:      # upstream B5 inverts this test
            return ResultCode.LIMIT_EXCEEDED
        return 0

    def create_queue(self, channel, queue_id, options):
        """A new Twino queue: channel defaults, then `options`; (TwinoQueue, 0), or (None,
        481) when core queue `C/N` exists in another channel (the channel named `C/N`, whose
        queue 0 it is). The broker puts it in the channel, which gives every member a
        consumer of it."""
        name = core_name(channel.name, queue_id)
        if name in self.broker.queues or (queue_id and name in self.broker.channels):
            return None, ResultCode.DUPLICATE
        state = TwinoQueue(channel.name, queue_id, name, self.policy_for(name))
        core = state.apply({**channel.defaults, **options})
        mode = core.pop("mode", PUSH_ALL)
        state.queue = self.broker.queue(name, mode=mode,
                                        attrs={"twino": state, "durable": state.persistent},
                                        **core)
        return state, 0

    def state_of(self, queue):
        """The Twino side of a queue in a channel. A queue another door made (an MQKS
        `consume jobs`, a Malamute service) gets one on first sight: its mode and core
        options stay as they are, the channel's defaults set the Twino-only ones (member
        acks, message ids, hidden names) and the producer-ack policy is the name's; then a
        restored queue's saved Twino arguments, if it has them (its durable definition)."""
        state = queue.attrs.get("twino")
        if state is None:
            channel = queue.channel
            queue_id = 0 if queue.name == channel.name else numbered(queue.name)[1]
            state = TwinoQueue(channel.name, queue_id, queue.name, self.policy_for(queue.name))
            state.apply(channel.defaults)      # the core options it returns are not ours
            saved = queue.attrs.get("arguments", {}).pop(DOOR, None)
            if saved:
                state.apply(saved)             # Twino-only: no core options in them
                if state.persistent:
                    queue.attrs["durable"] = True
            state.queue = queue
            queue.attrs["twino"] = state
        return state

    def update(self, state, options):
        """Options applied live (612): status, acks, limits, timeouts."""
        was_acking = state.request_ack
        core = state.apply(options)
        queue = state.queue
        mode = core.pop("mode", None)
        if state.request_ack != was_acking:
            for consumer in list(queue.consumers):
                if consumer.deliver is deliver:
                    if not state.request_ack:
                        consumer.ack_all()
                    consumer.manual_ack = state.request_ack
        if core:
            queue.configure(**core)
        if mode is not None and mode != queue.mode:
            queue.set_mode(mode)
        if state.persistent:
            queue.attrs["durable"] = True
        self.broker.emit("queue-defined", queue=queue)

    def forget(self, queue):
        state = queue.attrs.get("twino")
        if state is not None and self.by_key.get((state.channel, state.id)) is state:
            del self.by_key[(state.channel, state.id)]

    def member_consumer(self, conn):
        """make_consumer for core Channel.join: one consumer per queue, id = queue name."""
        client = conn.client

        def make(queue):
            state = self.state_of(queue)
            return Consumer(queue.name, client, deliver, manual_ack=state.request_ack,
                            tag=Member(conn, state))
        return make

    # -- push -----------------------------------------------------------------------------------
    def push(self, conn, frame):
        """One QueueMessage on its own (frames that arrive with the hello)."""
        self.push_run(conn, (frame,), 0)

    def push_run(self, conn, frames, i):
        """The hot path: frames[i] and the QueueMessages right after it to the same queue,
        as a producer sends bursts to one queue, with the queue and its options looked up
        once per run. Returns the index of the first frame not taken. A frame that fails
        is answered on its own (door.failed) and the run goes on."""
        first = frames[i]
        target, queue_id = first.target, first.content_type
        state = self.by_key.get((target, queue_id))
        if state is None:
            state, code = self.queue_for(target, queue_id, client=conn.client)
            if code:
                self.push_failed(conn, first, code, "not-found")
                return i + 1
        queue, name, raw_door = state.queue, state.name, state.raw_door
        client_id = conn.client.id
        source = None if state.hide_names else client_id
        request_ack, make_ids = state.request_ack, state.use_message_id
        now = conn.last_seen                 # the time of this read
        expires_at = now + state.message_timeout if state.message_timeout else None
        policy = state.policy
        relay = policy == "relay"
        observed = relay or policy == "sent"
        stored = policy == "received" or policy == "saved"
        storage = self.broker.storage
        pull, produced = queue.mode == PULL, state.produced
        put, write, client = queue.put_message, conn.write, conn.client
        received = queue.received
        start, count = i, len(frames)
        while i < count:
            frame = frames[i]
            if (frame.type != QUEUE_MESSAGE or frame.target is not target
                    or frame.content_type != queue_id):
                break
            i += 1
            try:
                wire_id = frame.message_id or (new_id() if make_ids else None)
                message = from_frame(frame, wire_id or new_id(), client_id, name,
                                     (frame, wire_id, source, request_ack), raw_door, now,
                                     expires_at)
                if queue.limited:
                    refused = queue.refusal(message)
                    if refused is not None:
                        self.push_failed(conn, frame, ResultCode.UNAUTHORIZED
                                         if refused == "stopped" else
                                         ResultCode.LIMIT_EXCEEDED, refused)
                        continue
                if pull:                     # only Twino pullers take from it: encode now
                    try:                     # rather than while a puller waits
                        relayed(message)
                    except Unrepresentable:
                        pass                 # the pull drops and counts it
                if frame.pending_ack and wire_id is not None:
                    if observed:
                        put(message, ProducerAck(conn, wire_id, state, relay), client)
                    elif stored:        # once what the put made durable is on disk
                        before = storage.appended
                        put(message, None, client)
                        ack = encode(server_ack(wire_id, state.channel, queue_id))
                        after = storage.appended
                        if after != before:
                            conn.confirm_after = after
                        if after != before and storage.late:   # the cluster may refuse it
                            storage.when_stored(after, partial(self.stored_ack, conn, frame,
                                                               before, after, ack), before)
                        elif conn.confirm_after > storage.durable:
                            storage.when_stored(conn.confirm_after, partial(conn.write, ack))
                        else:
                            write(ack)
                    else:               # the persistent handler's decision None
                        put(message, None, client)
                else:
                    put(message, None, client)
                if frame.headers:
                    self.copies(conn, frame, state)
                if produced:
                    self.door.events.produced(state, message, client,
                                              storage.appended if queue.journal else None)
            except Exception:
                self.door.failed(conn, frame)
        if queue.received != received:      # not when every push was refused
            state.last_received = now
        conn.traffic.messages_in += i - start
        return i

    def stored_ack(self, conn, frame, before, after, ack):
        """A `received`/`saved` ack on a store that refuses late (core.storage LateBarrier):
        `ack`, or the nack `refused` if the cluster refused the push after the door put it."""
        if self.broker.storage.refused_in(before, after):
            self.push_failed(conn, frame, ResultCode.LIMIT_EXCEEDED, "refused")
        else:
            conn.write(ack)

    def push_failed(self, conn, frame, code, reason):
        """A producer waiting for its ack gets a nack it can match (upstream sends only a
        Response then, which such a producer never matches: B9); others the Response."""
        state_target = frame.target
        if frame.pending_ack and frame.message_id:
            conn.write(encode(server_ack(frame.message_id, state_target, frame.content_type,
                                         reason)))
        elif frame.message_id:
            conn.write(encode(Frame(MessageType.RESPONSE, message_id=frame.message_id,
                                    target=state_target, content_type=code)))

    def copies(self, conn, frame, state):
        """CC: each `channel[;queueId[;messageId]]` gets a copy without the CC headers, under
        its own channel and queue id (upstream keeps the original's: B10). No acks, no errors."""
        targets = frame.header_values(Header.CC)
        if not targets:
            return
        headers = [(k, v) for k, v in frame.headers if k.lower() != "cc"] or None
        for spec in targets:
            parts = [p.strip() for p in spec.split(";")]
            try:
                queue_id = int(parts[1]) if len(parts) > 1 and parts[1] else state.id
            except ValueError:
                continue
            try:
                copy_state, code = self.queue_for(parts[0], queue_id, client=conn.client)
            except Denied:           # a queue this client may not make: no copy
                continue
            if code:
                continue
            copy_id = parts[2] if len(parts) > 2 and parts[2] else new_id()
            copy = Frame(QUEUE_MESSAGE, high_priority=frame.high_priority, message_id=copy_id,
                         source=frame.source, target=copy_state.channel,
                         content_type=copy_state.id, headers=headers, content=frame.content)
            self.push_copy(conn, copy, copy_state)

    def push_copy(self, conn, frame, state):
        now = self.door.clock()
        relay = (frame, frame.message_id, None if state.hide_names else conn.client.id,
                 state.request_ack)
        message = from_frame(frame, frame.message_id, conn.client.id, state.name, relay,
                            state.raw_door, now,
                            now + state.message_timeout if state.message_timeout else None)
        if state.queue.refusal(message) is None:
            state.queue.put_message(message, None, conn.client)

    # -- consumer acks ----------------------------------------------------------------------------
    def consumer_ack(self, conn, frame):
        """A queue ack/nack; False when `conn` has no consumer for that channel and queue."""
        consumer = conn.client.consumers.get(core_name(frame.target, frame.content_type))
        if consumer is None or not frame.message_id:
            return False
        message_id = conn.aliases.pop(frame.message_id, frame.message_id) if conn.aliases \
            else frame.message_id
        reason = frame.header(Header.NACK_REASON) if frame.headers else None
        consumer.ack(message_id, reason is None, reason, frame)
        return True

    # -- pull -------------------------------------------------------------------------------------
    def pull(self, conn, request):
        """QueuePullRequest: exactly Count messages (upstream loses one more: B1), then End."""
        if not request.message_id:
            request.message_id = new_id()
        state, code = self.queue_for(request.target, request.content_type,
                                     client=conn.client, verb=CONSUME)
        write = conn.write
        if code:
            return write(encode(pull_status(request, NoContent.UNACCEPTABLE)))
        if state.queue.mode != PULL:
            return write(encode(pull_status(request, NoContent.UNACCEPTABLE)))
        consumer = conn.client.consumers.get(state.name)
        if consumer is None:
            return write(encode(pull_status(request, NoContent.UNAUTHORIZED)))
        try:
            count = int((request.header(Header.COUNT) or "").strip())
        except ValueError:
            count = 0
        if count < 1:
            return write(encode(pull_status(request, NoContent.UNACCEPTABLE)))
        clear = _CLEAR.get((request.header(Header.CLEAR) or "").strip().lower(), False)
        info = (request.header(Header.INFO) or "").strip().lower() == "yes"
        lifo = (request.header(Header.ORDER) or "").strip().upper() == "LIFO"
        left = [] if info else None
        entries = state.queue.pull(consumer, count, lifo, clear, left)
        if isinstance(entries, defer.Deferred):      # the cluster engine answers later
            entries.addCallback(self.pulled, conn, request, state, consumer, count, left)
            entries.addErrback(lambda _: write(encode(pull_status(request, NoContent.EMPTY))))
            return None
        return self.pulled(entries, conn, request, state, consumer, count, left)

    def pulled(self, entries, conn, request, state, consumer, count, left):
        """The answer to a pull: each entry taken, then End (or Empty)."""
        write = conn.write
        if not entries:
            return write(encode(pull_status(request, NoContent.EMPTY)))
        ack_bit = consumer.manual_ack
        delivered = conn.traffic.delivered
        for index, entry in enumerate(entries):
            message = entry.message
            delivered(message)
            try:
                if message.raw_door is state.raw_door:
                    raw = relayed(message)
                else:
                    raw = queue_delivery(message, conn.wire_id(message.id), state.channel,
                                         state.id, True, ack_bit, state.hide_names)
                write(pull_answer(raw, request.message_id, count, index + 1,
                                  None if left is None else left[index], ack_bit))
            except Unrepresentable as exc:
                undeliverable(consumer, entry, exc.reason)
        write(encode(pull_status(request, NoContent.END)))
