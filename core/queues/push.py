"""Push-all and broadcast: each message to every consumer present that takes it (Twino
Push, the Twino default, and Broadcast). Such an entry is *shared*: each consumer had
it, so a copy handed back is settled for that consumer alone, never sent to the others
again. Only-first turns either into a one-consumer delivery: the first ready consumer gets
it, and what comes back is requeued as in round-robin.

Push-all stores a message while nobody is ready to take it; broadcast never stores: with
nobody to take it, it is dropped (nack `no-consumers`).
"""
from mqksbridge.core.queues.base import Delivery


class PushAll(Delivery):
    pushes = True

    def shortcut(self, queue, unlimited):
        if unlimited and not queue.filtered and queue.journal is None:
            return fanout           # it skips what a journal must hear
        return None

    def dispatch(self, queue):
        queue.dispatching = True
        try:
            dispatch_all(queue)
        finally:
            queue.dispatching = False


class Broadcast(Delivery):
    def accept(self, queue, entry, publisher):
        broadcast(queue, entry)

    def requeue(self, queue, entry):
        broadcast(queue, entry)


def fanout(queue, entry, observer):
    """Plain push-all, every consumer ready, no backlog: to each of them now."""
    consumers = queue.consumers
    for c in consumers:
        if not c.active or c.client.paused or c.credit is not None:
            return False
    if not consumers:
        return False
    queue.received += 1
    entry.shared = True
    for c in consumers:
        queue.hand(c, entry)
    return True


def dispatch_all(queue):
    """Push-all (and only-first), once a consumer that takes the message is ready: to every
    consumer that takes it, paused or not (each one present gets it), or to the first
    ready one. A consumer takes a message its filter matches while its credit lasts; a
    message nobody takes waits, in order."""
    consumers, only_first, backlog = queue.consumers, queue.only_first, queue.backlog
    for lane in (queue.priority, queue.entries):
        kept = []
        while lane:
            if queue.blocked() or not any(c.ready() for c in consumers):
                break
            entry = lane.popleft()
            takers = _takers(queue, entry.message.subject)
            ready = [c for c in takers if not c.client.paused]
            if not ready:
                kept.append(entry)
                continue
            backlog.bytes -= entry.message.size
            if only_first:
                queue.hand(ready[0], entry)
            else:
                entry.shared = True
                for c in takers:
                    queue.hand(c, entry)
                if entry.record is not None and not queue.held_elsewhere(entry):
                    queue.settle_record(entry, "acked")
        lane.extendleft(reversed(kept))


def broadcast(queue, entry):
    """To every consumer that takes it now (or the first ready one, only-first); dropped
    when there is none."""
    receivers = _takers(queue, entry.message.subject)
    if not receivers:
        queue.dropped += 1
        entry.notify("dropped", None, "no-consumers")
        queue.settle_record(entry, "removed")
        return
    if queue.only_first:
        receivers = [next((c for c in receivers if c.ready()), receivers[0])]
    else:
        entry.shared = True
    for c in receivers:
        queue.hand(c, entry)
    if entry.shared and entry.record is not None and not queue.held_elsewhere(entry):
        queue.settle_record(entry, "acked")


def _takers(queue, subject):
    """Consumers that would take a message with this subject now, paused or not."""
    return [c for c in queue.consumers if c.active and (c.credit is None or c.credit > 0)
            and (c.filter is None or c.filter.search(subject))]
