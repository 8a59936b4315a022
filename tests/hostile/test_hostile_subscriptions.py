"""Per-client subscription limits, O(1) registration, and a publish whose
cost does not grow with identical or literal patterns."""
import time

import zmq

from mqksbridge.bridge.mqks.door import MqksDoor
from mqksbridge.bridge.engine import EmbeddedEngine
from mqksbridge.core import Client
from mqksbridge.core.clock import FakeClock
from mqksbridge.protocols.malamute import codec, zrex
from tests.support.waits import wait_until

LIMIT = 1000         # malamute.max_subscriptions by default


def test_twenty_thousand_patterns_are_refused_past_the_limit(broker):
    """One client pipelines 20,000 STREAM-READs on `mqks` (10 s and 84k -> 71 msg/s for
    every MQKS user before): the first 1,000 get OK, then ERROR 300 ends the session."""
    peer = zmq.Context.instance().socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(broker.endpoint)
    try:
        peer.send_multipart(codec.encode(codec.ConnectionOpen("greedy")))
        for i in range(20_000):
            peer.send_multipart(codec.encode(codec.StreamRead("mqks", f"^event\\.{i}\\.")))
        replies = []

        def replied():
            if peer.poll(100):
                replies.append(codec.decode(peer.recv_multipart()))
            return len(replies) >= LIMIT + 2
        wait_until(replied, 10, f"{LIMIT + 2} replies", step=0)
        assert replies[:LIMIT + 1] == [codec.Ok()] * (LIMIT + 1)     # OPEN and 1,000 reads
        assert replies[LIMIT + 1].__class__ is codec.Error
        assert replies[LIMIT + 1].code == codec.FAILED
    finally:
        peer.close(0)
    mqks = broker.mqks()
    started = time.monotonic()
    for i in range(200):
        mqks.publish(f"event.{i}.x", "after", confirm=True)
    assert time.monotonic() - started < 2.0


class _Connection:
    """What MqksDoor.publish_plain needs of a connection."""

    def __init__(self, client):
        self.client, self.written = client, []

    def write(self, data):
        self.written.append(data)


def _mqks_door():
    broker = EmbeddedEngine(FakeClock())
    door = MqksDoor(broker, None)
    door.stream.set_bindings("orders", ["orders.created"])
    broker.queue("orders")                      # a bound queue, as MQKS users have
    client = Client("publisher", "mqks")
    broker.connect(client)
    return door, _Connection(client)


def _publish_cost(door, conn, count=3000):
    publish = door.publish_plain
    started = time.thread_time()
    for i in range(count):
        publish(conn, b"m%d" % i, b"orders.created", b"body", 0.0)
    return time.thread_time() - started


def test_mqks_publish_cost_ignores_identical_and_literal_patterns():
    """MQKS publishes with 20,000 readers of one pattern and 4,000 of distinct anchored
    literals on stream `mqks` cost less than twice what they cost with one reader (84k ->
    71 msg/s before). Registering the readers is O(1) each."""
    plain, plain_conn = _mqks_door()
    crowded, crowded_conn = _mqks_door()
    same = zrex.compile("^audit\\..*\\.deleted$")
    plain.stream.add_reader(Client("one", "malamute"), "p", same, lambda name, m: None)
    literals = [zrex.compile(f"^audit\\.{i}\\.") for i in range(2000)]
    literals += [zrex.compile(f"^user\\.{i}$") for i in range(2000)]
    started = time.thread_time()
    for i in range(20_000):
        crowded.stream.add_reader(Client(f"same{i}", "malamute"), "p", same,
                                  lambda name, m: None)
    for i, pattern in enumerate(literals):
        crowded.stream.add_reader(Client(f"literal{i}", "malamute"), "p", pattern,
                                  lambda name, m: None)
    assert time.thread_time() - started < 2.0        # O(n^2) before: about 10 s
    ratios = []
    for _ in range(3):          # interleaved, best of three
        base = _publish_cost(plain, plain_conn)
        ratios.append(_publish_cost(crowded, crowded_conn) / base)
    assert min(ratios) < 2.0, ratios
