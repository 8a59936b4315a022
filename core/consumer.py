"""A consumer: one client's claim on one queue.

The door supplies `deliver(consumer, entry)`, which must not raise. Readiness is the
door's backpressure signal: while `client.paused` is true (its transport is over the
high-water mark) or credit is exhausted, the queue keeps the message for someone else
or for later. A door may also supply `deliver_run(consumer, messages)`: a run of first
deliveries at once (core.queues.round_robin.direct_run), true when it took them all, false
when it took none (the queue then hands them over one by one). `filter` (anything with
`search(subject)`) restricts which subjects this consumer takes (Malamute service offers).
"""


class Consumer:
    __slots__ = ("id", "client", "queue", "deliver", "manual_ack", "filter", "credit",
                 "unacked", "active", "on_cancel", "delivered", "tag", "deliver_run")

    def __init__(self, id, client, deliver, manual_ack=False, filter=None, credit=None,
                 on_cancel=None, tag=None, deliver_run=None):
        self.id = id
        self.client = client
        self.queue = None
        self.deliver = deliver
        self.manual_ack = manual_ack
        self.filter = filter
        self.credit = credit          # None: unlimited; int: deliveries allowed
        self.unacked = {}             # message id -> Entry
        self.active = True
        self.on_cancel = on_cancel    # called when the core removes it (queue deleted)
        self.delivered = 0
        self.tag = tag                # door-private data
        self.deliver_run = deliver_run

    def ready(self):
        return self.active and not self.client.paused and (self.credit is None or self.credit > 0)

    def add_credit(self, n):
        self.credit = (self.credit or 0) + n
        if self.queue is not None:
            self.queue.dispatch()

    def ack(self, message_id, positive=True, reason=None, receipt=None):
        """Settle one unacked message; returns False if this consumer does not hold it.
        `receipt` is the consumer's own ack in its door's terms, for the entry's observer
        (a Twino producer hears the consumer's ack frame itself)."""
        entry = self.unacked.pop(message_id, None)
        if entry is None:
            return False
        if entry.observer is not None:
            entry.notify("ack" if positive else "nack", self, reason, receipt)
        if self.queue is not None:
            self.queue.settled(self, entry, positive)
        return True

    def ack_run(self, message_ids):
        """ack() for each of `message_ids`, in order (a door's run of acks); returns the ids
        this consumer does not hold. Tests hold it equal to ack() one by one."""
        unacked = self.unacked
        missing = []
        for message_id in message_ids:
            entry = unacked.pop(message_id, None)
            if entry is None:
                missing.append(message_id)
                continue
            if entry.observer is not None:
                entry.notify("ack", self, None, None)
            queue = self.queue
            if queue is not None:
                queue.settled(self, entry, True)
        return missing

    def ack_all(self):
        for message_id in list(self.unacked):
            self.ack(message_id)

    def reject(self, message_id):
        """Hand one message back unsettled: the queue requeues it with retry + 1, or settles
        a shared copy for this consumer (core.queue). An observer hears 'nack' (reason
        'rejected') once: the verdict of the first consumer that tried."""
        entry = self.unacked.pop(message_id, None)
        if entry is None:
            return False
        if entry.observer is not None:
            entry.notify("nack", self, "rejected")
        if self.queue is not None:
            self.queue.returned(self, entry)
        return True

    def reject_all(self):
        for message_id in list(self.unacked):
            self.reject(message_id)

    def __repr__(self):
        return f"Consumer({self.id!r}, queue={getattr(self.queue, 'name', None)!r})"
