"""The engine verbs that are the core's own consumer operations, the same on every engine
built on core.broker.Broker: an engine differs in where queues live, not in how a consumer
is attached, credited, settled or cancelled (its queue objects do the rest)."""


class ConsumerVerbs:
    """IEngine's consume, credit, settle, requeue and cancel, over Broker and Consumer."""

    def consume(self, queue, consumer):
        return self.add_consumer(queue, consumer)

    def credit(self, consumer, n):
        consumer.add_credit(n)

    def settle(self, consumer, message_id, positive=True, reason=None):
        return consumer.ack(message_id, positive, reason)

    def requeue(self, consumer, message_id):
        return consumer.reject(message_id)

    def cancel(self, consumer):
        self.remove_consumer(consumer)

    def answer_in_place(self, answer, work):
        """A door's subscribing `work` (a consume, a channel join, a binding) and its
        `answer` to the client. Here every consumer and binding is in place in the call, so
        the answer goes first, before any stored message the work hands out; an engine
        whose consumers reach a server later answers once they are there."""
        answer()
        work()
