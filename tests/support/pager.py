"""A pager that keeps paged-out entries in lists (core.window's interface, no disk).

For core tests of the window policy: it hands back fresh Entry objects, with what a file
pager keeps of each (message, retry, observer, deliveries), so no rule may lean on a
paged entry being the object that went out.
"""
from collections import deque

from mqksbridge.core.message import Entry
from mqksbridge.core.window import Pager, StorageWindow


def _copy(entry):
    copy = Entry(entry.message, entry.retry, entry.observer)
    copy.deliveries = entry.deliveries
    copy.record = entry.record
    return copy


class ListPager(Pager):
    def __init__(self):
        self.lanes = (deque(), deque())
        self.closed = False

    def page_out(self, lane, entries):
        self.lanes[lane].extend(map(_copy, entries))

    def page_in(self, lane, count):
        paged = self.lanes[lane]
        return [paged.popleft() for _ in range(min(count, len(paged)))]

    def page_in_last(self, lane, count):
        paged = self.lanes[lane]
        taken = [paged.pop() for _ in range(min(count, len(paged)))]
        taken.reverse()
        return taken

    def peek(self, lane):
        return list(self.lanes[lane])

    def close(self):
        self.closed = True
        for lane in self.lanes:
            lane.clear()


def tiny_windows(messages=2, size=1 << 20):
    """A broker's `windows` factory: every queue keeps `messages` entries resident."""
    return lambda queue: StorageWindow(ListPager(), messages, size)
