"""A queue's storage window: how much of its backlog stays in memory, the rest paged out.

One consumer that never reads must not put the broker on the heap. A queue keeps at most
`messages` entries and `size` content bytes of its stored backlog resident (each lane,
the priority lane and the regular one, within the same byte window); what comes in
beyond that is *paged out* to the window's `pager` and paged back in, in order, as the
resident part drains (RabbitMQ classic queues v2, Kafka: the backlog on disk, a window
in memory). Core only decides; the pager does the storing (bridge.spill puts it in
files: a durable queue's journal, scratch segment files for the others).

The order rule that makes it invisible to every delivery rule: a lane's paged-out entries
are all behind its resident ones. So a put goes to the pager whenever its lane has paged
entries already, and the queue refills a lane whose resident part fell under half the
window (and keeps a lane with paged entries non-empty after every operation, which keeps
the queue's fast paths, taken only on empty lanes, correct). Paged-out entries are never
held by a consumer: they are stored entries, as any resident entry at the back.

`budget` (WindowBudget, shared by every queue of a broker) is the global cap: once every
window's resident bytes together pass it, each queue keeps only FLOOR entries resident.

The pager interface (each lane is REGULAR or PRIORITY; entries in queue order):

page_out(lane, entries)       at the back of the lane's paged part
page_in(lane, count)          up to `count` entries from the front (at least one if any)
page_in_ready(lane, count)    as page_in, but only what it has at hand (maybe none): the
                              rest comes later, and the pager then calls its queue's
                              dispatch (bridge.spill reads ahead off the reactor thread)
page_in_last(lane, count)     up to `count` from the back (a LIFO pull), in queue order
page_out_placed(lane, *place) at the back, entries the pager's store holds already
                              (a durable queue's journal at start: bridge.journal)
peek(lane)                    every paged entry of the lane in order, taking none (admin
                              views and tests; it reads what is on disk)
close()                       the queue is gone: let go of everything paged out
"""
REGULAR, PRIORITY = 0, 1
FLOOR = 16        # entries a lane keeps resident when the global budget is spent


class Pager:
    """The pager interface (module docstring)."""

    def page_out(self, lane, entries):
        raise NotImplementedError

    def page_in(self, lane, count):
        raise NotImplementedError

    def page_in_ready(self, lane, count):
        return self.page_in(lane, count)

    def page_in_last(self, lane, count):
        raise NotImplementedError

    def page_out_placed(self, lane, *place):
        raise NotImplementedError

    def peek(self, lane):
        raise NotImplementedError

    def close(self):
        raise NotImplementedError


class WindowBudget:
    """The global cap over every queue's resident backlog (bytes), reviewed periodically:
    between reviews each window still holds to its own bounds."""

    __slots__ = ("total", "tight", "resident")

    def __init__(self, total):
        self.total = total
        self.tight = False
        self.resident = 0

    def review(self, queues):
        """Sum the resident backlog of `queues`; tight once it passes the total."""
        resident = 0
        for queue in queues:
            window = queue.window
            if window is not None:
                resident += queue.bytes - window.paged_bytes
        self.resident = resident
        self.tight = self.total is not None and resident > self.total
        return self.tight


