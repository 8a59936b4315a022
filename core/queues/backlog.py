"""A queue's stored entries: the priority lane and the regular one, their content bytes,
and the storage window (core.window) that pages the back of a long backlog out.

Every mode stores through here, so paging is invisible to the delivery rules: a lane's
paged-out entries are all behind its resident ones, stored entries like any other,
counted in len() and `bytes` (docs/delivery.md, "Paged-out messages"). The window is
handed this object as its queue: it reads `priority`, `entries` and `bytes`.
"""
from collections import deque
from operator import attrgetter

from mqksbridge.core.window import PRIORITY, REGULAR

_MESSAGE, _SIZE, _PRIORITY = attrgetter("message"), attrgetter("size"), attrgetter("priority")


class Backlog:
    __slots__ = ("priority", "entries", "bytes", "window")

    def __init__(self):
        self.priority = deque()
        self.entries = deque()
        self.bytes = 0
        self.window = None             # core.window: the backlog beyond it is paged out

    def __len__(self):
        window = self.window
        return len(self.entries) + len(self.priority) + (window.paged if window else 0)

    def regular(self):
        """The regular lane's entries, paged-out ones included: what flow control counts
        (core.flow), so a window smaller than the flow limit still paces publishers."""
        window = self.window
        return len(self.entries) + (window.lanes[REGULAR] if window is not None else 0)

    def lengths(self):
        """(priority, regular) stored entries, paged-out ones included."""
        window = self.window
        paged = window.lanes if window is not None else (0, 0)
        return len(self.priority) + paged[PRIORITY], len(self.entries) + paged[REGULAR]

    def lanes(self, which="all"):
        """(pager lane, deque) of 'all' (or True: priority first), 'priority' or 'regular'."""
        if which == "priority":
            return ((PRIORITY, self.priority),)
        if which == "regular":
            return ((REGULAR, self.entries),)
        return ((PRIORITY, self.priority), (REGULAR, self.entries))

    # -- in ---------------------------------------------------------------------------
    def store(self, entry):
        """At the back of its lane: resident while the window admits it, else paged out."""
        message = entry.message
        self.bytes += message.size
        lane = self.priority if message.priority else self.entries
        window = self.window
        if window is None or window.admits(self, lane, message):
            lane.append(entry)
        else:
            window.page_out(self, lane, (entry,))

    def restore(self, entries):
        """Entries read back from a journal, in order, at the back of their lanes. A
        million may come back before the doors listen: without priority ones, a few
        passes in C, no Python code per entry."""
        messages = list(map(_MESSAGE, entries))
        self.bytes += sum(map(_SIZE, messages))
        if any(map(_PRIORITY, messages)):
            for entry, message in zip(entries, messages):
                (self.priority if message.priority else self.entries).append(entry)
        else:
            self.entries.extend(entries)
        if self.window is not None:
            self.window.trim(self)

    def set_window(self, window):
        """A new window (a queue turning durable): the backlog beyond it is paged out."""
        self.window = window
        if window is not None:
            window.trim(self)

    # -- paging -----------------------------------------------------------------------
    def refill(self):
        """Keep a lane with paged-out entries resident at its front."""
        window = self.window
        if window is not None and window.paged:
            window.refill(self)

    def page_all_in(self, which="all"):
        """Every paged-out entry of those lanes back at the end of its lane (a clear, a
        cache keeping the latest, a queue turning durable: rare, and their cost is the
        backlog's)."""
        window = self.window
        if window is None:
            return
        for index, lane in self.lanes(which):
            while window.lanes[index]:
                lane.extend(window.take(index, window.messages))

    def close(self):
        """The queue is gone: the window lets go of what it paged out."""
        if self.window is not None:
            self.window.close()

    # -- out ----------------------------------------------------------------------------
    def take_all(self):
        """Take every stored entry, in order, priority lane first (paged-out ones a batch
        at a time)."""
        window = self.window
        for index, lane in self.lanes():
            while True:
                while lane:
                    entry = lane.popleft()
                    self.bytes -= entry.message.size
                    yield entry
                if window is None or not window.lanes[index]:
                    break
                lane.extend(window.take(index, window.messages))
        if not len(self):
            self.bytes = 0

    def stored(self):
        """Every stored entry in delivery order, lane by lane, paged-out ones read back
        without taking them (admin views and tests: it reads the pager's files)."""
        window = self.window
        yield from self.priority
        if window is not None and window.lanes[PRIORITY]:
            yield from window.peek(PRIORITY)
        yield from self.entries
        if window is not None and window.lanes[REGULAR]:
            yield from window.peek(REGULAR)

    def oldest(self):
        """Take the oldest stored entry, the regular lane before the priority one (a full
        queue making room; there is one)."""
        if not self.entries:
            self.refill()
        entry = self.entries.popleft() if self.entries else self.priority.popleft()
        self.bytes -= entry.message.size
        return entry

    def clear(self, which, dropped):
        """Take every entry of those lanes, each to `dropped(entry)`."""
        window = self.window
        for index, lane in self.lanes(which):
            while True:
                while lane:
                    entry = lane.popleft()
                    self.bytes -= entry.message.size
                    dropped(entry)
                if window is None or not window.lanes[index]:
                    break
                lane.extend(window.take(index, window.messages))    # a batch at a time
        if not len(self):
            self.bytes = 0

    def keep_latest(self, removed):
        """Keep the latest stored entry only (a cache); the others to
        `removed(entry, 'removed')`."""
        window = self.window
        paged = window.lanes if window is not None else (0, 0)
        if paged[REGULAR]:
            latest = window.take_last(REGULAR, 1)[-1]
        elif self.entries:
            latest = self.entries[-1]
        elif paged[PRIORITY]:
            latest = window.take_last(PRIORITY, 1)[-1]
        else:
            latest = self.priority[-1] if self.priority else None
        for index, lane in self.lanes():
            while True:
                for entry in lane:
                    if entry is not latest:
                        removed(entry, "removed")
                lane.clear()
                if window is None or not window.lanes[index]:
                    break
                lane.extend(window.take(index, window.messages))    # a batch at a time
        self.bytes = 0
        if latest is not None:
            self.entries.append(latest)
            self.bytes = latest.message.size

    def expire(self, now, expired):
        """Take the entries whose message expired by `now` from the front of each lane,
        each to `expired(entry)`."""
        window = self.window
        for index, lane in self.lanes():
            while True:
                while lane:
                    expires = lane[0].message.expires_at
                    if expires is None or expires > now:
                        break
                    entry = lane.popleft()
                    self.bytes -= entry.message.size
                    expired(entry)
                if lane or window is None or not window.lanes[index]:
                    break
                window.refill(self)
