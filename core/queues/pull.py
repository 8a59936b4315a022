"""Taking stored entries for one requester (Twino Pull): what a pull queue hands out, and
the only way it does. The requester holds what it took as a pushed consumer would."""
from mqksbridge.core.window import PRIORITY, REGULAR


def take(queue, consumer, count, lifo=False, clear=False, left=None):
    """Up to `count` entries for `consumer`, priority lane first (Queue.pull)."""
    taken = []
    now = queue.broker.clock.now()
    backlog = queue.backlog
    window = backlog.window
    paged = window.lanes if window is not None else (0, 0)
    for index, lane in backlog.lanes():
        while len(taken) < count:
            if paged[index] and (lifo or not lane):    # its back is paged out
                lane.extend(window.take_last(index, 1) if lifo
                            else window.take(index, window.messages))
            elif not lane:
                break
            entry = lane.pop() if lifo else lane.popleft()
            backlog.bytes -= entry.message.size
            expires = entry.message.expires_at
            if expires is not None and expires <= now:
                queue.expired_one(entry)
                continue
            taken.append(entry)
            if clear and len(taken) == count:
                queue.clear(clear)
            if left is not None:
                left.append((len(backlog.priority) + paged[PRIORITY],
                             len(backlog.entries) + paged[REGULAR]))
    if clear and len(taken) < count:
        queue.clear(clear)
    backlog.refill()
    for entry in taken:
        queue.track(consumer, entry)
        if entry.record is not None and not consumer.manual_ack:
            queue.journal.settle(entry, "acked", consumer.client.door)
    return taken
