"""Stream readers and router bindings across gateways (docs/cluster.md, the streams rows).

Two engines (gateways A and B) on the session's RabbitMQ node, in this process: a reader
with a Malamute regular-expression pattern on B gets what A publishes and what a plain
AMQP client publishes to the stream's exchange, filtered at B, once each, in publish
order; a reader on A gets A's own publishes once (they come back through A's readers'
queue and are skipped); a Twino router binding on B takes what A publishes. Then the same
through real gateways (`twistd -n mqksbridge`) and real clients of every door.

Exactly once is judged after a fence: a last message published after the others by the
same publisher, which reaches every reader after everything before it (one channel
publishes, one queue per gateway brings), so a duplicate would be in by then.
"""
import json
import uuid

import pika
import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task, threads

from mqksbridge.bridge.clock import ReactorClock
from mqksbridge.bridge.engine import Client, Consumer, Message
from mqksbridge.bridge.engine.rabbitmq import RabbitMQEngine
from mqksbridge.core.permissions import Denied, Principal, Rules
from mqksbridge.protocols.malamute import zrex
from tests.cluster.test_cluster_interop import DOORS, gateways  # noqa: F401 (fixture)
from tests.interop.sides import MalamuteReader, unique
from tests.support.rabbitmq import idle
from tests.support.waits import until, wait_until

TIMEOUT = 60.0


@pytest_twisted.async_yield_fixture
async def pair(rabbitmq_node):
    """Gateways A and B on one prefix of their own; what they declared deleted at the end."""
    prefix = f"readers-{uuid.uuid4().hex[:8]}."
    engines = [RabbitMQEngine(ReactorClock(task.Clock()), rabbitmq_node.urls(), node=node,
                              prefix=prefix, replicas=1, reactor=reactor)
               for node in ("a", "b")]
    yield engines
    a = engines[0]
    if a._declarer is not None:
        for name in sorted({q.amqp_name for e in engines for q in e.queues.values()}):
            await a._declarer.queue_delete(name)
        for name in sorted({s for e in engines for s in e.streams}):
            await a._declarer.exchange_delete(a.names.subjects(name))
            await a._declarer.exchange_delete(a.names.stream(name))
    await defer.gatherResults([e.stop() for e in engines])


async def ready(*engines):
    await defer.gatherResults([e.ready() for e in engines]).addTimeout(TIMEOUT, reactor)


def reader(engine, stream, pattern, name="reader"):
    """A Malamute-like reader (a zrex pattern) on `engine`; the (subject, id) it got."""
    got = []
    client = Client(f"{name}-{engine.node}", "malamute")
    engine.stream(stream).add_reader(client, pattern, zrex.compile(pattern),
                                     lambda _, message: got.append((message.subject,
                                                                    message.id)))
    return client, got


async def bound(engine, stream, on=True):
    await until(lambda: (stream in engine.tap.bound) == on, TIMEOUT,
                f"{engine.node}'s readers' queue {'bound to' if on else 'off'} {stream}")


async def amqp_publish(engine, exchange, subject, message_id):
    """A plain AMQP client's publish to a stream's exchange (no `type`: the routing key
    is the subject), on a connection of its own."""
    def send():
        url = engine.connection.url
        with pika.BlockingConnection(pika.URLParameters(url)) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.basic_publish(exchange, subject, b"plain",
                                  pika.BasicProperties(message_id=message_id))
    await threads.deferToThread(send)


