"""The broker: one namespace per kind (streams, queues, mailboxes, channels), shared by
every door, plus the connected clients. Time-based work (ack timeouts, expiry, flow holds)
happens in tick(now), which whoever runs the broker calls periodically (bridge/ does, from
a TimerService on its clock): the core never schedules periodic work itself."""
from collections import Counter

from mqksbridge.core.channel import Channel
from mqksbridge.core.flow import Flow
from mqksbridge.core.mailbox import Mailbox
from mqksbridge.core.queue import Queue
from mqksbridge.core.storage import StorageBarrier
from mqksbridge.core.stream import Stream


class Broker:
    def __init__(self, clock, *, mailbox_limit=None, flow_limit=None, flow_max_hold=1.0):
        self.clock = clock
        self.flow = Flow(clock, flow_limit, flow_max_hold)
        self.mailbox_limit = mailbox_limit
        self.queues = {}
        self.streams = {}
        self.mailboxes = {}
        self.channels = {}
        self.clients = {}
        self.counters = Counter()
        self.storage = StorageBarrier()  # durable records -> confirmations (core.storage)
        self._listeners = []

    # -- time ----------------------------------------------------------------------------
    def tick(self, now=None):
        """Ack timeouts, expiry and flow holds, up to `now` (default: the clock's now).

        Every queue and mailbox is ticked even when one raises (a door callback's bug
        would otherwise stop expiry for the rest, every time): the failures are raised
        together afterwards, as one ExceptionGroup, for the caller to log."""
        if now is None:
            now = self.clock.now()
        errors = []
        for part in (self.flow, *self.queues.values(), *self.mailboxes.values()):
            _attempt(errors, part.tick, now)
        if errors:
            raise ExceptionGroup("broker tick", errors)

    # -- events (Twino notifications, admin views) ---------------------------------------
    def subscribe(self, listener):
        """listener(event_name, **data) is called for lifecycle events."""
        self._listeners.append(listener)

    def unsubscribe(self, listener):
        if listener in self._listeners:
            self._listeners.remove(listener)

    def emit(self, event, **data):
        """Tell every listener, even when one raises; the failures come out together
        afterwards, for the caller to log."""
        errors = []
        for listener in list(self._listeners):
            try:
                listener(event, **data)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise ExceptionGroup(f"broker event {event}", errors)

    # -- streams ---------------------------------------------------------------------------
    def stream(self, name, create=True):
        stream = self.streams.get(name)
        if stream is None and create:
            stream = self.streams[name] = Stream(name, self.queues)
        return stream

    # -- queues ------------------------------------------------------------------------------
    def queue(self, name, create=True, **options):
        """Get a queue, creating it with `options` when missing (and `create`)."""
        queue = self.queues.get(name)
        if queue is None and create:
            queue = self.queues[name] = Queue(self, name, **options)
            self._queues_changed()
            self.emit("queue-created", queue=queue)
        return queue

    def delete_queue(self, name):
        """Remove a queue: bindings go, consumers are cancelled, the backlog is dropped."""
        queue = self.queues.pop(name, None)
        for stream in self.streams.values():
            if name in stream.bindings:
                stream.set_bindings(name, ())
        if queue is None:
            return False
        self._queues_changed()
        if queue.channel is not None:
            for key, q in list(queue.channel.queues.items()):
                if q is queue:
                    queue.channel.remove_queue(key)
        for consumer in queue.consumers:
            consumer.client.consumers.pop(consumer.id, None)
        queue.close()
        if queue.held:
            self.flow.relieved(queue)
        self.emit("queue-removed", queue=queue)
        return True

    def _queues_changed(self):
        for stream in self.streams.values():
            stream.queues_changed()

    def add_consumer(self, queue, consumer):
        consumer.client.consumers[consumer.id] = consumer
        queue.add_consumer(consumer)
        return consumer

    def remove_consumer(self, consumer, requeue=True):
        consumer.client.consumers.pop(consumer.id, None)
        if consumer.queue is not None:
            consumer.queue.remove_consumer(consumer, requeue=requeue)

    # -- mailboxes -------------------------------------------------------------------------
    def mailbox(self, name, create=True):
        mailbox = self.mailboxes.get(name)
        if mailbox is None and create:
            mailbox = self.mailboxes[name] = Mailbox(name, self.mailbox_limit)
        return mailbox

    # -- channels ----------------------------------------------------------------------------
    def channel(self, name, create=True, defaults=None, attrs=None):
        channel = self.channels.get(name)
        if channel is None and create:
            channel = self.channels[name] = Channel(name, defaults, attrs)
            self.emit("channel-created", channel=channel)
        return channel

    def join_channel(self, channel, client, make_consumer):
        """Membership: a consumer on every queue of the channel; False if already a member."""
        if not channel.join(client, make_consumer):
            return False
        self.emit("client-joined", channel=channel, client=client)
        return True

    def leave_channel(self, channel, client):
        if not channel.leave(client):
            return False
        self.emit("client-left", channel=channel, client=client)
        return True

    def remove_channel(self, name):
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        for client, _ in list(channel.members.values()):
            self.leave_channel(channel, client)
        for queue in list(channel.queues.values()):
            self.delete_queue(queue.name)
        self.emit("channel-removed", channel=channel)
        return True

    # -- clients -----------------------------------------------------------------------------
    def connect(self, client):
        client.connected_at = self.clock.now()
        self.clients[client.id] = client
        self.emit("client-connected", client=client)

    def disconnect(self, client):
        """A session ended: its consumers go (unacked messages return), readers and
        channel memberships are dropped, and its mailbox keeps mail for later.

        Leaving a channel and removing a consumer hand messages on to others (door
        callbacks) and tell listeners: each is done even when another raised, so a bug
        elsewhere never leaves a gone client's consumers in their queues. The failures
        come out together afterwards (ExceptionGroup), for the caller to log."""
        if self.clients.get(client.id) is client:
            del self.clients[client.id]
        errors = []
        for channel in list(self.channels.values()):
            if client.id in channel.members and channel.members[client.id][0] is client:
                _attempt(errors, self.leave_channel, channel, client)
        for consumer in list(client.consumers.values()):
            _attempt(errors, self.remove_consumer, consumer)
        for name in list(client.streams):
            stream = self.streams.get(name)
            if stream is not None:
                stream.remove_readers(client)
        client.streams.clear()
        if client.mailbox is not None:
            client.mailbox.detach(client)
        if client.held:
            self.flow.forget(client)
        _attempt(errors, self.emit, "client-disconnected", client=client)
        if errors:
            raise ExceptionGroup("broker disconnect", errors)

    def find_clients(self, name=None, type=None):
        """Clients by name or type, oldest connection first (Twino @name: / @type:)."""
        found = [c for c in self.clients.values()
                 if (name is None or c.name == name) and (type is None or c.type == type)]
        found.sort(key=lambda c: c.connected_at)
        return found


def _attempt(errors, fn, *args, **kwargs):
    """fn(*args, **kwargs), its exception (if any) kept in `errors` instead of raised."""
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        errors.append(exc)
