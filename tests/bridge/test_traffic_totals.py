"""DoorTraffic.totals sums thousands of connections with C-level passes (bridge.traffic);
held equal here to the plain per-connection sum it replaced, over arbitrary counters."""
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.bridge.traffic import ORIGINS, DoorTraffic
from mqksbridge.core import Message


class Sent:
    def __init__(self, sent):
        self.sent = sent


def plain_totals(traffic):
    """The per-connection sum: one Counter per connection (Traffic.flows)."""
    live = list(traffic.live.values())
    out = Counter(traffic.gone_out)
    for t in live:
        out.update(t.flows())
    return {
        "connections": len(live), "opened": traffic.opened, "refused": traffic.refused,
        "bytes_in": traffic.gone_bytes_in + sum(t.bytes_in for t in live),
        "bytes_out": traffic.gone_bytes_out + sum(t.bytes_out for t in live),
        "messages_in": traffic.gone_messages_in + sum(t.messages_in for t in live),
        "messages_out": sum(out.values()),
        "flows_in": dict(out),
    }


counts = st.integers(min_value=0, max_value=10**6)
connection = st.fixed_dictionaries({
    "bytes_in": counts, "messages_in": counts, "own": counts,
    "sent": st.none() | counts,                            # None: no outbox (a TextQueue inbox)
    "out": st.dictionaries(st.sampled_from(ORIGINS + (None, "other")), counts, max_size=6),
    "closed": st.booleans()})


def _door(door, connections):
    traffic = DoorTraffic(door, lambda: 0.0)
    for c in connections:
        t = traffic.open(("peer", 1), None, None if c["sent"] is None else Sent(c["sent"]),
                         None, input=object())
        t.bytes_in, t.messages_in, t.own = c["bytes_in"], c["messages_in"], c["own"]
        for origin, n in c["out"].items():
            t.out[origin] += n
        if c["closed"]:
            traffic.close(t)
    return traffic


@settings(max_examples=200, deadline=None)
@given(door=st.sampled_from(ORIGINS), connections=st.lists(connection, max_size=30))
def test_totals_equal_the_per_connection_sum(door, connections):
    traffic = _door(door, connections)
    fast, plain = traffic.totals(), plain_totals(traffic)
    assert fast == plain


@settings(max_examples=200, deadline=None)
@given(door=st.sampled_from(ORIGINS), connections=st.lists(connection, max_size=30),
       slices=st.lists(st.integers(min_value=0, max_value=8), max_size=12),
       closing=st.lists(st.integers(min_value=0, max_value=29), max_size=10))
def test_a_scan_in_slices_equals_the_one_pass_sum_while_connections_close(
        door, connections, slices, closing):
    """The admin sampler sums a slice of connections per turn (bridge.traffic.Scan); a
    connection that closes between two slices is counted once."""
    traffic = _door(door, connections)
    expected = plain_totals(traffic)
    scan = traffic.scan()
    live = list(traffic.live.values())
    for n, which in zip(slices, closing + [None] * len(slices)):
        scan.step(n)
        if which is not None and which < len(live):
            traffic.close(live[which])                # its counts move to the gone totals
    while not scan.done:
        scan.step(3)
    assert scan.totals() == expected
    assert traffic.totals() == plain_totals(traffic)


def test_a_latency_is_never_observed_below_zero():
    """A door stamps arrival with a reading taken once per read or turn; the delivering
    door's reading can be a little earlier. The histogram gets 0, not a negative age."""
    now = [100.0]
    traffic = DoorTraffic("twino", lambda: now[0])
    seen = []
    traffic.latency = seen.append
    t = traffic.open(("peer", 1), None, None, None, input=object())
    t.sampled(Message("m1", "s", (b"x",), created_at=100.00002))
    t.sampled(Message("m2", "s", (b"x",), created_at=99.5))
    assert seen == [0.0, 0.5]
