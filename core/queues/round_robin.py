"""Round-robin: each message to one ready consumer (MQKS, Malamute services, Twino
RoundRobin); stored while nobody is ready, and a hand-back goes to the back with retry + 1.

Without filters the consumers take turns strictly; with filters (Malamute worker
patterns) the first ready consumer whose filter matches takes it and moves to the end of
the list, and a message nobody matches waits in order. Only-first makes it push-all's
one-consumer delivery (core.queues.push).

The shortcuts (`direct`, `direct_run`, `first_match`, `first_match_run`, `drain`,
`drain_matching`) do what the plain loops do for the commonest cases, minus the deque and
the per-entry calls; tests hold them equal to the plain path (Queue(shortcuts=False))
operation by operation.
"""
from mqksbridge.core.message import Entry
from mqksbridge.core.queues.base import Delivery
from mqksbridge.core.queues.push import dispatch_all


class RoundRobin(Delivery):
    pushes = True

    def shortcut(self, queue, unlimited):
        if not unlimited:
            return None
        if not queue.filtered:
            return direct             # a durable queue keeps it: it journals the entry first
        if queue.journal is None:     # first_match skips what a journal must hear
            return first_match
        return None

    def run_shortcut(self, queue, unlimited):
        if unlimited and queue.journal is None:
            return first_match_run if queue.filtered else direct_run
        return None

    def dispatch(self, queue):
        if queue.only_first:
            queue.dispatching = True
            try:
                dispatch_all(queue)
            finally:
                queue.dispatching = False
            return
        if not (queue.entries or queue.priority):
            return
        queue.dispatching = True
        try:
            if queue.filtered:
                _filtered(queue)
            else:
                _rotating(queue)
        finally:
            queue.dispatching = False


def direct(queue, entry, observer):
    """Plain round-robin, the next consumer ready, no backlog: straight to it."""
    consumers = queue.consumers
    if consumers:
        i = queue.turn
        if i >= len(consumers):
            i = 0
        c = consumers[i]
        if c.active and not c.client.paused and c.credit is None:
            queue.turn = i + 1
            queue.received += 1
            journal = queue.journal
            if journal is not None:     # what put() and dispatch would do
                journal.put(entry)
                queue.hand(c, entry)
            elif c.manual_ack or observer is not None:
                queue.hand(c, entry)
            else:
                c.delivered += 1
                queue.delivered += 1
                entry.deliveries = 1
                c.deliver(c, entry)
            return True
    return False


def direct_run(queue, messages):
    """direct() for each of a run of messages (no observer), when a lone ready consumer
    takes runs (Consumer.deliver_run): what direct and hand() do, counted once for the
    run. 0 when it does not apply or the consumer took none: then they go one by one."""
    consumers = queue.consumers
    if len(consumers) != 1 or queue.holds is not None:
        return 0
    n = _lone_run(queue, consumers[0], messages)
    if n:
        queue.turn = 1
    return n


def first_match_run(queue, messages):
    """first_match() for each of a run of messages (no observer), when a lone ready
    consumer that takes runs matches every subject of the run (one Malamute worker and its
    clients' bursts to one service): one search per subject, not per message."""
    consumers = queue.consumers
    if len(consumers) != 1 or queue.holds is not None:
        return 0
    c = consumers[0]
    if c.filter is not None and not all(map(c.filter.search,
                                            {m.subject for m in messages})):
        return 0
    return _lone_run(queue, c, messages)


def _lone_run(queue, c, messages):
    """The run to consumer `c`, the queue's only one (a guarded queue, whose `holds` count
    every hand-over, never gets here): what hand() does for each, counted once."""
    run = c.deliver_run
    if (run is None or not c.active or c.client.paused or c.credit is not None
            or not run(c, messages)):
        return 0
    n = len(messages)
    queue.received += n
    queue.delivered += n
    c.delivered += n
    if c.manual_ack:                    # hand(): held until settled
        unacked = c.unacked
        timeout = queue.ack_timeout
        for message in messages:
            entry = Entry(message)
            entry.deliveries = 1
            unacked[message.id] = entry
            if timeout:
                queue.deadlines.start(queue.broker.clock.now() + timeout, c, entry)
        queue.outstanding += n
    return n


