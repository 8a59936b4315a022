"""A client's personal address (Malamute mailboxes, Twino direct messages).

Delivered at once to a live, unpaused owner; otherwise kept in order, bounded by bytes,
and handed over when the owner (re)attaches or drains. Per-message expiry is enforced by
tick().
"""
from collections import deque

DELIVERED, STORED, DROPPED = "delivered", "stored", "dropped"


class Mailbox:
    def __init__(self, name, limit_bytes=None):
        self.name = name
        self.limit_bytes = limit_bytes
        self.owner = None
        self.deliver = None         # deliver(mailbox, message) while attached
        self.stored = deque()
        self.bytes = 0
        self.delivered = self.dropped = self.expired = 0

    def send(self, message):
        """Deliver, store, or drop (over the byte limit); returns which happened."""
        if self.owner is not None and not self.owner.paused and not self.stored:
            self.delivered += 1
            self.deliver(self, message)
            return DELIVERED
        if self.limit_bytes is not None and self.bytes + message.size > self.limit_bytes:
            self.dropped += 1
            return DROPPED
        self.stored.append(message)
        self.bytes += message.size
        if self.owner is not None and not self.owner.paused:
            self.flush()
        return STORED

    def attach(self, owner, deliver):
        """A client takes the address (taking over any previous owner) and gets its mail."""
        if self.owner is not None and self.owner is not owner:
            self.owner.mailbox = None
        self.owner = owner
        self.deliver = deliver
        owner.mailbox = self
        self.flush()

    def detach(self, owner):
        if self.owner is owner:
            self.owner = None
            self.deliver = None
            owner.mailbox = None

    def flush(self):
        """Hand stored mail to the owner in order while it is able to take it."""
        owner = self.owner
        while self.stored and owner is not None and not owner.paused and self.owner is owner:
            message = self.stored.popleft()
            self.bytes -= message.size
            self.delivered += 1
            self.deliver(self, message)

    def restore(self, message):
        """A delivery the door could not hand over (owner vanished): first in line again."""
        self.delivered -= 1
        self.stored.appendleft(message)
        self.bytes += message.size

    def tick(self, now):
        if not self.stored:
            return
        kept = deque()
        for message in self.stored:
            if message.expires_at is not None and message.expires_at <= now:
                self.expired += 1
                self.bytes -= message.size
            else:
                kept.append(message)
        self.stored = kept
