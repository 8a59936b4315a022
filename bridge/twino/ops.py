"""Twino server operations (Server frames, content types 601-663) on the core.

Every operation a client waits for gets a Response with the result code of the 3.x server.
Where 3.7.2 stays silent (an existing channel, a queue the channel refuses) or fails
(610 without Queue-Id, options ignored in an existing channel, a bad channel name dropping
the connection) we answer with a code instead; specs/twino.md lists each case.
"""
import json
from functools import partial

from mqksbridge.bridge.engine import (
    BROKER, MAILBOX, MANAGE, QUEUE, STREAM, Denied, check, queue_name)
from mqksbridge.protocols.twino.codec import (ContentType, Header, ResultCode,
                                              TwinoProtocolError, encode, queue_id_of, response)
from mqksbridge.protocols.twino.models import (
    CHANNEL_OPTIONS, DIRECT_BINDING, QUEUE_BINDING, channel_information, client_information,
    json_list, node_information,
    parse_options, queue_information, queue_status_from_header,
)
from mqksbridge.protocols.twino.names import name_matches, valid_name
from mqksbridge.bridge.twino.queues import STATUS_MODES

OK, NOT_FOUND, DUPLICATE = ResultCode.OK, ResultCode.NOT_FOUND, ResultCode.DUPLICATE
OPTION_NAMES = CHANNEL_OPTIONS + ["MessageSizeLimit"]
# Operations upstream allows without an admin authorization (twino.allow_admin = false
# refuses the others to everyone).
UPSTREAM_OPEN = {ContentType.JOIN, ContentType.LEAVE, ContentType.CREATE_CHANNEL,
                 ContentType.CREATE_QUEUE, ContentType.UPDATE_QUEUE}


def _ms(seconds):
    return int(round((seconds or 0) * 1000))