@pytest_twisted.ensureDeferred
async def test_a_pattern_reader_on_one_gateway_reads_the_other_gateways_publishes(pair):
    a, b = pair
    await ready(a, b)
    far_client, far = reader(b, "events", "^order\\.(new|paid)$")
    _, near = reader(a, "events", "^order\\.")
    await bound(a, "events")
    await bound(b, "events")
    events = a.stream("events")
    publisher = Client("pub", "mqks")
    subjects = ["order.new", "order.old", "order.paid", "stock.new", "order.new"]
    for n, subject in enumerate(subjects):
        events.publish(Message(f"A{n}", subject, (b"x",)), publisher)
    await amqp_publish(a, events.exchange, "order.paid", "amqp-1")
    await amqp_publish(a, events.exchange, "order.old", "amqp-2")
    events.publish(Message("Afence", "order.new", (b"x",)), publisher)
    # every message in: B's queue brought A's six and the two plain ones, A's brought the
    # plain ones and its own six back (skipped)
    await until(lambda: b.tap.received == 8 and a.tap.received + a.tap.skipped == 8,
                TIMEOUT, "every message through both queues",
                detail=lambda: (far, near, a.tap.skipped))
    await idle(a)
    await idle(b)
    assert from_(far, "A") == [("order.new", "A0"), ("order.paid", "A2"),
                               ("order.new", "A4"), ("order.new", "Afence")]
    assert from_(far, "amqp") == [("order.paid", "amqp-1")]
    assert len(far) == 5
    assert from_(near, "A") == [("order.new", "A0"), ("order.old", "A1"),
                                ("order.paid", "A2"), ("order.new", "A4"),
                                ("order.new", "Afence")]
    assert from_(near, "amqp") == [("order.paid", "amqp-1"), ("order.old", "amqp-2")]
    assert len(near) == 7
    assert (a.tap.skipped, a.tap.received) == (6, 2)      # its own came back, skipped
    assert b.tap.skipped == 0
    assert events.published == 6 and b.stream("events").remote == 8

    # B's own publish: its reader once, A's once; a reader that leaves unbinds its gateway
    b.stream("events").publish(Message("b0", "order.paid", (b"x",)), Client("p2", "mqks"))
    assert far[-1] == ("order.paid", "b0")             # at once, on its own gateway
    await until(lambda: ("order.paid", "b0") in near and b.tap.skipped == 1, TIMEOUT,
                "B's publish at A, and back at B")
    assert far.count(("order.paid", "b0")) == 1
    b.stream("events").remove_readers(far_client)
    await bound(b, "events", on=False)
    events.publish(Message("Aafter", "order.new", (b"x",)), publisher)
    await until(lambda: a.tap.skipped == 7, TIMEOUT, "A's publish routed (back at A)")
    await idle(b)
    assert b.tap.received == 8                 # B's queue is bound no more: nothing came
    assert near.count(("order.paid", "b0")) == 1 and near[-1] == ("order.new", "Aafter")


def from_(got, prefix):
    """What one publisher sent, in the order it came."""
    return [entry for entry in got if entry[1].startswith(prefix)]


@pytest_twisted.ensureDeferred
async def test_a_router_binding_on_one_gateway_takes_the_other_gateways_publishes(pair):
    """A Twino-style router binding (a queue taking every subject) on B: A's publishes and
    a plain AMQP publish reach its queue once each; round-robin between two bindings on B
    puts each message in one of them."""
    a, b = pair
    await ready(a, b)
    for name in ("one", "two"):
        b.queue(name)
    stream = b.stream("feed")
    stream.set_routed(["one"])
    await bound(b, "feed")
    got = {"one": [], "two": []}
    for name in got:
        b.consume(b.queues[name], Consumer(name, Client(f"w-{name}", "twino"),
                                           lambda c, e, name=name: got[name].append(
                                               e.message.id)))
    feed = a.stream("feed")
    assert not feed.read_here()
    for n in range(3):
        feed.publish(Message(f"a{n}", f"any.{n}", (b"x",)))
    await amqp_publish(a, feed.exchange, "plain", "amqp-1")
    await until(lambda: len(got["one"]) == 4, TIMEOUT, "four at the bound queue",
                detail=lambda: got)
    await idle(b)
    assert got == {"one": ["a0", "a1", "a2", "amqp-1"], "two": []}

    stream.route = "round-robin"
    stream.set_routed(["one", "two"])
    for n in range(4):
        feed.publish(Message(f"r{n}", "s", (b"x",)))
    await until(lambda: len(got["one"]) + len(got["two"]) == 8, TIMEOUT, "four more",
                detail=lambda: got)
    await idle(b)
    assert sorted(got["one"][4:] + got["two"]) == ["r0", "r1", "r2", "r3"]
    assert len(got["two"]) == 2


@pytest_twisted.ensureDeferred
async def test_a_run_of_publishes_reaches_the_bound_queues(pair):
    """The MQKS door publishes a read's run of one event as one publish_run: on a gateway
    each message is a basic.publish of its own (nothing in a local queue)."""
    a, b = pair
    await ready(a, b)
    inbox = b.queue("inbox")
    b.stream("mqks").set_bindings("inbox", ["tick"])
    got = []
    b.consume(inbox, Consumer("w", Client("c", "mqks"),
                              lambda c, e: got.append(e.message.id)))
    await idle(b)
    assert a.stream("mqks").publish_run(
        [Message(f"m{n}", "tick", (b"x",)) for n in range(3)], Client("p", "mqks")) == 0
    await until(lambda: len(got) == 3, TIMEOUT, "the run", detail=lambda: got)
    assert got == ["m0", "m1", "m2"]