def first_match(queue, entry, observer):
    """Filtered round-robin, a matching consumer ready, no backlog: what _filtered does,
    minus the deque."""
    subject = entry.message.subject
    consumers = queue.consumers
    for i, c in enumerate(consumers):
        if (c.active and not c.client.paused and (c.credit is None or c.credit > 0)
                and (c.filter is None or c.filter.search(subject))):
            if i < len(consumers) - 1:
                consumers.append(consumers.pop(i))
            queue.received += 1
            if c.manual_ack or c.credit is not None or observer is not None:
                queue.hand(c, entry)
            else:                       # hand(), for an auto-ack consumer
                c.delivered += 1
                queue.delivered += 1
                entry.deliveries = 1
                c.deliver(c, entry)
            return True
    return False


def _rotating(queue):
    consumers, priority, entries = queue.consumers, queue.priority, queue.entries
    if (len(consumers) == 1 and not priority and not queue.wait_for_ack and queue.shortcuts
            and queue.journal is None):
        _drain(queue, consumers[0])
    wait = queue.wait_for_ack
    backlog = queue.backlog
    while priority or entries:
        if wait and queue.outstanding > 0:
            return
        n = len(consumers)
        if not n:
            return
        start = queue.turn % n
        for k in range(n):
            c = consumers[(start + k) % n]
            if c.active and not c.client.paused and (c.credit is None or c.credit > 0):
                queue.turn = (start + k) % n + 1     # the one after it, as direct()
                break
        else:
            return
        entry = priority.popleft() if priority else entries.popleft()
        backlog.bytes -= entry.message.size
        queue.hand(c, entry)


def _filtered(queue):
    """The first ready consumer whose filter matches takes it and moves to the end of the
    list; unmatched messages wait in FIFO order. Dispatch stops when no consumer is ready
    (one pass over the consumers tells both)."""
    consumers, wait, backlog = queue.consumers, queue.wait_for_ack, queue.backlog
    if (len(consumers) == 1 and not queue.priority and not wait and queue.shortcuts
            and queue.journal is None):
        _drain_matching(queue, consumers[0])
    for lane in (queue.priority, queue.entries):
        kept = []
        while lane:
            if wait and queue.outstanding > 0:
                break
            entry = lane.popleft()
            subject = entry.message.subject
            ready = False
            for i, c in enumerate(consumers):
                if c.active and not c.client.paused and (c.credit is None or c.credit > 0):
                    ready = True
                    if c.filter is None or c.filter.search(subject):
                        consumers.append(consumers.pop(i))
                        backlog.bytes -= entry.message.size
                        queue.hand(c, entry)
                        break
            else:
                if not ready:
                    lane.appendleft(entry)
                    break
                kept.append(entry)
        lane.extendleft(reversed(kept))


def _drain(queue, c):
    """The backlog to a lone auto-ack consumer without credit (a paused consumer catching
    up, the commonest dispatch): what hand() does, minus the per-entry rotation and calls.
    Stops when the consumer pauses or goes."""
    if c.manual_ack or c.credit is not None:
        return
    entries, client, deliver, backlog = queue.entries, c.client, c.deliver, queue.backlog
    if entries and c.active and not client.paused:
        queue.turn = 1                   # it takes a turn (see _rotating)
    while entries and c.active and not client.paused:
        entry = entries.popleft()
        backlog.bytes -= entry.message.size
        c.delivered += 1
        queue.delivered += 1
        entry.deliveries += 1
        deliver(c, entry)
        observer = entry.observer
        if observer is not None:
            observer("sent", entry, c, None, None)
            entry.notify("ack", c)


def _drain_matching(queue, c):
    """The backlog to a lone filtered consumer (one Malamute worker behind pipelining
    clients): the run of waiting entries its filter matches, in order, without the
    per-entry rotation and calls; stops at the first it does not match (the plain loop
    goes on from there) or when the consumer pauses, goes or runs out of credit."""
    if c.manual_ack:
        return
    entries, client, deliver, search = queue.entries, c.client, c.deliver, None
    backlog = queue.backlog
    if c.filter is not None:
        search = c.filter.search
    while entries and c.active and not client.paused and (c.credit is None or c.credit > 0):
        entry = entries[0]
        if search is not None and not search(entry.message.subject):
            return
        entries.popleft()
        backlog.bytes -= entry.message.size
        if c.credit is not None:
            c.credit -= 1
        c.delivered += 1
        queue.delivered += 1
        entry.deliveries += 1
        deliver(c, entry)
        observer = entry.observer
        if observer is not None:
            observer("sent", entry, c, None, None)
            entry.notify("ack", c)
