"""A queue's time-based work, without a timer per message: ack deadlines are kept in
delivery order and checked by the broker's sweep (Queue.tick), and the one timer a queue
may run is when-unused's (delete the queue once it has had no consumer for a while).
"""
from collections import deque


class AckDeadlines:
    """Manual-ack deliveries waiting for their ack, oldest first. A deadline belongs to one
    delivery: a message handed back and out again gets a new one, and the old one passes
    without effect."""

    __slots__ = ("pending",)

    def __init__(self):
        self.pending = deque()           # (deadline, consumer, entry, retry)

    def start(self, deadline, consumer, entry):
        self.pending.append((deadline, consumer, entry, entry.retry))

    def missed(self, now):
        """(consumer, entry) of each delivery whose deadline passed by `now` and that its
        consumer still holds; it is the caller's to take from the consumer."""
        pending = self.pending
        while pending and pending[0][0] <= now:
            _, consumer, entry, retry = pending.popleft()
            if entry.retry == retry and consumer.unacked.get(entry.message.id) is entry:
                yield consumer, entry


class UnusedTimer:
    """when_unused: None or False (keep the queue), True (delete it once its last consumer
    goes) or seconds (delete it that long after, unless a consumer came meanwhile)."""

    __slots__ = ("clock", "call")

    def __init__(self, clock):
        self.clock = clock
        self.call = None

    def start(self, setting, delete):
        """The queue's last consumer went: `delete()` now or after `setting` seconds."""
        if setting is None or setting is False:
            return
        if setting is True:
            delete()
        elif setting < float("inf"):                   # inf: never (doors refuse nan, < 0)
            self.call = self.clock.call_later(float(setting), self._expired, delete)

    def _expired(self, delete):
        self.call = None
        delete()

    def cancel(self):
        if self.call is not None and self.call.active():
            self.call.cancel()
        self.call = None
