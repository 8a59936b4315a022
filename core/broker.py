"""The broker: one namespace per kind (streams, queues, mailboxes, channels), shared by
every door, plus the connected clients. Time-based work (ack timeouts, expiry, flow holds,
channels that asked to go once empty) happens in tick(now), which whoever runs the broker
calls periodically (bridge/ does, from a TimerService on its clock): the core never
schedules periodic work itself.

What an object is does not depend on the door that created it: queue and mailbox size
limits come from the broker's configuration by name (core.limits), and a queue belongs to
the channel of its name (core.channel) whoever made either of them.

A broker with users (`guarded`) makes queues, streams and mailboxes that check each put,
publish and send against its client's principal (core.guarded, core.permissions); one
without makes the plain ones, and no message pays for a check."""
from collections import Counter

from mqksbridge.core.channel import Channel, numbered
from mqksbridge.core.flow import Flow
from mqksbridge.core.guarded import GuardedMailbox, GuardedQueue, GuardedStream
from mqksbridge.core.limits import REJECT, ByName, SizeLimit
from mqksbridge.core.mailbox import Mailbox
from mqksbridge.core.permissions import Denied
from mqksbridge.core.queue import Queue
from mqksbridge.core.storage import StorageBarrier
from mqksbridge.core.stream import Stream