class TwinoOperations:
    def __init__(self, door):
        self.door = door
        self.broker = door.broker
        self.queues = door.queues
        self.table = {
            ContentType.JOIN: self.join, ContentType.LEAVE: self.leave,
            ContentType.CREATE_CHANNEL: self.create_channel,
            ContentType.REMOVE_CHANNEL: self.remove_channel,
            ContentType.CHANNEL_INFORMATION: self.channel_info,
            ContentType.CHANNEL_LIST: self.channel_list,
            ContentType.CHANNEL_CONSUMERS: self.channel_consumers,
            ContentType.CREATE_QUEUE: self.create_queue,
            ContentType.REMOVE_QUEUE: self.remove_queue,
            ContentType.UPDATE_QUEUE: self.update_queue,
            ContentType.CLEAR_MESSAGES: self.clear_messages,
            ContentType.QUEUE_INFORMATION: self.queue_info,
            ContentType.QUEUE_LIST: self.queue_list,
            ContentType.INSTANCE_LIST: self.instance_list,
            ContentType.CLIENT_LIST: self.client_list,
            ContentType.ROUTER_LIST: door.routers.list_routers,
            ContentType.CREATE_ROUTER: door.routers.create_router,
            ContentType.REMOVE_ROUTER: door.routers.remove_router,
            ContentType.LIST_BINDINGS: door.routers.list_bindings,
            ContentType.ADD_BINDING: door.routers.add_binding,
            ContentType.REMOVE_BINDING: door.routers.remove_binding,
        }

    def handle(self, conn, frame):
        """Run one operation; it returns a code, (code, content), or None (answered itself).
        With users, the operation's objects (`required`) need `manage` first; an operation
        this door does not know is refused then, and ignored (as upstream) without users."""
        operation = self.table.get(frame.content_type)
        principal = conn.client.principal
        if operation is None:
            if principal is not None:
                self.door.security.refused("twino", "denied", conn.client.id,
                                           f"unknown operation {frame.content_type}")
                self.answer(conn, frame, ResultCode.UNAUTHORIZED)
            return
        if frame.content_type not in UPSTREAM_OPEN and not self.door.settings["allow_admin"]:
            return self.answer(conn, frame, ResultCode.UNAUTHORIZED)
        try:
            if principal is not None:
                for kind, name in required(frame, self.broker):
                    check(conn.client, MANAGE, kind, name)
            result = operation(conn, frame)
        except TwinoProtocolError:       # unreadable options JSON
            result = ResultCode.BAD_REQUEST
        except Denied as exc:            # a user's rules (docs/security.md)
            self.door.security.refused("twino", "denied", conn.client.id, str(exc))
            result = ResultCode.UNAUTHORIZED
        if result is not None:
            code, content = result if isinstance(result, tuple) else (result, b"")
            self.answer(conn, frame, code, content)

    @staticmethod
    def answer(conn, request, code, content=b""):
        """A Response, only when the request waits for one and has an id."""
        if request.pending_response and request.message_id:
            conn.write(encode(response(request, code, content, target=conn.client.id)))

    # -- channels -------------------------------------------------------------------------------
    def join(self, conn, frame):
        channel, code = self.queues.channel_for(frame.target, client=conn.client)
        if code:
            return code
        client = conn.client
        if client.id in channel.members:
            return OK
        limit = channel.attrs.get("twino", {}).get("client_limit") or 0
        if limit and len(self.broker.members(channel)) >= limit:
            return ResultCode.LIMIT_EXCEEDED
        self.broker.answer_in_place(    # before any stored message, once consumers are in place
            partial(self.answer, conn, frame, OK),
            partial(self.broker.join_channel, channel, client, self.queues.member_consumer(conn)))

    def leave(self, conn, frame):
        channel = self.broker.channels.get(frame.target or "")
        if channel is None or conn.client.id not in channel.members:
            return NOT_FOUND
        self.broker.leave_channel(channel, conn.client)
        return OK

    @staticmethod
    def _channel_name(frame):
        return (frame.header(Header.CHANNEL_NAME) or frame.target or "").strip()

    def create_channel(self, conn, frame):
        name = self._channel_name(frame)
        if not valid_name(name):
            return ResultCode.BAD_REQUEST
        if name in self.broker.channels:
            return DUPLICATE               # upstream sends nothing; the client would time out
        self.queues.create_channel(name, parse_options(frame.content, OPTION_NAMES))
        return OK

    def remove_channel(self, conn, frame):
        name = self._channel_name(frame)
        return OK if self.broker.remove_channel(name) else NOT_FOUND

    def channel_json(self, channel):
        settings = channel.attrs.get("twino", {})
        defaults = channel.defaults
        return channel_information(
            name=channel.name, queues=sorted(k for k in channel.queues if isinstance(k, int)),
            allow_multiple_queues=settings.get("allow_multiple_queues", True),
            allowed_queues=settings.get("allowed_queues"),
            only_first_acquirer=bool(defaults.get("send_only_first_acquirer")),
            request_acknowledge=bool(defaults.get("request_acknowledge")),
            acknowledge_timeout=int(defaults.get("acknowledge_timeout") or 0),
            message_timeout=int(defaults.get("message_timeout") or 0),
            use_message_id=bool(defaults.get("use_message_id", True)),
            wait_for_acknowledge=bool(defaults.get("wait_for_acknowledge")),
            hide_client_names=bool(defaults.get("hide_client_names")),
            active_clients=len(self.broker.members(channel)),
            client_limit=settings.get("client_limit") or 0,
            queue_limit=settings.get("queue_limit") or 0,
            destroy_when_empty=channel.destroy_when_empty)

    def channel_info(self, conn, frame):
        channel = self.broker.channels.get(frame.target or "")
        if channel is None:
            return NOT_FOUND
        return OK, self.channel_json(channel)

    def channel_list(self, conn, frame):
        pattern = (frame.header(Header.CHANNEL_NAME) or "").strip()
        return OK, json_list([self.channel_json(c) for name, c in self.broker.channels.items()
                              if name_matches(pattern, name)])

    def client_json(self, client):
        return client_information(
            id=client.id, name=client.name or None, type=client.type or None,
            online=_ms(self.door.clock() - client.connected_at),
            is_authenticated=client.door == "twino" and (
                bool(self.door.settings["token"]) or (client.principal is not None
                                                      and not client.principal.anonymous)))

    def channel_consumers(self, conn, frame):
        channel = self.broker.channels.get(frame.target or "")
        if channel is None:
            return NOT_FOUND
        return OK, json_list([self.client_json(c) for c in self.broker.members(channel)])

    # -- queues ---------------------------------------------------------------------------------
    def _queue(self, frame, queue_id):
        channel = self.broker.channels.get(self._channel_name(frame))
        queue = channel.queues.get(queue_id) if channel is not None else None
        return None if queue is None else self.queues.state_of(queue)

    @staticmethod
    def _queue_id_header(frame):
        try:
            return int((frame.header(Header.QUEUE_ID) or "").strip())
        except ValueError:
            return None

    def create_queue(self, conn, frame):
        queue_id = self._queue_id_header(frame)
        if queue_id is None or not 0 <= queue_id <= 0xFFFF:
            return ResultCode.UNACCEPTABLE     # and nothing is created (upstream B3 makes 0)
        options = parse_options(frame.content, OPTION_NAMES)
        status = frame.header(Header.QUEUE_STATUS)
        if status is not None:
            options.pop("status", None)
            options["mode"] = STATUS_MODES[queue_status_from_header(status)]
        if frame.header(Header.QUEUE_TAG) is not None:
            options["tag"] = frame.header(Header.QUEUE_TAG).strip()
        if (frame.header(Header.WAIT_FOR_ACKNOWLEDGE) or "").strip().lower() in ("1", "true"):
            options["wait_for_acknowledge"] = True
        if frame.header(Header.DELIVERY_HANDLER) is not None:
            options["delivery_handler"] = frame.header(Header.DELIVERY_HANDLER).strip()
        channel, code = self.queues.channel_for(self._channel_name(frame))
        if code:
            return code
        if queue_id in channel.queues:
            return DUPLICATE
        code = self.queues.refusal(channel, queue_id)
        if code:
            return code                        # upstream sends nothing
        _, code = self.queues.create_queue(channel, queue_id, options)   # options apply (B4)
        return code or OK

    def remove_queue(self, conn, frame):
        queue_id = queue_id_of(frame.content)
        channel = self.broker.channels.get(frame.target or "")
        queue = channel.queues.get(queue_id) if channel is not None else None
        if queue is None:
            return NOT_FOUND
        self.broker.delete_queue(queue.name)
        return OK

    def update_queue(self, conn, frame):
        state = self._queue(frame, self._queue_id_header(frame))
        if state is None:
            return NOT_FOUND
        if not frame.content.strip():
            return ResultCode.BAD_REQUEST
        self.queues.update(state, parse_options(frame.content, OPTION_NAMES))
        self.door.events.queue_event("queue-updated", state)
        return OK

    def clear_messages(self, conn, frame):
        state = self._queue(frame, self._queue_id_header(frame))
        if state is None:
            return NOT_FOUND
        priority = (frame.header(Header.PRIORITY_MESSAGES) or "").strip().lower() == "yes"
        regular = (frame.header(Header.MESSAGES) or "").strip().lower() == "yes"
        if priority or regular:
            state.queue.clear("all" if priority and regular else
                              "priority" if priority else "regular")
        return OK

    def queue_json(self, state):
        queue = state.queue
        return queue_information(
            channel=state.channel, tag_name=state.tag, id=state.id,
            priority_messages=queue.lengths()[0], messages=queue.lengths()[1],
            status=state.status_name, only_first_acquirer=queue.only_first,
            request_acknowledge=state.request_ack, acknowledge_timeout=_ms(queue.ack_timeout),
            message_timeout=_ms(state.message_timeout), use_message_id=state.use_message_id,
            wait_for_acknowledge=queue.wait_for_ack, hide_client_names=state.hide_names,
            received_messages=queue.received, sent_messages=queue.delivered,
            deliveries=queue.delivered, negative_acks=state.nacks,
            acks=max(0, queue.acked - state.nacks), timeout_messages=queue.expired,
            saved_messages=len(queue), removed_messages=queue.dropped,
            last_message_received=_ms(state.last_received),
            message_limit=queue.max_messages or 0, message_size_limit=queue.max_message_size or 0)

    def queue_info(self, conn, frame):
        channel = self.broker.channels.get(frame.target or "")
        queue = channel.queues.get(queue_id_of(frame.content)) if channel is not None else None
        if queue is None:
            return NOT_FOUND
        return OK, self.queue_json(self.queues.state_of(queue))

    def queue_list(self, conn, frame):
        channel = self.broker.channels.get(frame.target or "")
        if channel is None:
            return NOT_FOUND
        return OK, json_list([self.queue_json(self.queues.state_of(q))
                              for _, q in sorted(channel.queues.items())])

    # -- server ---------------------------------------------------------------------------------
    def instance_list(self, conn, frame):
        door = self.door
        node = node_information(id=door.node_id, name=door.settings["node"],
                                host=",".join(door.settings["listen"]), is_slave=False,
                                is_connected=True, lifetime=_ms(door.clock() - door.started))
        return OK, json_list([node])

    def client_list(self, conn, frame):
        return OK, json_list([self.client_json(c) for c in self.broker.clients.values()
                              if name_matches(frame.target, c.type)])


