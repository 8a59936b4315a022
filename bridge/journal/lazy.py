"""A message read back from a journal, decoded on first use.

Recovery brings back a million messages before the doors listen, and most of them are
delivered long after, if at all before the next restart. A `LazyMessage` is a core
`Message` that holds its record's raw bytes and knows only what the queue needs at once
(`size`; `priority` False and no expiry: recovery makes one only for a fresh record,
protocols.textqueue.queued). Its other slots stay unset; the first read of one lands in
`__getattr__`, which decodes the record with `journal.decode` (the one decoder, so the
message is the one an eager decode gives), fills every slot and lets the raw bytes go.
From then on it is a plain Message: slot reads at full speed, nothing in between.

A fresh record's checksum verified, so it is what `encode_message` wrote, and that
decodes. Only a record forged with a valid checksum over fields the encoder never
writes could fail here; it raises TextQueueError on that first read.
"""
from mqksbridge.core import Message
from mqksbridge.protocols.textqueue import journal

_DECODED = frozenset(Message.__slots__)


class LazyMessage(Message):
    """A journal record's message, decoded on first use (module docstring)."""

    __slots__ = ("_record", "_base_ms")

    def __init__(self, record, base_ms, size):
        self._record = record
        self._base_ms = base_ms
        self.size = size
        self.priority = False
        self.expires_at = None

    def __getattr__(self, name):
        """Called only for a slot not set yet (or a name that is no attribute)."""
        record = self._record
        if record is None or name not in _DECODED:
            raise AttributeError(name)
        env = journal.decode(record, self._base_ms)
        self.id = env.id
        self.subject = env.subject
        self.frames = env.frames
        self.headers = env.headers
        self.sender = env.sender
        self.origin = env.origin
        self.tracker = env.tracker
        self.created_at = env.created_at
        self.raw = None
        self.raw_door = None
        self._record = None
        return getattr(self, name)