class Broker:
    def __init__(self, clock, *, flow_limit=None, flow_max_hold=1.0, queue_size_limit=None,
                 mailbox_size_limit=None, queue_length_limit=None, queue_overflow=None,
                 guarded=False):
        self.clock = clock
        self.guarded = guarded
        self._Queue, self._Stream, self._Mailbox = (
            (GuardedQueue, GuardedStream, GuardedMailbox) if guarded else (Queue, Stream, Mailbox))
        self.flow = Flow(clock, flow_limit, flow_max_hold)
        self.queue_size_limit = SizeLimit(queue_size_limit)
        self.mailbox_size_limit = SizeLimit(mailbox_size_limit)
        self.queue_length_limit = SizeLimit(queue_length_limit)      # messages, by name
        self.queue_overflow = ByName(queue_overflow, REJECT)         # core.limits policies
        self.queues = {}
        self._numbered = {}      # channel name -> {key: Queue} for queues named `C/N`
        self.streams = {}
        self.mailboxes = {}
        self.channels = {}
        self.clients = {}
        self.counters = Counter()
        self.memory = None             # the bridge's memory watermark (its state() for views)
        self.storage = StorageBarrier()  # durable records -> confirmations (core.storage)
        self.windows = None      # queue -> its StorageWindow or None (core.window; bridge sets)
        self._listeners = []

    # -- time ----------------------------------------------------------------------------
    def tick(self, now=None):
        """Ack timeouts, expiry, flow holds and DestroyWhenEmpty channels, up to `now`
        (default: the clock's now).

        Every queue and mailbox is ticked even when one raises (a door callback's bug
        would otherwise stop expiry for the rest, every time): the failures are raised
        together afterwards, as one ExceptionGroup, for the caller to log."""
        if now is None:
            now = self.clock.now()
        errors = []
        for part in (self.flow, *self.queues.values()):
            _attempt(errors, part.tick, now)
        for mailbox in self.mailboxes.values():     # only what holds messages: 2,000 idle
            if mailbox.stored:                      # clients' mailboxes took 1 ms a second
                _attempt(errors, mailbox.tick, now)
        for channel in [c for c in self.channels.values()
                        if c.destroy_when_empty and c.empty()]:     # DestroyWhenEmpty
            _attempt(errors, self.remove_channel, channel.name)
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
            stream = self.streams[name] = self._Stream(name, self.queues)
        return stream

    # -- queues ------------------------------------------------------------------------------
    def queue(self, name, create=True, **options):
        """Get a queue, creating it with `options` when missing (and `create`): with the
        configured size limit for its name, in the channel of its name if there is one."""
        queue = self.queues.get(name)
        if queue is None and create:
            if "max_bytes" not in options:
                limit = self.queue_size_limit(name)
                if limit is not None:
                    options["max_bytes"] = limit
            if "max_messages" not in options:
                limit = self.queue_length_limit(name)
                if limit is not None:
                    options["max_messages"] = limit
            if "overflow" not in options:
                options["overflow"] = self.queue_overflow(name)
            queue = self.queues[name] = self._Queue(self, name, **options)
            self._queues_changed()
            self._claim(queue)
            self.emit("queue-created", queue=queue)
        return queue

    def _claim(self, queue):
        """Queue `C` is queue 0 of channel C, `C/N` its queue N (core.channel)."""
        name = queue.name
        channel = self.channels.get(name)
        if channel is not None:
            channel.add_queue(0, queue)
        found = numbered(name)
        if found is not None:
            prefix, key = found
            self._numbered.setdefault(prefix, {})[key] = queue
            if channel is None:
                channel = self.channels.get(prefix)
                if channel is not None:
                    channel.add_queue(key, queue)

    def delete_queue(self, name):
        """Remove a queue: bindings go, consumers are cancelled, the backlog is dropped."""
        queue = self.queues.pop(name, None)
        for stream in self.streams.values():
            if name in stream.bindings:
                stream.set_bindings(name, ())
        if queue is None:
            return False
        self._queues_changed()
        found = numbered(name)
        if found is not None:
            family = self._numbered.get(found[0])
            if family is not None and family.get(found[1]) is queue:
                del family[found[1]]
                if not family:
                    del self._numbered[found[0]]
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
        """Denied (and nothing added) unless its client may consume the queue."""
        consumer.client.consumers[consumer.id] = consumer
        try:
            queue.add_consumer(consumer)
        except Denied:
            if consumer.client.consumers.get(consumer.id) is consumer:
                del consumer.client.consumers[consumer.id]
            raise
        return consumer

    def remove_consumer(self, consumer):
        """A consumer goes; its queue decides what becomes of what it held (core.queue)."""
        consumer.client.consumers.pop(consumer.id, None)
        if consumer.queue is not None:
            consumer.queue.remove_consumer(consumer)

    # -- mailboxes -------------------------------------------------------------------------
    def mailbox(self, name, create=True):
        mailbox = self.mailboxes.get(name)
        if mailbox is None and create:
            mailbox = self.mailboxes[name] = self._Mailbox(name, self.mailbox_size_limit(name))
            self.emit("mailbox-created", mailbox=mailbox)
        return mailbox

    # -- channels ----------------------------------------------------------------------------
    def channel(self, name, create=True, defaults=None, attrs=None, destroy_when_empty=False):
        """Get a channel, creating it when missing: it claims the queues of its name that
        no channel holds yet (core.channel)."""
        channel = self.channels.get(name)
        if channel is None and create:
            channel = self.channels[name] = Channel(name, defaults, attrs, destroy_when_empty)
            queue = self.queues.get(name)
            if queue is not None and queue.channel is None:
                channel.add_queue(0, queue)
            for key, queue in sorted(self._numbered.get(name, {}).items()):
                if queue.channel is None:
                    channel.add_queue(key, queue)
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
        """The channel and every queue of it go. Queues first: their consumers are
        cancelled and what they held is dropped, so no member is handed anything on the
        way out (members leaving one by one would pass it around)."""
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        for queue in list(channel.queues.values()):
            self.delete_queue(queue.name)
        for client, _ in list(channel.members.values()):
            self.leave_channel(channel, client)
        self.emit("channel-removed", channel=channel)
        return True

    # -- clients -----------------------------------------------------------------------------
    def connect(self, client):
        client.connected_at = self.clock.now()
        self.clients[client.id] = client
        self.emit("client-connected", client=client)

    def disconnect(self, client):
        """A session ended: its consumers go (their queues hand on what they held), readers and
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
                _attempt(errors, stream.remove_readers, client)
        client.streams.clear()
        if client.mailbox is not None:
            _attempt(errors, client.mailbox.detach, client)
        if client.held:
            _attempt(errors, self.flow.forget, client)
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