@pytest_twisted.ensureDeferred
async def test_a_subject_no_routing_key_can_hold_is_routed_or_refused_never_stuck(pair):
    """A subject longer than a routing key's 255 bytes is bound and published under a
    digest of it, so it routes across gateways like any other. One that is not UTF-8 (an
    MQKS event may be any bytes) cannot travel as AMQP text: its publish is refused, and
    the confirmations of the gateway's later publishes are not held up by it."""
    a, b = pair
    await ready(a, b)
    long = "long." + "x" * 300
    inbox = b.queue("inbox")
    b.stream("mqks").set_bindings("inbox", [long])
    got = []
    b.consume(inbox, Consumer("w", Client("c", "mqks"),
                              lambda c, e: got.append((e.message.id, e.message.subject))))
    await idle(b)
    stream = a.stream("mqks")
    stream.publish(Message("m0", long, (b"x",)))
    stream.publish(Message("m1", "bad.\udcff", (b"x",)))
    confirmed = await a.publish(a.queue("after"), Message("m2", "s", (b"x",)),
                                confirm=True).addTimeout(TIMEOUT, reactor)
    assert confirmed is True and a.counters["refused"] == 1
    await until(lambda: got, TIMEOUT, "the long subject's message")
    assert got == [("m0", long)]


@pytest_twisted.ensureDeferred
async def test_a_gateway_with_users_checks_a_stream_publish_before_sending_it(
        rabbitmq_node):
    """As core.guarded does: a publisher not allowed a subject is Denied, and nothing of
    it reaches RabbitMQ (no publish, no confirmation waited for)."""
    engine = RabbitMQEngine(ReactorClock(task.Clock()), rabbitmq_node.urls(), node="g",
                            prefix=f"guarded-{uuid.uuid4().hex[:8]}.", replicas=1,
                            reactor=reactor, guarded=True)
    try:
        await ready(engine)
        stream = engine.stream("mqks")
        bob = Client("bob", "mqks", principal=Principal(
            "bob", Rules(publish=["stream:mqks:public.*"])))
        sent = engine.storage.appended
        with pytest.raises(Denied):
            stream.publish(Message("m0", "secret.x", (b"x",)), bob)
        assert engine.storage.appended == sent and stream.published == 0
        stream.publish(Message("m1", "public.x", (b"x",)), bob)
        assert engine.storage.appended == sent + 1
    finally:
        if engine._declarer is not None:
            await engine._declarer.exchange_delete(engine.names.subjects("mqks"))
            await engine._declarer.exchange_delete(engine.names.stream("mqks"))
        await engine.stop()


@pytest_twisted.ensureDeferred
async def test_a_reader_reads_on_once_its_gateway_connected_again(pair, rabbitmq_node):
    """The connections go (RabbitMQ closes them): the readers' queue goes with B's, and
    once B is connected again its queue is declared and bound anew, so the reader there
    gets what A publishes from then on."""
    a, b = pair
    await ready(a, b)
    _, far = reader(b, "events", "^x$")
    await bound(b, "events")
    first, old = b.tap.queue, {a.connection.protocol, b.connection.protocol}
    await threads.deferToThread(rabbitmq_node.ctl, 1, "close_all_connections", "--global",
                                "test")
    await until(lambda: not {a.connection.protocol, b.connection.protocol} & (old | {None}),
                TIMEOUT, "both connected again")
    await ready(a, b)
    await bound(b, "events")
    assert b.tap.queue == first                # the same name, declared again
    a.stream("events").publish(Message("after", "x", (b"x",)))
    await until(lambda: far == [("x", "after")], TIMEOUT, "the publish after",
                detail=lambda: far)

# -- through real gateways ---------------------------------------------------------------

class Taps:
    """Which gateways' readers' queues are bound to a stream's exchange, in RabbitMQ."""

    def __init__(self, cluster):
        self.cluster = cluster

    def bound(self, stream="mqks"):
        rows = json.loads(self.cluster.ctl(1, "list_bindings", "-p", self.cluster.vhost,
                                           "source_name", "destination_name",
                                           "--formatter", "json"))
        return {row["destination_name"].split(".")[2] for row in rows
                if row["source_name"] == "mqksbridge.s." + stream
                and row["destination_name"].startswith("mqksbridge.r.")}

    def wait(self, gateways, stream="mqks"):
        """Until exactly `gateways` read `stream` (a reader a test left goes with a lag)."""
        wait_until(lambda: self.bound(stream) == set(gateways), 60,
                   f"the readers' queues of {sorted(gateways)} on {stream}", step=0.2)


