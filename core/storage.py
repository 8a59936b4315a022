"""The storage barrier: how a door learns that what a publish put on durable queues is on
disk, without a token per message.

Every record a durable queue hands to its journal takes the next sequence number
(`appended`). The journal calls `stored(seq)` once every record up to `seq` is on disk (a
group commit, in order). A door that must confirm a publish reads `appended` before and
after it: unchanged means the publish reached no durable queue and is confirmed at once;
otherwise `when_stored(after, confirm)` calls `confirm` when the barrier passes `after`.
So non-durable traffic never waits for the disk, and one fsync releases every
confirmation of its batch in publish order.
"""
from collections import deque


class StorageBarrier:
    __slots__ = ("appended", "durable", "_waiting")

    def __init__(self):
        self.appended = 0        # sequence number of the last record handed to a journal
        self.durable = 0         # every record up to here is on disk
        self._waiting = deque()  # (seq, callback), seq ascending

    def append(self):
        """A journal took one more record; returns its sequence number."""
        self.appended += 1
        return self.appended

    def when_stored(self, seq, callback):
        """Call `callback()` once every record up to `seq` is on disk (now, if it is)."""
        if seq <= self.durable:
            callback()
        else:
            self._waiting.append((seq, callback))

    def stored(self, seq):
        """The journals have every record up to `seq` on disk: release those waiting."""
        if seq <= self.durable:
            return
        self.durable = seq
        waiting = self._waiting
        while waiting and waiting[0][0] <= seq:
            waiting.popleft()[1]()