# -- who may run which operation (docs/security.md, "Twino operations") --------------------------
# Each operation names the objects it changes or shows; with users the client needs `manage`
# on every one. Channel C is named as queue `C` (its queue 0), queue N of C as `C/N`, router R
# as stream `R`. Join and leave need nothing here: a member gets consumers only on the
# channel's queues it may read.

def _channel(frame):
    return TwinoOperations._channel_name(frame)


def _queue_by_header(frame):
    queue_id = TwinoOperations._queue_id_header(frame)
    return queue_name(_channel(frame), queue_id or 0)


def _creating_queue(frame, broker):
    """610 makes queue C/N, and channel C with it when there is none."""
    channel = _channel(frame)
    found = [(QUEUE, _queue_by_header(frame))]
    if channel not in broker.channels:
        found.append((QUEUE, channel))
    return found


def _removing_channel(frame, broker):
    channel = broker.channels.get(_channel(frame))
    queues = [queue.name for queue in channel.queues.values()] if channel is not None else []
    return [(QUEUE, _channel(frame))] + [(QUEUE, name) for name in queues]


def _binding_target(frame):
    """What a new router binding sends to: a queue binding's queue, a direct binding's
    mailbox (a name or type pattern: every client, so `broker`), a tag binding's queues
    (any queue with the tag: `broker`). Unreadable JSON asks for nothing more (it is
    answered 400)."""
    try:
        data = {k.lower(): v for k, v in json.loads(frame.content.decode("utf-8")).items()}
        target, kind = str(data["target"]), int(data.get("bindingtype") or 0)
        key = int(data.get("contenttype") or 0)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        return []
    if kind == QUEUE_BINDING:
        return [(QUEUE, queue_name(target, key))]
    if kind == DIRECT_BINDING and not target.startswith("@"):
        return [(MAILBOX, target)]
    return [(BROKER, "")]


