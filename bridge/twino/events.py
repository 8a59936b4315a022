"""Twino event subscriptions (Event frames, ct 1 subscribe / 0 unsubscribe) fed by the core's
lifecycle events, so clients of every door show up in ClientConnected and the like."""
from functools import partial

from twisted.logger import Logger

from mqksbridge.protocols.twino.codec import Header, encode
from mqksbridge.protocols.twino.models import (
    CHANNEL_CREATED, CHANNEL_EVENTS, CHANNEL_REMOVED, CLIENT_CONNECTED, CLIENT_DISCONNECTED,
    CLIENT_JOINED, CLIENT_LEFT, MESSAGE_PRODUCED, QUEUE_CREATED, QUEUE_REMOVED, QUEUE_UPDATED,
    SERVER_EVENTS, channel_event, client_event, event_frame, message_event, queue_event,
    subscription_event,
)

_QUEUE_EVENTS = {"queue-created": QUEUE_CREATED, "queue-updated": QUEUE_UPDATED,
                 "queue-removed": QUEUE_REMOVED}
log = Logger(namespace="mqksbridge.twino")


class TwinoEvents:
    def __init__(self, door):
        self.door = door
        self.subs = {}       # (event, channel or None, queue id) -> {conn: None}
        self.owned = {}      # conn -> set of keys, to forget a connection at once

    # -- subscribing ----------------------------------------------------------------------------
    def subscribe(self, conn, frame):
        """Answer 0, or 1 for a missing channel/queue or an unknown event name (upstream
        leaves an unknown name unanswered, so the client waits for its timeout)."""
        key = self._key(frame)
        if key is not None:
            listeners = self.subs.setdefault(key, {})
            if frame.content_type:
                listeners[conn] = None
                self.owned.setdefault(conn, set()).add(key)
            else:
                listeners.pop(conn, None)
        self.door.ops.answer(conn, frame, 0 if key is not None else 1)

    def _key(self, frame):
        name = frame.target or ""
        if name in SERVER_EVENTS:
            return name, None, 0
        channel_name = (frame.header(Header.CHANNEL_NAME) or "").strip()
        channel = self.door.broker.channels.get(channel_name)
        if channel is None:
            return None
        if name in CHANNEL_EVENTS:
            return name, channel_name, 0
        if name != MESSAGE_PRODUCED:
            return None
        try:
            queue = channel.queues.get(int((frame.header(Header.QUEUE_ID) or "").strip()))
        except ValueError:
            return None
        if queue is None:
            return None
        state = self.door.queues.state_of(queue)
        key = name, channel_name, state.id
        state.produced = self.subs.setdefault(key, {})   # the push path checks this dict
        return key

    def forget(self, conn):
        for key in self.owned.pop(conn, ()):
            self.subs.get(key, {}).pop(conn, None)

    # -- notifying ------------------------------------------------------------------------------
    def _notify(self, key, body):
        listeners = self.subs.get(key)
        if listeners:
            data = encode(event_frame(key[0], body, key[1], key[2]))
            for conn in list(listeners):
                if conn.connected:
                    conn.write(data)

    def core_event(self, event, **data):
        """broker.emit listener: core lifecycle events as Twino notifications. It runs
        inside whatever any door's client did: a notification that cannot be made is
        logged and dropped, never raised into that client's request."""
        try:
            self._core_event(event, data)
        except Exception:
            log.failure("twino {event} notification failed", event=event)

    def _core_event(self, event, data):
        node = self.door.settings["node"]
        if event in ("client-connected", "client-disconnected"):
            client = data["client"]
            name = CLIENT_CONNECTED if event == "client-connected" else CLIENT_DISCONNECTED
            self._notify((name, None, 0), client_event(id=client.id, name=client.name or None,
                                                       type=client.type or None, node=node))
        elif event in ("channel-created", "channel-removed"):
            channel = data["channel"]
            name = CHANNEL_CREATED if event == "channel-created" else CHANNEL_REMOVED
            self._notify((name, None, 0), channel_event(
                name=channel.name, active_clients=len(channel.members),
                client_limit=channel.attrs.get("twino", {}).get("client_limit") or 0,
                node=node))
        elif event in ("client-joined", "client-left"):
            channel, client = data["channel"], data["client"]
            name = CLIENT_JOINED if event == "client-joined" else CLIENT_LEFT
            self._notify((name, channel.name, 0), subscription_event(
                channel=channel.name, client_id=client.id, client_name=client.name or None,
                client_type=client.type or None, node=node))
        elif event in _QUEUE_EVENTS:
            queue = data["queue"]
            state = queue.attrs.get("twino")
            if state is None:
                if queue.channel is None or event != "queue-created":
                    return
                state = self.door.queues.state_of(queue)    # another door's, in a channel
            if event == "queue-created":
                state.queue = data["queue"]
                key = MESSAGE_PRODUCED, state.channel, state.id
                if key in self.subs:
                    state.produced = self.subs[key]
            elif event == "queue-removed":
                self.door.queues.forget(data["queue"])
            self.queue_event(event, state)

    def queue_event(self, event, state):
        queue = state.queue
        self._notify((_QUEUE_EVENTS[event], state.channel, 0), queue_event(
            channel=state.channel, id=state.id, tag=state.tag, status=state.status_name,
            priority_messages=queue.lengths()[0] if queue else 0,
            messages=queue.lengths()[1] if queue else 0, node=self.door.settings["node"]))

    def produced(self, state, message, client, stored=None):
        """MessageProduced. `stored` is the storage sequence of the push's records when it
        reached a durable queue: the event then says Saved once they are on disk, and is
        sent only then."""
        event = message_event(
            channel=state.channel, queue=state.id, id=message.id,
            saved=stored is not None or len(state.queue) > 0,
            producer_id=client.id, producer_name=client.name or None,
            producer_type=client.type or None)
        key = (MESSAGE_PRODUCED, state.channel, state.id)
        if stored is None:
            self._notify(key, event)
        else:
            self.door.broker.storage.when_stored(stored, partial(self._notify, key, event))