@pytest.fixture(scope="module")
def taps(_rabbitmq_node_session):
    return Taps(_rabbitmq_node_session)


@pytest.fixture
def quiet(nets, taps):
    """No gateway reads `mqks` when the test starts (those a former test left are gone)."""
    taps.wait(())
    return nets


def malamute_reader(net, pattern):
    client = net.side("malamute").client()
    client.set_consumer("mqks", pattern)
    return MalamuteReader(client)


def got(reader):
    message = reader.recv()
    return message.subject, message.frames


@pytest.mark.parametrize("src", DOORS)
def test_a_malamute_pattern_reader_reads_what_any_door_publishes_on_the_other_gateway(
        quiet, taps, src):
    """A Malamute reader on gateway 2 with a pattern gets, filtered by it, what a client of
    `src` publishes to the stream on gateway 1, once each and in order; a reader on gateway
    1 gets it once (its gateway's copy coming back from RabbitMQ is skipped). Checked for
    duplicates behind a message of the other gateway, which comes through the same queue
    after whatever came before it."""
    nets = quiet
    tag = unique("ev")
    far = malamute_reader(nets[1], f"^{tag}\\.(a|c)$")
    near = malamute_reader(nets[0], f"^{tag}\\.")
    taps.wait(("gw1", "gw2"))
    source = nets[0].side(src)
    pub = source.publisher()
    for part in "abc":
        source.publish_stream(pub, f"{tag}.{part}", (part.encode(),))
    assert [got(far), got(far)] == [(f"{tag}.a", (b"a",)), (f"{tag}.c", (b"c",))]
    assert [got(near) for _ in "abc"] == [(f"{tag}.{p}", (p.encode(),)) for p in "abc"]

    other = nets[1].side("malamute")
    behind = other.publisher()
    other.publish_stream(behind, f"{tag}.a", (b"from gw2",))
    assert got(far) == (f"{tag}.a", (b"from gw2",))
    assert got(near) == (f"{tag}.a", (b"from gw2",))
    near.nothing()                     # no copy of gateway 1's own came back to it
    first = nets[0].side("malamute")
    first.publish_stream(first.publisher(), f"{tag}.c", (b"from gw1",))
    assert got(near) == (f"{tag}.c", (b"from gw1",))
    assert got(far) == (f"{tag}.c", (b"from gw1",))
    far.nothing()


def test_a_plain_amqp_publish_to_the_stream_reaches_readers_on_every_gateway(quiet, taps):
    nets = quiet
    tag = unique("ev")
    readers = [malamute_reader(net, f"^{tag}\\.a$") for net in nets]
    taps.wait(("gw1", "gw2"))
    with pika.BlockingConnection(pika.URLParameters(taps.cluster.urls()[0])) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for subject in (f"{tag}.b", f"{tag}.a"):
            channel.basic_publish("mqksbridge.s.mqks", subject, b"plain",
                                  pika.BasicProperties(message_id=unique("amqp")))
    for reader in readers:
        assert got(reader) == (f"{tag}.a", (b"plain",))
        reader.nothing()


def test_a_twino_router_binding_on_one_gateway_takes_publishes_made_on_the_other(
        quiet, taps):
    """Router `mqks` on gateway 2 binds a queue (every subject): what MQKS and Malamute
    clients publish on gateway 1 reaches its consumer once each, each publisher's in order."""
    nets = quiet
    twino = nets[1].side("twino")
    queue = unique("ch") + "/1"
    (consumer,) = twino.queue_consumers(queue, 1)
    channel = queue.split("/")[0]
    admin = twino.client()
    binding = {"Name": channel, "Target": channel, "ContentType": 1, "Priority": 0,
               "Interaction": 0, "BindingType": 1}
    assert admin.operation(662, "mqks", (), json.dumps(binding).encode()).content_type == 0
    nets[1].on_close(lambda: twino._unbind(channel))
    taps.wait(("gw2",))
    mqks, malamute = nets[0].side("mqks"), nets[0].side("malamute")
    mqks.publish_stream(mqks.publisher(), "one", (b"1",))
    producer = malamute.publisher()
    malamute.publish_stream(producer, "two", (b"2",))
    malamute.publish_stream(producer, "three", (b"3",))
    received = [got(consumer) for _ in range(3)]
    assert sorted(received) == [("one", (b"1",)), ("three", (b"3",)), ("two", (b"2",))]
    assert [r for r in received if r[0] != "one"] == [("two", (b"2",)), ("three", (b"3",))]
    consumer.nothing()