def _broker(frame, broker):
    """Lists of every client, channel or router: server-wide management."""
    return [(BROKER, "")]


RULES = {
    ContentType.JOIN: lambda frame, broker: [],
    ContentType.LEAVE: lambda frame, broker: [],
    ContentType.CREATE_CHANNEL: lambda frame, broker: [(QUEUE, _channel(frame))],
    ContentType.REMOVE_CHANNEL: _removing_channel,
    ContentType.CHANNEL_INFORMATION: lambda frame, broker: [(QUEUE, frame.target or "")],
    ContentType.CHANNEL_LIST: _broker,
    ContentType.CHANNEL_CONSUMERS: _broker,
    ContentType.CREATE_QUEUE: _creating_queue,
    ContentType.REMOVE_QUEUE: lambda frame, broker: [
        (QUEUE, queue_name(frame.target or "", queue_id_of(frame.content) or 0))],
    ContentType.UPDATE_QUEUE: lambda frame, broker: [(QUEUE, _queue_by_header(frame))],
    ContentType.CLEAR_MESSAGES: lambda frame, broker: [(QUEUE, _queue_by_header(frame))],
    ContentType.QUEUE_INFORMATION: lambda frame, broker: [
        (QUEUE, queue_name(frame.target or "", queue_id_of(frame.content) or 0))],
    ContentType.QUEUE_LIST: lambda frame, broker: [(QUEUE, frame.target or "")],
    ContentType.INSTANCE_LIST: _broker,
    ContentType.CLIENT_LIST: _broker,
    ContentType.ROUTER_LIST: _broker,
    ContentType.CREATE_ROUTER: lambda frame, broker: [(STREAM, frame.target or "")],
    ContentType.REMOVE_ROUTER: lambda frame, broker: [(STREAM, frame.target or "")],
    ContentType.LIST_BINDINGS: lambda frame, broker: [(STREAM, frame.target or "")],
    ContentType.ADD_BINDING: lambda frame, broker: [(STREAM, frame.target or "")]
    + _binding_target(frame),
    ContentType.REMOVE_BINDING: lambda frame, broker: [(STREAM, frame.target or "")],
}


def required(frame, broker):
    """(kind, name) of every object the operation needs `manage` on."""
    return RULES[frame.content_type](frame, broker)
