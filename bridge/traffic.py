"""Per-connection and per-door traffic counters, for the admin API and /metrics.

A door bumps integers where it already touches the data: bytes in once per read, messages
in at its publish points, and one `out[origin] += 1` per delivery (which is at once the
connection's messages out and the door-to-door flow: origin door x consumer door). Bytes
out are the connection's Outbox.sent. Nothing is computed per message: the admin side sums
and differentiates these once a second (bridge.admin.sampler).

A connection that goes has its counts folded into its door's `gone` totals, so door
totals only ever grow (rates from deltas stay right).
"""
import itertools
from collections import Counter

from twisted.internet import defer

ORIGINS = ("mqks", "malamute", "twino")
_ids = itertools.count(1)


class Traffic:
    """One connection: who (door, peer, core client once known), its counters, and how to
    stop reading from it (`transport`) or say goodbye (`goodbye`, the door's own close)."""

    __slots__ = ("id", "door", "peer", "client", "transport", "outbox", "goodbye",
                 "opened_at", "bytes_in", "messages_in", "out")

    def __init__(self, door, peer, transport, outbox, goodbye, opened_at):
        self.id = f"{door}-{next(_ids)}"
        self.door = door
        self.peer = peer
        self.client = None
        self.transport = transport
        self.outbox = outbox
        self.goodbye = goodbye
        self.opened_at = opened_at
        self.bytes_in = 0
        self.messages_in = 0
        self.out = Counter(dict.fromkeys(ORIGINS, 0))   # deliveries by origin door

    @property
    def bytes_out(self):
        return self.outbox.sent if self.outbox is not None else 0

    @property
    def messages_out(self):
        return sum(self.out.values())


class DoorTraffic:
    """A door's live connections (admin id -> Traffic) and the totals of those gone."""

    def __init__(self, door, clock):
        self.door = door
        self.clock = clock                 # () -> seconds
        self.live = {}
        self.opened = 0
        self.gone_bytes_in = self.gone_bytes_out = self.gone_messages_in = 0
        self.gone_out = Counter()
        self._empty = []                   # Deferreds waiting for no live connection

    def open(self, peer, transport, outbox, goodbye):
        traffic = Traffic(self.door, peer, transport, outbox, goodbye, self.clock())
        self.live[traffic.id] = traffic
        self.opened += 1
        return traffic

    def close(self, traffic):
        if self.live.pop(traffic.id, None) is None:
            return
        self.gone_bytes_in += traffic.bytes_in
        self.gone_bytes_out += traffic.bytes_out
        self.gone_messages_in += traffic.messages_in
        self.gone_out.update(traffic.out)
        if not self.live and self._empty:
            waiting, self._empty = self._empty, []
            for d in waiting:
                d.callback(None)

    def when_empty(self):
        """A Deferred that fires once no connection is live (shutdown waits on it)."""
        if not self.live:
            return defer.succeed(None)
        d = defer.Deferred()
        self._empty.append(d)
        return d

    def totals(self):
        """Door-wide counters: gone connections plus live ones."""
        live = list(self.live.values())
        out = Counter(self.gone_out)
        for t in live:
            out.update(t.out)
        return {
            "connections": len(live),
            "opened": self.opened,
            "bytes_in": self.gone_bytes_in + sum(t.bytes_in for t in live),
            "bytes_out": self.gone_bytes_out + sum(t.bytes_out for t in live),
            "messages_in": self.gone_messages_in + sum(t.messages_in for t in live),
            "messages_out": sum(out.values()),
            "flows_in": {origin: n for origin, n in out.items()},   # origin -> delivered here
        }
