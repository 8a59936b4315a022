"""What a durable queue tells its store: the journal interface the core calls.

A queue is durable when it has a journal (`Queue.attach_journal`); bridge/ implements it
on files (bridge.journal), the core never does I/O. The queue decides every rule (what
is settled, requeued, dead-lettered, expired) and tells the journal as it happens:

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
tells the broker's StorageBarrier (core.storage) when they are on disk. An entry whose
`record` is None is not in the journal (put before the queue became durable, or settled
already): settle and requeued ignore it.
"""


class Journal:
    """The interface (module docstring); bridge.journal.store.QueueJournal implements it."""

    def put(self, entry):
        raise NotImplementedError

    def requeued(self, entry):
        raise NotImplementedError

    def settle(self, entry, reason, door=None):
        raise NotImplementedError
