"""A named group of queues plus its members (Twino channels).

Every member consumes every queue of the channel: joining adds one consumer per queue,
and a queue added later gets a consumer for each member. New queues take the channel's
default options.
"""


class Channel:
    def __init__(self, name, defaults=None, attrs=None):
        self.name = name
        self.defaults = dict(defaults or {})
        self.queues = {}         # key (e.g. Twino queue id) -> Queue
        self.members = {}        # client id -> (client, make_consumer)
        self.attrs = attrs if attrs is not None else {}

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

    @staticmethod
    def _attach(client, make_consumer, queue):
        consumer = make_consumer(queue)
        client.consumers[consumer.id] = consumer
        queue.add_consumer(consumer)
