"""A named group of queues plus its members (Twino channels).

A channel named C groups every queue of its name, whichever door made it: queue `C` is its
queue 0 and queue `C/N` (N from 1 to 65535, no leading zeros) its queue N. The broker makes
them meet (core.broker): a queue any door creates joins the channel of its name, and a
channel created later claims the queues of its name already there. So a Twino member of
channel `jobs` competes with MQKS consumers and Malamute workers of queue `jobs`.

Every member consumes every queue of the channel: joining adds one consumer per queue,
and a queue added later gets a consumer for each member (with users: each member that may
consume it; core.permissions). `defaults` are the options a door
gives the queues it creates here; with `destroy_when_empty` the broker's sweep removes the
channel once it is `empty()`.
"""

from mqksbridge.core.permissions import CONSUME, QUEUE, permits

MAX_KEY = 0xFFFF


def queue_name(channel, key):
    """The core name of queue `key` of channel `channel`: `C/N`, or `C` for key 0."""
    return f"{channel}/{key}" if key else channel


def numbered(name):
    """(channel name, key) for a queue name `C/N`, else None."""
    prefix, _, key = name.rpartition("/")
    if prefix and key.isascii() and key.isdigit() and key[0] != "0" and int(key) <= MAX_KEY:
        return prefix, int(key)
    return None


class Channel:
    def __init__(self, name, defaults=None, attrs=None, destroy_when_empty=False):
        self.name = name
        self.defaults = dict(defaults or {})
        self.queues = {}         # key (0 for queue `C`, N for `C/N`) -> Queue
        self.members = {}        # client id -> (client, make_consumer)
        self.attrs = attrs if attrs is not None else {}
        self.destroy_when_empty = destroy_when_empty

    def join(self, client, make_consumer):
        """`make_consumer(queue) -> Consumer` builds this member's consumer for a queue."""
        if client.id in self.members:
            return False
        self.members[client.id] = (client, make_consumer)
        for queue in list(self.queues.values()):
            self._attach(client, make_consumer, queue)
        return True

    def leave(self, client):
        if self.members.pop(client.id, None) is None:
            return False
        for consumer in [c for c in client.consumers.values()
                         if c.queue is not None and c.queue.channel is self]:
            del client.consumers[consumer.id]
            consumer.queue.remove_consumer(consumer)
        return True

    def add_queue(self, key, queue):
        queue.channel = self
        self.queues[key] = queue
        for client, make_consumer in list(self.members.values()):
            self._attach(client, make_consumer, queue)

    def remove_queue(self, key):
        return self.queues.pop(key, None)

    def empty(self):
        """No member, and no queue of it holds a message or has a consumer of any door."""
        return not self.members and not any(len(q) or q.consumers for q in self.queues.values())

    @staticmethod
    def _attach(client, make_consumer, queue):
        """A member gets a consumer of every queue it may consume, and of no other."""
        if not permits(client, CONSUME, QUEUE, queue.name):
            return
        principal = client.principal
        if principal is not None and principal.max_consumers is not None \
                and len(client.consumers) >= principal.max_consumers:
            return                       # (counted by the door that joined it: see docs)
        consumer = make_consumer(queue)
        client.consumers[consumer.id] = consumer
        queue.add_consumer(consumer)
