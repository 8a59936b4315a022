"""Property: the MQKS door's run paths (a read's plain publishes made and routed as one,
its plain acks served together, a run of deliveries written at once: MqksDoor.publish_run,
ack_run, the consumers' deliver_run) change nothing but speed. The same chunks go to a door
as it serves them and to one that takes every line through `handle` one by one, its
consumers handed one delivery at a time; every connection must receive the same bytes and
every counter (deliveries, latency samples, queues, streams) must agree after each step,
with a high-water mark small enough that connections pause and hold their input."""
import re

from hypothesis import given, settings, strategies as st
from twisted.internet import task
from twisted.internet.testing import StringTransport

from mqksbridge.bridge.engine import EmbeddedEngine
from mqksbridge.bridge.mqks.door import MqksConnection, MqksDoor
from mqksbridge.bridge.outbox import FlushScheduler
from mqksbridge.core import FakeClock
from mqksbridge.protocols.mqks.requests import fast_request

CONNECTIONS = 3
ERROR_ID = re.compile(rb" error \S+")


class OneByOneConnection(MqksConnection):
    """The simple path: each line through door.handle (parse_request, publish, ack);
    like _serve, a held input stops the read only after a line that is not plain."""

    def _serve(self, lines, too_long):
        held = self.input.reasons
        self.read_at = self.door.clock()
        for i, line in enumerate(lines):
            self.door.handle(self, line)
            if held and fast_request(line) is None:
                self.kept = (lines[i + 1:], too_long)
                return
        assert not too_long


class OneByOneDoor(MqksDoor):
    """Its consumers take no runs: every delivery is one _deliver."""

    def consume(self, conn, cid, data, confirm):
        MqksDoor.consume(self, conn, cid, data, confirm)
        self.consumers[cid].deliver_run = None


class World:
    def __init__(self, door_class, connection_class, high_water):
        self.reactor = task.Clock()
        self.clock = FakeClock()
        self.clock.advance(100.0)            # messages stamped with a time are timed
        self.door = door_class(EmbeddedEngine(self.clock), FlushScheduler(self.reactor),
                               high_water=high_water)
        self.door.traffic.mask = 3
        self.latencies = []
        self.door.traffic.latency = self.latencies.append
        self.connections = []
        for _ in range(CONNECTIONS):
            conn = connection_class(self.door)
            conn.makeConnection(StringTransport())
            self.connections.append(conn)

    def feed(self, k, chunk):
        self.connections[k].dataReceived(chunk)

    def flush(self):
        self.clock.advance(0.5)
        self.reactor.advance(0)

    def state(self):
        queues = [(name, q.received, q.delivered, q.acked, q.requeued, len(q), q.outstanding)
                  for name, q in sorted(self.door.broker.queues.items())]
        stream = self.door.stream
        return ([ERROR_ID.sub(b" error E", c.transport.value()) for c in self.connections],
                [(c.traffic.own, c.traffic.messages_in, c.client.paused) for c in self.connections],
                queues, stream.published, stream.unrouted, self.latencies)


EVENTS = (b"e1", b"e2", b"e3", b"e4")
RUN = st.tuples(st.just(b"e1"), st.just(b"x" * 60)).map(lambda t: ("publish", t))
LINES = st.one_of(
    RUN, RUN, RUN,
    st.tuples(st.sampled_from(EVENTS), st.sampled_from([b"body", b"b c", b"x" * 60])).map(
        lambda t: ("publish", t)),
    st.tuples(st.sampled_from([b"c1", b"c2", b"c3"]), st.integers(0, 30)).map(
        lambda t: ("ack", t)),
    st.sampled_from([
        b"c1 consume q1 e1 e2 --manual-ack", b"c2 consume q2 e1", b"c3 consume q1 e1",
        b"c2 consume q3 e3 e4", b"a ack c1 --all", b"a ack c9 m1", b"a ack c1 m%25", b"p ping x",
        b"m publish --confirm e1 confirmed", b"x publish e1", b"d delete_consumer c3",
        b"r rebind q2 --add e2", b"m publish e2 trailing ", b"m\tpublish e1 tab",
        b"j reject c1 --all"]).map(lambda line: ("line", line)))
STEP = st.one_of(st.tuples(st.integers(0, CONNECTIONS - 1), st.lists(LINES, min_size=1,
                                                                   max_size=30)),
                 st.just("flush"))


def chunk(items, counter):
    """The lines of one read; publishes numbered m0, m1, ... in order."""
    lines = []
    for kind, value in items:
        if kind == "publish":
            lines.append(b"m%d publish %s %s" % (counter[0], *value))
            counter[0] += 1
        elif kind == "ack":
            lines.append(b"a ack %s m%d" % value)
        else:
            lines.append(value)
    return b"".join(line + b"\n" for line in lines)


# Consumers to start with (connection, consume line): lone and shared queues, manual acks.
SETUPS = ([], [(1, b"c2 consume q2 e1")], [(2, b"c1 consume q1 e1 e2 --manual-ack")],
          [(1, b"c2 consume q2 e1 e2"), (2, b"c3 consume q1 e1")],
          [(1, b"c2 consume q2 e1"), (2, b"c4 consume q2 e1 --manual-ack"),
           (0, b"c1 consume q1 e1 --manual-ack")])


@settings(max_examples=300, deadline=None)
@given(high_water=st.sampled_from([200, 1000, 1 << 20]), setup=st.sampled_from(SETUPS),
       steps=st.lists(STEP, min_size=3, max_size=25))
def test_mqks_runs_change_nothing_but_speed(high_water, setup, steps):
    fast = World(MqksDoor, MqksConnection, high_water)
    plain = World(OneByOneDoor, OneByOneConnection, high_water)
    counter = [0]
    steps = [(k, [("line", line)]) for k, line in setup] + steps
    for step in steps + ["flush"]:
        if step == "flush":
            fast.flush()
            plain.flush()
        else:
            k, items = step
            data = chunk(items, counter)
            fast.feed(k, data)
            plain.feed(k, data)
        assert fast.state() == plain.state(), step
