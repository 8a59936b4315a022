"""Where an inbox record goes: file names and `\\to=` values, and putting a message there.

A name is `jobs` (queue `jobs`), `stream.NAME` (stream NAME; the record's subject picks the
subscribers), `mailbox.NAME` (the mailbox of client NAME: a Twino client id or a Malamute
address) or `queue.NAME` (queue NAME even when it starts with one of those words). NAME is
percent-decoded, so `ch%2F1` is Twino queue 1 of channel `ch`. An inbox file is such a
name, optionally `@TAG` (several files, one per writer, for one target), plus `.tq`; a
record's `\\to=` is a name alone. A record without a subject takes the target's NAME as its
subject (as a Twino push does); mail without a tracker takes its id as tracker (so a reply
can name it, as a Twino direct message's id does).
"""
from typing import NamedTuple

from mqksbridge.bridge.convert import refusal
from mqksbridge.bridge.convert.textqueue import unpct
from mqksbridge.bridge.engine import DROPPED

QUEUE, STREAM, MAILBOX = "queue", "stream", "mailbox"
_KINDS = {"stream.": STREAM, "mailbox.": MAILBOX, "queue.": QUEUE}
SUFFIX = ".tq"


class Target(NamedTuple):
    kind: str
    name: str


def parse(text: str):
    """The Target a name stands for, or None when it names nothing (an empty name)."""
    kind = QUEUE
    for prefix, named in _KINDS.items():
        if text.startswith(prefix):
            kind, text = named, text[len(prefix):]
            break
    name = unpct(text)
    return Target(kind, name) if name else None


def of_file(filename: str):
    """The Target of an inbox file name (`jobs.tq`, `jobs@writer-2.tq`), or None for any
    other file."""
    if not filename.endswith(SUFFIX) or filename.startswith("."):
        return None
    return parse(filename[:-len(SUFFIX)].partition("@")[0])


class Publisher:
    """Puts messages on targets for one publisher (`client`: the one flow control holds
    when a queue it fills congests); each put returns None (taken) or why it was refused."""

    def __init__(self, broker, auto_create=True):
        self.broker = broker
        self.auto_create = auto_create

    def put(self, target, message, client=None):
        kind, name = target
        if message.subject is None:
            message.subject = name
        if kind == QUEUE:
            return self.queue_put(name, client)(message)
        if kind == STREAM:
            self.broker.stream(name).publish(message, client)
            return None
        return self.mail(name, message)

    def queue_put(self, name, client=None):
        """A put function for queue `name`, looked up once for a run of records."""
        queue = self.broker.queues.get(name)
        if queue is None:
            if not self.auto_create:
                return _refuse("no such queue")
            queue = self.broker.queue(name)
        put_message = queue.put_message
        if queue.limited:
            def put(message):
                reason = queue.refusal(message)
                if reason is None and not put_message(message, None, client):
                    reason = "refused"
                return None if reason is None else f"queue {reason}"
            return put

        def taken(message):
            put_message(message, None, client)
            return None
        return taken

    def mail(self, name, message):
        client = self.broker.clients.get(name)
        mailbox = client.mailbox if client is not None else self.broker.mailboxes.get(name)
        if mailbox is None:
            return "unknown mailbox"
        if not message.tracker:
            message.tracker = message.id
        owner = mailbox.owner
        reason = refusal(owner.door, message) if owner is not None else None
        if reason is not None:
            return f"unrepresentable: {reason}"
        if mailbox.send(message) == DROPPED:
            return "mailbox full"
        return None


def _refuse(reason):
    return lambda message: reason
