"""The message envelope shared by every door, and the queue entry that wraps it."""


class Message:
    """An immutable-by-convention envelope.

    Names and ids are str; payload frames are bytes. `raw` may hold a door-specific
    pre-encoded form (e.g. the MQKS delivery tail) so a same-protocol delivery can relay
    it without re-encoding; `raw_door` says which door understands it.
    """

    __slots__ = ("id", "subject", "frames", "headers", "sender", "origin", "tracker",
                 "priority", "expires_at", "created_at", "raw", "raw_door", "size")

    def __init__(self, id, subject, frames, headers=None, sender="", origin="",
                 tracker="", priority=False, expires_at=None, created_at=0.0,
                 raw=None, raw_door=None, size=None):
        # Hot paths call this positionally: keyword parsing costs 3x the whole init.
        self.id = id
        self.subject = subject
        self.frames = frames
        self.headers = headers
        self.sender = sender
        self.origin = origin
        self.tracker = tracker
        self.priority = priority
        self.expires_at = expires_at
        self.created_at = created_at
        self.raw = raw
        self.raw_door = raw_door
        if size is None:
            size = len(frames[0]) if len(frames) == 1 else sum(map(len, frames))
        self.size = size

    @property
    def body(self) -> bytes:
        """All frames as one byte string (single-frame protocols)."""
        return self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)

    def __repr__(self):
        return f"Message(id={self.id!r}, subject={self.subject!r}, size={self.size})"


class Entry:
    """A message's place in one queue: the same Message may sit in many queues.

    `retry` counts requeues. `shared` says the queue handed this entry to every consumer
    at once (push-all, broadcast): a copy given back is then settled for that consumer,
    never sent to the others again (core.queue). `observer`, when set, is told about this
    entry's fate: observer(event, entry, consumer, reason, receipt) with event in 'sent',
    'ack', 'nack', 'dropped' (producer acks across doors); `receipt` is what the consumer
    sent to settle it, in its door's terms (a Twino ack frame), or None. The first event
    other than 'sent' is the verdict: the observer is let go then and hears nothing more.
    `record` is the entry's place in its queue's journal while it has one (core.storage).
    """

    __slots__ = ("message", "retry", "observer", "deliveries", "shared", "record")

    def __init__(self, message, retry=0, observer=None):
        self.message = message
        self.retry = retry
        self.observer = observer
        self.deliveries = 0           # how many consumers got it (first receiver sees 1)
        self.shared = False
        self.record = None            # its place in the queue's journal (core.storage)

    def notify(self, event, consumer=None, reason=None, receipt=None):
        """Tell the observer: 'sent' as often as it happens, then one verdict."""
        observer = self.observer
        if observer is None:
            return
        if event != "sent":
            self.observer = None
        observer(event, self, consumer, reason, receipt)
