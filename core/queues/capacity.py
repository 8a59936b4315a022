"""A queue's own limits (Twino MessageLimit, MessageSizeLimit; the broker's length and
size limits by name) and what a put into a full queue does (core.limits policies).

Messages handed to a consumer and not yet acked are the consumer's: nothing here counts or
takes them.
"""
from mqksbridge.core.limits import REJECT, dead_letter_queue
from mqksbridge.core.message import Entry


class Capacity:
    __slots__ = ("max_messages", "max_bytes", "max_message_size", "overflow")

    def __init__(self, max_messages=None, max_bytes=None, max_message_size=None,
                 overflow=REJECT):
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_message_size = max_message_size
        self.overflow = overflow

    @property
    def bounded(self):
        """Whether any limit is set (a put may be refused)."""
        return (self.max_messages is not None or self.max_bytes is not None
                or self.max_message_size is not None)

    def refusal(self, message, backlog):
        """Why storing `message` in `backlog` would pass a limit, or None."""
        if self.max_message_size is not None and message.size > self.max_message_size:
            return "too-large"
        if self.max_messages is not None and len(backlog) >= self.max_messages:
            return "full"
        if self.max_bytes is not None and backlog.bytes + message.size > self.max_bytes:
            return "full"
        return None

    def relieved(self, backlog, low):
        """Whether publishers held for the queue may go on: its regular lane, paged-out
        entries included, is back under the flow's low mark and under half of its own
        limits (core.flow)."""
        n = backlog.regular()
        return ((low is None or n <= low)
                and (self.max_messages is None or n <= self.max_messages // 2)
                and (self.max_bytes is None or backlog.bytes <= self.max_bytes // 2))

    def make_room(self, queue, message, forward):
        """A full queue whose overflow policy is not REJECT: its oldest stored messages
        (regular lane first) are dropped, or dead-lettered when `forward`, until `message`
        fits. Returns the refusal left (None: it fits now)."""
        target = dead_letter_queue(self.overflow) if forward else None
        if target == queue.name:
            target = None                         # its own dead letters: drop them
        backlog = queue.backlog
        while self.refusal(message, backlog) == "full" and len(backlog):
            entry = backlog.oldest()
            if target is not None:
                queue.dead_lettered += 1
                entry.notify("dropped", None, "dead-lettered")
                queue.settle_record(entry, "dead-lettered")
                queue.broker.queue(target).put(Entry(entry.message), False, None, False)
            else:
                queue.dropped += 1
                entry.notify("dropped", None, "overflow")
                queue.settle_record(entry, "removed")
        backlog.refill()
        return self.refusal(message, backlog)