class StorageWindow:
    """One queue's window (module docstring)."""

    __slots__ = ("pager", "messages", "size", "budget", "lanes", "lane_bytes", "paged",
                 "paged_bytes", "paged_out", "paged_in")

    def __init__(self, pager, messages, size, budget=None):
        self.pager = pager
        self.messages = max(1, messages)
        self.size = size
        self.budget = budget
        self.lanes = [0, 0]           # paged entries per lane
        self.lane_bytes = [0, 0]      # and their content bytes
        self.paged = 0                # both lanes
        self.paged_bytes = 0
        self.paged_out = self.paged_in = 0   # entries moved, since the start (admin)

    def admits(self, queue, lane, message):
        """Whether a stored entry of `message` stays resident in `lane` (its deque)."""
        index = PRIORITY if lane is queue.priority else REGULAR
        if self.lanes[index]:
            return False
        n = len(lane)
        if not n:
            return True
        budget = self.budget
        if budget is not None and budget.tight and n >= FLOOR:
            return False
        return (n < self.messages
                and queue.bytes - self.paged_bytes <= self.size)

    def page_out(self, queue, lane, entries):
        """Entries of `lane` (its deque) go to the back of its paged part."""
        index = PRIORITY if lane is queue.priority else REGULAR
        size = 0
        for entry in entries:
            size += entry.message.size
        self.lanes[index] += len(entries)
        self.lane_bytes[index] += size
        self.paged += len(entries)
        self.paged_bytes += size
        self.paged_out += len(entries)
        self.pager.page_out(index, entries)

    def page_out_placed(self, queue, count, size, *place):
        """`count` entries (`size` content bytes) already in the pager's store go to the
        back of the regular lane's paged part (a durable queue recovered: `place` says
        where its journal holds them, for the pager's page_out_placed)."""
        self.lanes[REGULAR] += count
        self.lane_bytes[REGULAR] += size
        self.paged += count
        self.paged_bytes += size
        queue.bytes += size
        self.pager.page_out_placed(REGULAR, *place)

    def _taken(self, index, entries):
        size = 0
        for entry in entries:
            size += entry.message.size
        self.lanes[index] -= len(entries)
        self.lane_bytes[index] -= size
        self.paged -= len(entries)
        self.paged_bytes -= size
        self.paged_in += len(entries)
        return entries

    def take(self, index, count):
        """Up to `count` entries from the front of a lane's paged part (at least one)."""
        return self._taken(index, self.pager.page_in(index, count))

    def take_ready(self, index, count):
        """Up to `count` of them the pager has at hand, maybe none."""
        return self._taken(index, self.pager.page_in_ready(index, count))

    def take_last(self, index, count):
        """Up to `count` entries from the back of a lane's paged part, in queue order."""
        return self._taken(index, self.pager.page_in_last(index, count))

    def refill(self, queue, more=False):
        """Page entries back into every lane whose resident part is under half the window
        (`more`: into lanes not empty either, one batch, however full: consumers are ready
        and nothing resident suits them). A lane that still holds entries takes only what
        the pager has at hand (the rest comes with the pager's call to dispatch); an empty
        one, or `more`, at least one. Returns whether any came in."""
        moved = False
        for index, lane in ((PRIORITY, queue.priority), (REGULAR, queue.entries)):
            paged = self.lanes[index]
            if not paged:
                continue
            n = len(lane)
            if n and n >= self.messages // 2 and not more:
                continue
            room = max(1, self.messages - n) if not more else max(1, self.messages // 2)
            average = self.lane_bytes[index] // paged or 1
            free = self.size - (queue.bytes - self.paged_bytes)
            room = min(room, paged, max(1, free // average))
            entries = self.take(index, room) if more or not n else self.take_ready(index, room)
            if entries:
                lane.extend(entries)
                moved = True
        return moved

    def trim(self, queue):
        """Page out what lies beyond the window (a queue refilled from its journal at
        start holds its whole backlog)."""
        for lane in (queue.priority, queue.entries):
            keep = min(len(lane), self.messages)
            size = queue.bytes - self.paged_bytes
            if keep == len(lane) and size <= self.size:
                continue
            # keep the front that fits both bounds (at least one entry)
            total, kept = 0, 0
            for entry in lane:
                if kept >= keep or (kept and total + entry.message.size > self.size):
                    break
                total += entry.message.size
                kept += 1
            excess = [lane.pop() for _ in range(len(lane) - kept)]
            excess.reverse()
            if excess:
                self.page_out(queue, lane, excess)

    def peek(self, index):
        return self.pager.peek(index)

    def close(self):
        self.lanes = [0, 0]
        self.lane_bytes = [0, 0]
        self.paged = self.paged_bytes = 0
        self.pager.close()
