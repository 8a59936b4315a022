"""The objects of a broker with users: each put, publish and send is checked against the
principal of the client that made it (core.permissions), before anything changes, and
a principal's per-connection limit on unsettled deliveries is kept.

A broker without users makes plain Queues, Streams and Mailboxes, so the checks cost it
nothing at all; a broker with users makes these instead (Broker(guarded=True)). A client
without a principal, or no client (the broker's own moves, stream routing), is not
checked: what a stream hands on to its queues and readers was checked at the stream.

Unsettled deliveries (`max_unacked`, per connection): every manual-ack delivery of a
guarded queue to a client of a limited principal is counted on the client; at the limit
its manual-ack consumers without credit of their own get credit 0 (they take nothing
more: the queue keeps the messages for others or for later), and get it back (None) once
a settlement takes the count below the limit. Consumers with their own credit (a
TextQueue outbox, a Malamute CREDIT) are bounded by that already.
"""
from mqksbridge.core.mailbox import Mailbox
from mqksbridge.core.permissions import MAILBOX, PUBLISH, QUEUE
from mqksbridge.core.queue import Queue
from mqksbridge.core.stream import Stream

UNACKED = "core.unacked"             # client.attrs: [count, the consumers it holds back]


class GuardedQueue(Queue):
    """Queue, its puts checked (put_message) and its manual-ack holds counted against
    max_unacked (the queue's `holds`: it tells of each hold and each settlement)."""

    def __init__(self, *args, **kwargs):
        Queue.__init__(self, *args, **kwargs)
        self.holds = _count

    def put_message(self, message, observer=None, publisher=None):
        """Queue.put_message, for a publisher allowed to publish here (else Denied)."""
        check_put(self.name, message, publisher)
        return Queue.put_message(self, message, observer, publisher)

    def hand_run(self, messages):
        """Never at once: every put is checked (put_run puts them one by one)."""
        return 0


def _count(consumer, delta):
    """Keep the client's unsettled count; hold its consumers back at max_unacked."""
    client = consumer.client
    principal = client.principal
    if principal is None or principal.max_unacked is None:
        return
    state = client.attrs.get(UNACKED)
    if state is None:
        state = client.attrs[UNACKED] = [0, []]
    state[0] += delta
    limit = principal.max_unacked
    if delta > 0:
        if state[0] >= limit:
            for c in client.consumers.values():
                if c.manual_ack and c.credit is None:
                    c.credit = 0
                    state[1].append(c)
    elif state[0] < limit and state[1]:
        held, state[1] = state[1], []
        for c in held:
            if c.credit == 0:
                c.credit = None
        for c in held:
            if c.queue is not None:
                c.queue.dispatch()


def check_put(queue_name, message, publisher):
    """Denied unless `publisher` (a Client, or None: not checked) may put `message` on
    queue `queue_name` (its name, its size)."""
    if publisher is not None:
        principal = publisher.principal
        if principal is not None:
            principal.check(PUBLISH, QUEUE, queue_name)
            principal.check_size(message)


def check_publish(stream_name, message, publisher):
    """Denied unless `publisher` (a Client, or None: not checked) may publish `message` on
    stream `stream_name` (its subject, its size)."""
    if publisher is not None:
        principal = publisher.principal
        if principal is not None:
            principal.check_subject(PUBLISH, stream_name, message.subject)
            principal.check_size(message)


class GuardedStream(Stream):
    def publish(self, message, publisher=None):
        """Stream.publish, for a publisher allowed this subject here (else Denied)."""
        check_publish(self.name, message, publisher)
        return Stream.publish(self, message, publisher)

    def publish_run(self, messages, publisher=None):
        """Each checked and published by publish()."""
        publish = self.publish
        return sum([publish(message, publisher) for message in messages])


class GuardedMailbox(Mailbox):
    def send(self, message, sender=None):
        """Mailbox.send, for a sender allowed to send here (else Denied)."""
        if sender is not None:
            principal = sender.principal
            if principal is not None:
                principal.check(PUBLISH, MAILBOX, self.name)
                principal.check_size(message)
        return super().send(message, sender)

    def hand_run(self, messages):
        """Never at once: every send is checked (the door sends them one by one)."""
        return 0
