"""IEngine: what a door may ask of the broker behind it (docs/engine.md).

Two layers. The verbs (declare and look up queues, streams, mailboxes and channels;
publish with an optional confirmation; consume with credit; settle; subscribe to
lifecycle events) are what every engine must offer, and what tests/engine/ holds each
engine to. The model they hand back (queues, consumers, channels, mailboxes, streams) is
the core's today; a door also reads it (a queue's length, a channel's members) and its hot
paths call a queue's public methods directly (`put_message`, `hand_run`, `refusal`,
`pull`). A cluster engine gives doors objects with those same public methods, standing for
its remote queues.
"""
from zope.interface import Attribute, Interface


class IEngine(Interface):
    """The broker as every door sees it."""

    clock = Attribute("now() in seconds: the engine's time (a door's timers use its own)")
    queues = Attribute("{name: queue}: every queue, read-only for doors")
    streams = Attribute("{name: stream}")
    mailboxes = Attribute("{name: mailbox}")
    channels = Attribute("{name: channel}")
    clients = Attribute("{id: client}: the connected clients")
    counters = Attribute("collections.Counter of broker-wide events (refusals, drops)")
    storage = Attribute("the storage barrier: `appended`, `durable`, `when_stored(seq, f)`, "
                        "and for an engine whose store refuses late (`late`) "
                        "`refused_in(lo, hi)` (core.storage); publish(confirm=True) is the "
                        "way for new code")
    memory = Attribute("the memory watermark (admin views), or None")

    # -- declare and look up ---------------------------------------------------------------
    def queue(name, create=True, **options):
        """The queue `name`, declared with `options` (mode, limits, timeouts, `attrs`: door
        arguments) when missing and `create`; None when missing and not `create`."""

    def delete_queue(name):
        """Remove a queue: bindings go, consumers are cancelled, the backlog is dropped."""

    def stream(name, create=True):
        """The stream `name` (routes published subjects to the queues bound to them)."""

    def mailbox(name, create=True):
        """The mailbox `name` (one client's direct mail, kept while it is away)."""

    def channel(name, create=True, defaults=None, attrs=None, destroy_when_empty=False):
        """The channel `name`: it groups the queues of its name (`C`, `C/N`)."""

    def join_channel(channel, client, make_consumer):
        """Membership: `make_consumer(queue)` for each queue of the channel, now and later."""

    def leave_channel(channel, client):
        """End a membership; its consumers go."""

    def remove_channel(name):
        """The channel and every queue of it go."""

    def members(channel):
        """The clients that are members of `channel`, wherever they are connected (a
        cluster engine: on every gateway), this engine's own first."""

    # -- clients ----------------------------------------------------------------------------
    def connect(client):
        """A session starts (events `client-connected`)."""

    def disconnect(client):
        """A session ends: its consumers and memberships go, its mailbox keeps mail."""

    def find_clients(name=None, type=None):
        """Connected clients by name or type, oldest first."""

    # -- messages ---------------------------------------------------------------------------
    def publish(queue, message, publisher=None, observer=None, confirm=False):
        """Put `message` on `queue` (a queue object or its name). False when the queue
        refused it. With `confirm`, a Deferred instead, fired with True once the message
        is safe (on disk for a durable queue: after its fsync; at once otherwise), with
        False at once when it was refused; confirmations fire in publish order."""

    def consume(queue, consumer):
        """Attach `consumer` to `queue` (Denied when its client may not). Its `credit`
        (None: unlimited) bounds how many deliveries it is handed; `credit` adds more."""

    def credit(consumer, n):
        """`n` more deliveries for a consumer that has a credit."""

    def settle(consumer, message_id, positive=True, reason=None):
        """Ack (positive) or nack one delivery the consumer holds, for good; False if it
        holds none of that id."""

    def requeue(consumer, message_id):
        """Hand one delivery back unsettled: the queue hands it out again (retry + 1), or
        dead-letters it after its `max_deliveries`; False if the consumer holds none."""

    def cancel(consumer):
        """Detach a consumer; what it held goes back to its queue."""

    def answer_in_place(answer, work):
        """Run a door's subscribing `work` (a consume, a channel join, a binding) and call
        `answer` (the door's reply to its client) once what it asked for is in place: first,
        where that is so in the call; once the server has it, where it is elsewhere."""

    # -- lifecycle --------------------------------------------------------------------------
    def subscribe(listener):
        """listener(event, **data) for lifecycle events: queue-created/-defined/-removed
        (queue=), channel-created/-removed (channel=), client-joined/-left (channel=,
        client=), client-connected/-disconnected (client=), mailbox-created (mailbox=)."""

    def unsubscribe(listener):
        """Stop telling `listener`."""

    def emit(event, **data):
        """Tell every listener (a door emits `queue-defined` after redefining a queue)."""

    def tick(now=None):
        """Time-based work up to `now`: ack timeouts, expiry, flow holds."""
