"""What a durable queue tells its store, and how a door learns it is on disk.

The journal interface. A queue is durable when it has a journal (`Queue.attach_journal`);
bridge/ implements it on files (bridge.journal.store.QueueJournal), the core never does
I/O. The queue decides every rule (what is settled, requeued, dead-lettered, expired) and
tells the journal as it happens:

put(entry)              the entry joined the queue (stored or handed straight over): the
                        journal records it and keeps its place in `entry.record`
requeued(entry)         the entry went back to the queue; `entry.retry` is its new count
settle(entry, reason, door)
                        the entry is done with: 'acked', 'nacked', 'dead-lettered',
                        'expired' or 'removed' (purged, replaced, stopped, deleted,
                        refused by every consumer); `door` is the door of the consumer
                        that settled it (its ack, or the last hand-back before a dead
                        letter), None when no consumer did; the journal lets go of
                        `entry.record`

Each call runs on the broker's thread and must not block: a journal queues its writes and
tells the StorageBarrier below when they are on disk. An entry whose `record` is None is
not in the journal (put before the queue became durable, or settled already): settle and
requeued ignore it.

The storage barrier: how a door learns that what a publish put on durable queues is on
disk, without a token per message.

Every record a durable queue hands to its journal takes the next sequence number
(`appended`). The journal calls `stored(seq)` once every record up to `seq` is on disk (a
group commit, in order). A door that must confirm a publish reads `appended` before and
after it: unchanged means the publish reached no durable queue and is confirmed at once;
otherwise `when_stored(after, confirm)` calls `confirm` when the barrier passes `after`.
So non-durable traffic never waits for the disk, and one fsync releases every
confirmation of its batch in publish order.

A store that can refuse a record after the door published it (a RabbitMQ cluster's nack:
LateBarrier) marks it `refuse(seq)` before the barrier passes it. A door that confirms
checks `late` at publish time; on a LateBarrier it registers `when_stored(after, confirm,
since=before)` and its `confirm` asks `refused_in(before, after)`, answering a refusal as
it answers a synchronous one. On the plain barrier `refusals` is always empty.
"""
from bisect import bisect_right, insort
from collections import deque


class StorageBarrier:
    refusals = ()        # refused sequence numbers (LateBarrier)
    __slots__ = ("appended", "durable", "_waiting", "late")

    def __init__(self):
        self.late = False        # whether a record can be refused after it was appended
                                 # (a slot, not a class attribute: a door's hot path reads it)
        self.appended = 0        # sequence number of the last record handed to a journal
        self.durable = 0         # every record up to here is on disk
        self._waiting = deque()  # (seq, callback), seq ascending

    def append(self):
        """A journal took one more record; returns its sequence number."""
        self.appended += 1
        return self.appended

    def when_stored(self, seq, callback, since=None):
        """Call `callback()` once every record up to `seq` is on disk (now, if it is).
        `since`: where the caller's records start (LateBarrier)."""
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

    def refused_in(self, lo, hi):
        """The refused sequence numbers in (lo, hi]: none, here."""
        return ()


class LateBarrier(StorageBarrier):
    """A barrier whose store refuses some records after they were appended.

    A refusal is kept while a door may still ask about it: every waiter keeps its `since`
    (the start of its caller's records; its own `seq` when not given), and `settle()`,
    which the store calls between publishes (never inside one: a door registers right
    after its publish, perhaps for records refused and passed already), drops the
    refusals at or below every waiting `since` and `appended` (a later publish starts
    above it). So what it holds is bounded by the records of the oldest waiting
    confirmation and those after it: the store's own unconfirmed window, plus one
    publish's records."""
    __slots__ = ("refusals",)

    def __init__(self):
        super().__init__()
        self.late = True
        self.refusals = []       # refused sequence numbers, ascending

    def refuse(self, seq):
        """The store refused record `seq` (before the barrier passes it)."""
        insort(self.refusals, seq)

    def refused_in(self, lo, hi):
        refusals = self.refusals
        return refusals[bisect_right(refusals, lo):bisect_right(refusals, hi)]

    def when_stored(self, seq, callback, since=None):
        if seq <= self.durable:
            callback()
        else:
            self._waiting.append((seq, callback, seq if since is None else since))

    def settle(self):
        """Between publishes: drop the refusals no waiting or later caller can ask about."""
        refusals = self.refusals
        if refusals:
            floor = min((since for _, _, since in self._waiting), default=self.appended)
            del refusals[:bisect_right(refusals, floor)]
