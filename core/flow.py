"""Publisher flow control: a queue whose consumers cannot keep up stops taking input from
whoever is filling it, instead of growing without bound.

A queue that has consumers and holds `limit` messages is *congested*. The client whose
message congested it (the `publisher` a door passes to Stream.publish and
Queue.put_message with each message it reads) is then *held*: its door stops reading
from it (`client.input.pauseProducing()`, TCP does the rest), until the queue is back to
half the limit. So a fast publisher runs at the pace of the consumers it feeds, and broker
memory stays bounded however slowly they read. Queues without consumers are storage and
never hold anyone.

Flow control paces publishers to consumers that are moving; it never stalls a publisher
behind consumers that are not. A hold lasts at most `max_hold` seconds (the broker's
sweep lets go); a queue whose consumers delivered nothing while it held someone is then
*stalled* and holds no one again until it delivers. So a consumer that stops reading
leaves its publishers free (its queue keeps the backlog, as MQKS always did), a cycle of
services feeding each other is slowed but never deadlocked, and a client that consumes
from the congested queue is never held at all (it may have to send acks or credit for
the queue to move).

A full queue that rejects a message (its length or byte limit, overflow policy REJECT or
nothing left to drop) holds that message's publisher the same way, consumers or not, until
it is back under half its limits: this is how a door whose protocol has no negative answer
to a publish (a Malamute SEND, an MQKS publish without --confirm) slows the publisher
instead of losing its messages one after the other (docs/limits.md). A rejecting queue
that delivers nothing while it holds is stalled like any other: its later rejections are
only counted.
"""


class Flow:
    def __init__(self, clock, limit=None, max_hold=1.0):
        self.clock = clock
        self.limit = limit               # messages per queue; None: never hold anyone
        self.low = None if limit is None else limit // 2
        self.max_hold = max_hold
        self.held = {}                   # queue -> (since, set of held clients)
        self.holds = 0                   # how many times a publisher was held

    def congested(self, queue, client):
        """Called by a queue with consumers once it holds `limit` messages; `client` is
        the publisher of the message that filled it (None: nobody to hold)."""
        if client is None or client.input is None or queue.delivered == queue.stalled_at:
            return
        since, clients = self.held.get(queue) or (None, None)
        if clients is not None and client in clients:
            return
        for consumer in queue.consumers:
            if consumer.client is client:
                return
        if clients is None:
            since, clients = self.held[queue] = (self.clock.now(), set())
            queue.held = True
            queue.delivered_at_hold = queue.delivered
        clients.add(client)
        if not client.held:
            client.input.pauseProducing()
        client.held.add(queue)
        self.holds += 1

    def relieved(self, queue):
        """The queue is back under the low mark, lost its consumers, or is gone."""
        since, clients = self.held.pop(queue, (None, ()))
        queue.held = False
        for client in clients:
            client.held.discard(queue)
            if not client.held and client.input is not None:
                client.input.resumeProducing()

    def tick(self, now):
        """Let go of holds older than max_hold; a queue that delivered nothing meanwhile
        is stalled (see the module docstring)."""
        for queue, (since, _) in list(self.held.items()):
            if now - since >= self.max_hold:
                if queue.delivered == queue.delivered_at_hold:
                    queue.stalled_at = queue.delivered
                self.relieved(queue)

    def forget(self, client):
        """A held client went away: nothing to resume any more."""
        for queue in list(client.held):
            since, clients = self.held.get(queue, (None, set()))
            clients.discard(client)
            if not clients:
                self.held.pop(queue, None)
                queue.held = False
        client.held.clear()
