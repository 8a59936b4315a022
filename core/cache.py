"""Bounded memos for values that are cheap to recompute and mostly repeat (the few subjects,
senders and queues a broker sees over and over).

A hit must cost one dict lookup, so the memo is a plain dict; only storing goes through
`put`, which empties the dict once it holds `limit` entries. Emptying it all at once, not
evicting one entry at a time, keeps the miss path short too: a working set larger than
the limit only costs misses, never memory. Core and bridge share it (core imports nothing).
"""


def bounded(limit):
    """A new memo: `(cache, put)`, where `cache` is the plain dict to look things up in and
    `put(key, value)` stores (emptying `cache` first when it is full) and returns value."""
    cache = {}
    clear = cache.clear

    def put(key, value):
        if len(cache) >= limit:
            clear()
        cache[key] = value
        return value
    return cache, put
