"""Where core objects live in RabbitMQ: their names and their declare arguments.

Every queue (a core queue, a mailbox, a channel's queues, a dead-letter queue) is a
quorum queue, replicated on `replicas` nodes (Raft: a publish is confirmed once a majority
has it on disk), named `<prefix>q.<name>` and reached through the default exchange. Each
stream is a fanout exchange `<prefix>s.<name>` (what publishers publish to) bound to a
direct exchange `<prefix>b.<name>` (where queues bind exact subjects); a gateway's stream
readers take the whole stream through its queue `<prefix>r.<gateway>` (readers.py). The
core's queue options become RabbitMQ's own arguments where RabbitMQ enforces the rule
itself, and the rest (the delivery mode, the ack timeout, a door's arguments) ride along
under `x-mqksbridge-`, so that a gateway learning of a queue another gateway declared
reads back the same options (`options_from`).
"""
import hashlib
import json

from mqksbridge.core.limits import DEAD_LETTER, REJECT
from mqksbridge.core.queue import ROUND_ROBIN

OURS = "x-mqksbridge-"
# core option -> (RabbitMQ argument, to RabbitMQ, from RabbitMQ)
_NATIVE = {
    "max_messages": ("x-max-length", int, int),
    "max_bytes": ("x-max-length-bytes", int, int),
}
# options the gateway enforces itself, kept with the queue for every gateway to read
_CARRIED = ("mode", "ack_timeout", "max_message_size", "wait_for_ack", "only_first",
            "when_unused", "overflow", "max_deliveries", "dead_letter")


class Names:
    """AMQP names of core objects, under one prefix (one fleet per prefix)."""

    def __init__(self, prefix=""):
        self.prefix = prefix

    def queue(self, name):
        return f"{self.prefix}q.{name}"

    def core_queue(self, amqp_name):
        """The core name of a queue's AMQP name, or None when not one of ours."""
        head = self.prefix + "q."
        return amqp_name[len(head):] if amqp_name.startswith(head) else None

    def stream(self, name):
        """The exchange a stream's messages are published to (fanout)."""
        return f"{self.prefix}s.{name}"

    def core_stream(self, amqp_name):
        """The core name of a stream's exchange name, or None when not one of ours."""
        head = self.prefix + "s."
        return amqp_name[len(head):] if amqp_name.startswith(head) else None

    def subjects(self, name):
        """The exchange a stream's exact subject bindings are on (direct)."""
        return f"{self.prefix}b.{name}"

    def readers(self, gateway):
        """The queue that brings a gateway the streams its readers read."""
        return f"{self.prefix}r.{gateway}"


def routing_key(subject):
    """The routing key a subject is published and bound with: the subject itself, or,
    when it cannot be one (longer than an AMQP short string's 255 bytes, or not UTF-8:
    an MQKS event may be any bytes), a digest of it, the same on every gateway. The
    subject itself travels in the message (envelope)."""
    try:
        raw = subject.encode("utf-8")
        if len(raw) <= 255:
            return subject
    except UnicodeEncodeError:
        raw = subject.encode("utf-8", "surrogateescape")
    return "x-mqksbridge-sha256:" + hashlib.sha256(raw).hexdigest()


def queue_arguments(names, name, options, replicas, attrs=None):
    """The declare arguments of core queue `name` with `options`; `attrs` the door
    entries (their `arguments()` results are kept, as the embedded engine keeps them in
    its durable definitions)."""
    args = {"x-queue-type": "quorum", "x-quorum-initial-group-size": int(replicas)}
    for option, (argument, to_amqp, _) in _NATIVE.items():
        if options.get(option) is not None:
            args[argument] = to_amqp(options[option])
    overflow = options.get("overflow") or REJECT
    # a full quorum queue refuses publishes (nack) or drops its head; moving the oldest
    # to another queue is what drop-head with a dead-letter exchange does
    args["x-overflow"] = "reject-publish" if overflow == REJECT else "drop-head"
    if overflow == REJECT and "x-max-length" in args:
        # a quorum queue refuses a publish only once it holds more than its limit: one
        # below the core's, it refuses the publish that would go past max_messages
        args["x-max-length"] = max(0, args["x-max-length"] - 1)
    if options.get("max_deliveries") is not None:
        # core: the N-th hand-back dead-letters; RabbitMQ: a return past the limit does
        args["x-delivery-limit"] = max(0, int(options["max_deliveries"]) - 1)
    target = dead_letter_target(name, options)
    if target is not None:
        args["x-dead-letter-exchange"] = ""
        args["x-dead-letter-routing-key"] = names.queue(target)
    for option in _CARRIED:
        value = options.get(option)
        if value is not None and value is not False:
            args[OURS + option.replace("_", "-")] = json.dumps(value)
    for door, entry in sorted((attrs or {}).items()):
        saved = getattr(entry, "arguments", None)
        if callable(saved):
            args[f"{OURS}door-{door}"] = json.dumps(saved(), sort_keys=True)
    return args


def options_from(arguments):
    """(options, door arguments) read back from a queue's declare arguments."""
    options, doors = {}, {}
    for option, (argument, _, from_amqp) in _NATIVE.items():
        if argument in arguments:
            options[option] = from_amqp(arguments[argument])
    if arguments.get("x-overflow") == "reject-publish" and "max_messages" in options:
        options["max_messages"] += 1
    for name, value in arguments.items():
        if not name.startswith(OURS):
            continue
        key = name[len(OURS):]
        if key.startswith("door-"):
            doors[key[len("door-"):]] = json.loads(value)
        else:
            options[key.replace("-", "_")] = json.loads(value)
    options.setdefault("mode", ROUND_ROBIN)
    options.setdefault("overflow", REJECT)
    return options, doors


def dead_letter_target(name, options):
    """The core queue that queue `name`'s dead letters go to, or None: the overflow
    policy's, or for `max_deliveries` the `dead_letter` option or `<name>.dlq`
    (core.queue, core.limits). It must exist before the queue is declared."""
    overflow = options.get("overflow") or REJECT
    if overflow.startswith(DEAD_LETTER):
        target = overflow[len(DEAD_LETTER):]
    elif options.get("max_deliveries") is not None:
        target = options.get("dead_letter") or name + ".dlq"
    else:
        return None
    return target if target != name else None
