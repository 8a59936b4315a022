"""The cluster engine on real RabbitMQ nodes: what the contract suite (tests/engine/)
does not cover because it needs a cluster, two gateways or a fault.

- A node dies under a gateway (3-node cluster, SIGKILL, as a machine that dies): the
  engine reconnects to the next node of its list, every message RabbitMQ confirmed and
  the gateway never settled is handed out from the surviving nodes (quorum queues on
  three replicas), and nothing it acked comes back. What its consumer held unacked
  through the dead node is not judged: RabbitMQ 3.10.8 keeps it checked out by the dead
  node's consumer (the queue counts it unacked, a ghost among its consumers), and did not
  hand it out again within a minute of the node's return either.
- A lost connection (the node lives) comes back, and what was held comes out again with
  retry + 1; a node that does not answer is skipped.
- Two gateways: a stream routes across them and from a plain AMQP client; a queue or a
  mailbox one declared with other options is used as the cluster has it.
- An expired message is never handed out.
- A gateway with users checks a queue put as the core does."""
import uuid

import pika
import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task, threads

from mqksbridge.bridge.clock import ReactorClock
from mqksbridge.bridge.cluster.local import free_ports
from mqksbridge.bridge.engine import Client, Consumer, Message
from mqksbridge.bridge.engine.rabbitmq import RabbitMQEngine
from mqksbridge.bridge.engine.rabbitmq.resend import DELAYS, Resends
from mqksbridge.core.permissions import Denied, OverLimit, Principal, Rules
from tests.support.rabbitmq import idle
from tests.support.waits import until

TIMEOUT = 60.0


@pytest_twisted.ensureDeferred
async def test_a_node_dies_under_the_gateway_and_nothing_confirmed_is_lost(rabbitmq_cluster):
    urls = rabbitmq_cluster.urls()
    engine = RabbitMQEngine(ReactorClock(task.Clock()), urls, node="gw1",
                            prefix=f"failover-{uuid.uuid4().hex[:8]}.", replicas=3,
                            reactor=reactor)
    await engine.ready().addTimeout(TIMEOUT, reactor)
    assert engine.connection.url == urls[0]
    try:
        jobs = engine.queue("jobs")
        verdicts = await defer.gatherResults([
            engine.publish(jobs, Message(f"m{n}", "s", (b"x",)), confirm=True)
            for n in range(20)])
        assert verdicts == [True] * 20

        got = []
        worker = Consumer("w", Client("c1", "test"),
                          lambda c, entry: got.append((entry.message.id, entry.retry)),
                          manual_ack=True, credit=5)
        engine.consume(jobs, worker)
        await until(lambda: len(got) == 5, TIMEOUT, "five deliveries")
        assert got == [(f"m{n}", 0) for n in range(5)]
        assert engine.settle(worker, "m0") and engine.settle(worker, "m1")
        await idle(engine)

        await threads.deferToThread(rabbitmq_cluster.kill, 1)
        await until(lambda: engine.connection.url == urls[1] and engine.ready().called,
                    TIMEOUT, "the engine on node 2")
        assert worker.unacked == {}            # held on a connection that is gone
        engine.credit(worker, 100)
        await until(lambda: len(got) == 5 + 15, TIMEOUT, "the messages never handed out",
                    detail=lambda: got)
        assert got[5:] == [(f"m{n}", 0) for n in range(5, 20)]
        await idle(engine)
        assert not {"m0", "m1"} & {mid for mid, _ in got[5:]}       # acked: never again
    finally:
        declarer = engine._declarer
        if declarer is not None:
            await declarer.queue_delete(engine.names.queue("jobs"))
        await engine.stop()


@pytest_twisted.ensureDeferred
async def test_a_lost_connection_comes_back_and_what_was_held_is_handed_out_again(
        rabbitmq_node):
    """RabbitMQ closes the gateway's connection (the node lives): the engine connects
    again, its consumer consumes again, and what it held unacked comes back with
    retry + 1; a publish while it is away is held and confirmed once RabbitMQ took it on
    the new connection (never confirmed before: a door's confirmation is RabbitMQ's)."""
    engine = RabbitMQEngine(ReactorClock(task.Clock()), rabbitmq_node.urls(), node="gw1",
                            prefix=f"reconnect-{uuid.uuid4().hex[:8]}.", replicas=1,
                            reactor=reactor)
    await engine.ready().addTimeout(TIMEOUT, reactor)
    try:
        jobs = engine.queue("jobs")
        got = []
        worker = Consumer("w", Client("c1", "test"),
                          lambda c, entry: got.append((entry.message.id, entry.retry)),
                          manual_ack=True)
        engine.consume(jobs, worker)
        verdicts = await defer.gatherResults([
            engine.publish(jobs, Message(f"m{n}", "s", (b"x",)), confirm=True)
            for n in range(3)])
        assert verdicts == [True] * 3
        await until(lambda: len(got) == 3, TIMEOUT, "three deliveries")
        assert engine.settle(worker, "m0")
        await idle(engine)
        assert engine.confirms == 3 and engine.confirm_seconds > 0
        listed = await threads.deferToThread(rabbitmq_node.ctl, 1, "list_connections",
                                             "client_properties")
        assert "mqksbridge gw1" in listed            # the gateway, by name, in RabbitMQ

        lost = []
        engine.connection.lost = lambda reason, lost_=engine.connection.lost: (
            lost.append(reason), lost_(reason))
        await threads.deferToThread(rabbitmq_node.ctl, 1, "close_all_connections",
                                     "--global", "test")
        await until(lambda: lost, TIMEOUT, "the connection lost")
        verdict = []
        engine.publish(jobs, Message("away", "s", (b"x",)), confirm=True).addCallback(
            verdict.append)
        assert verdict == [] and engine.unconfirmed() == 1      # held, not confirmed
        await until(lambda: engine.ready().called, TIMEOUT, "the engine connected again")
        await until(lambda: len(got) == 6, TIMEOUT, "m1, m2 again and the held one",
                    detail=lambda: got)
        assert verdict == [True]
        assert sorted(got[3:]) == [("away", 0), ("m1", 1), ("m2", 1)]
        assert sorted(worker.unacked) == ["away", "m1", "m2"]
        assert all(engine.settle(worker, mid) for mid in ("m1", "m2", "away"))
        await idle(engine)
        assert len(jobs) == 0 and len(got) == 6
    finally:
        declarer = engine._declarer
        if declarer is not None:
            await declarer.queue_delete(engine.names.queue("jobs"))
        await engine.stop()


@pytest_twisted.ensureDeferred
async def test_a_stream_routes_across_gateways_and_from_a_plain_amqp_client(rabbitmq_node):
    """Gateway B binds its queue to a subject of a stream; a publish to the stream on
    gateway A reaches it, and so does a plain AMQP publish to the stream's exchange (its
    routing key the subject); an unbound subject reaches nobody."""
    prefix = f"streams-{uuid.uuid4().hex[:8]}."
    a, b = (RabbitMQEngine(ReactorClock(task.Clock()), rabbitmq_node.urls(), node=node,
                           prefix=prefix, replicas=1, reactor=reactor) for node in "ab")
    await defer.gatherResults([a.ready(), b.ready()]).addTimeout(TIMEOUT, reactor)
    try:
        inbox = b.queue("inbox")
        assert b.stream("events").set_bindings("inbox", ["order.new", "order.*"])
        got = []
        b.consume(inbox, Consumer("w", Client("c1", "test"),
                                  lambda c, entry: got.append((entry.message.id,
                                                               entry.message.subject))))
        await idle(b)
        events = a.stream("events")
        for n, subject in enumerate(["order.new", "order.old", "order.*"]):
            events.publish(Message(f"m{n}", subject, (b"x",)))
        await idle(a)
        channel = await b.open_channel()
        await channel.basic_publish(prefix + "s.events", "order.new", b"plain",
                                    pika.BasicProperties(message_id="amqp-1"))
        await until(lambda: len(got) == 3, TIMEOUT, "three deliveries", detail=lambda: got)
        await idle(b)
        assert sorted(got) == [("amqp-1", "order.new"), ("m0", "order.new"),
                               ("m2", "order.*")]

        assert b.stream("events").set_bindings("inbox", ["order.old"])   # rebind
        await idle(b)
        events.publish(Message("m3", "order.new", (b"x",)))
        events.publish(Message("m4", "order.old", (b"x",)))
        await until(lambda: len(got) == 4, TIMEOUT, "m4", detail=lambda: got)
        await idle(a)
        await idle(b)
        assert got[3:] == [("m4", "order.old")]
    finally:
        for engine in (a, b):
            if engine._declarer is not None:
                await engine._declarer.queue_delete(engine.names.queue("inbox"))
                await engine._declarer.exchange_delete(engine.names.stream("events"))
                break
        await defer.gatherResults([a.stop(), b.stop()])


@pytest_twisted.ensureDeferred
async def test_a_message_past_its_expiry_is_never_handed_out(rabbitmq_node):
    """RabbitMQ drops an expired message (AMQP expiration, from the core's expires_at)."""
    clock = task.Clock()
    clock.advance(1_000)
    engine = RabbitMQEngine(ReactorClock(clock), rabbitmq_node.urls(), node="gw1",
                            prefix=f"expiry-{uuid.uuid4().hex[:8]}.", replicas=1,
                            reactor=reactor)
    await engine.ready().addTimeout(TIMEOUT, reactor)
    try:
        jobs = engine.queue("jobs")
        assert await engine.publish(jobs, Message("gone", "s", (b"x",), expires_at=999.0),
                                    confirm=True)
        assert await engine.publish(jobs, Message("kept", "s", (b"x",), expires_at=2_000.0),
                                    confirm=True)
        got = []
        engine.consume(jobs, Consumer("w", Client("c1", "test"),
                                      lambda c, entry: got.append(entry.message.id)))
        await until(lambda: got, TIMEOUT, "a delivery")
        await idle(engine)
        assert got == ["kept"]
    finally:
        if engine._declarer is not None:
            await engine._declarer.queue_delete(engine.names.queue("jobs"))
        await engine.stop()


@pytest_twisted.ensureDeferred
async def test_a_queue_another_gateway_declared_with_other_options_is_used_as_it_is(
        rabbitmq_node):
    """Gateway A declares `jobs` with a length limit; gateway B, not knowing it, declares
    it plain: RabbitMQ refuses B's declare (other arguments), B takes the queue as the
    cluster has it, and its publishes reach A's consumer."""
    prefix = f"redeclare-{uuid.uuid4().hex[:8]}."
    a, b = (RabbitMQEngine(ReactorClock(task.Clock()), rabbitmq_node.urls(), node=node,
                           prefix=prefix, replicas=1, reactor=reactor) for node in "ab")
    await defer.gatherResults([a.ready(), b.ready()]).addTimeout(TIMEOUT, reactor)
    try:
        a.queue("jobs", max_messages=10)
        await idle(a)
        jobs = b.queue("jobs")
        verdicts = await defer.gatherResults([
            b.publish(jobs, Message(f"m{n}", "s", (b"x",)), confirm=True) for n in range(2)])
        assert verdicts == [True, True]
        other = b.queue("other")                       # B's declares go on as before
        assert await b.publish(other, Message("o", "s", (b"x",)), confirm=True) is True
        got = []
        a.consume(a.queues["jobs"], Consumer("w", Client("c1", "test"),
                                             lambda c, entry: got.append(entry.message.id)))
        await until(lambda: len(got) == 2, TIMEOUT, "B's messages at A", detail=lambda: got)
        assert got == ["m0", "m1"]
    finally:
        if a._declarer is not None:
            for name in ("jobs", "other"):
                await a._declarer.queue_delete(a.names.queue(name))
        await defer.gatherResults([a.stop(), b.stop()])


@pytest_twisted.ensureDeferred
async def test_a_mailbox_another_gateway_declared_with_other_options_is_used_as_it_is(
        rabbitmq_node):
    """Gateway A has a mailbox size limit, gateway B none: B's declare of A's mailbox is
    refused (other arguments), B takes the queue as the cluster has it, and B's owner of
    the address gets the mail sent on A (it was never consumed before: the refusal left
    the mailbox undeclared for good)."""
    prefix = f"remailbox-{uuid.uuid4().hex[:8]}."
    a, b = (RabbitMQEngine(ReactorClock(task.Clock()), rabbitmq_node.urls(), node=node,
                           prefix=prefix, replicas=1, reactor=reactor, **options)
            for node, options in (("a", {"mailbox_size_limit": 1 << 20}), ("b", {})))
    await defer.gatherResults([a.ready(), b.ready()]).addTimeout(TIMEOUT, reactor)
    try:
        await a.mailbox("box").when_declared()
        got = []
        owner = Client("o", "malamute")
        b.connect(owner)
        b.mailbox("box").attach(owner, lambda box, m: got.append(m.id))
        await until(lambda: b.mailboxes["box"].consuming is not None, TIMEOUT,
                    "B consuming the mailbox A declared")
        a.mailbox("box").send(Message("m1", "s", (b"x",)))
        await until(lambda: got == ["m1"], TIMEOUT, "A's mail at B's owner", detail=lambda: got)
    finally:
        if a._declarer is not None:
            await a._declarer.queue_delete(a.mailboxes["box"].amqp_name)
        await defer.gatherResults([a.stop(), b.stop()])


@pytest_twisted.ensureDeferred
async def test_the_gateway_skips_a_node_that_does_not_answer(rabbitmq_node):
    """The first URL refuses connections: the engine says why (without the password)
    and connects to the next."""
    good = rabbitmq_node.urls()[0]
    dead = good.replace(f":{rabbitmq_node.nodes[0].amqp_port}/", f":{free_ports(1)[0]}/")
    engine = RabbitMQEngine(ReactorClock(task.Clock()), [dead, good], node="gw1",
                            prefix=f"skip-{uuid.uuid4().hex[:8]}.", replicas=1,
                            reactor=reactor)
    try:
        await engine.ready().addTimeout(TIMEOUT, reactor)
        assert engine.connection.url == good
    finally:
        await engine.stop()
    failures = []
    engine = RabbitMQEngine(ReactorClock(task.Clock()), [dead], node="gw1",
                            prefix="skip.", replicas=1, reactor=reactor)
    try:
        await until(lambda: engine.connection.failure, TIMEOUT, "the failure")
        failures.append(engine.connection.failure)
    finally:
        await engine.stop()
    assert failures[0].startswith("amqp://mqksbridge@127.0.0.1:")
    assert rabbitmq_node.password not in failures[0]


@pytest_twisted.ensureDeferred
async def test_a_gateway_with_users_checks_a_queue_put_before_sending_it(rabbitmq_node):
    """As core.guarded does: a publisher not allowed a queue (or a size) is Denied, and
    nothing of it reaches RabbitMQ; a stream's routing to that queue is not checked again."""
    engine = RabbitMQEngine(ReactorClock(task.Clock()), rabbitmq_node.urls(), node="g",
                            prefix=f"guarded-{uuid.uuid4().hex[:8]}.", replicas=1,
                            reactor=reactor, guarded=True)
    await engine.ready().addTimeout(TIMEOUT, reactor)
    try:
        secret = engine.queue("secret")
        public = engine.queue("public")
        bob = Client("bob", "mqks", principal=Principal(
            "bob", Rules(publish=["queue:public"]), {"max_message_size": 10}))
        sent = engine.storage.appended
        with pytest.raises(Denied):
            secret.put_message(Message("m0", "s", (b"x",)), publisher=bob)
        with pytest.raises(OverLimit):
            public.put_message(Message("m1", "s", (b"x" * 11,)), publisher=bob)
        assert engine.storage.appended == sent and secret.received == 0
        assert public.put_message(Message("m2", "s", (b"x",)), publisher=bob)
        assert secret.put_routed(Message("m3", "s", (b"x",)), None, bob)
        assert engine.storage.appended == sent + 2
        await idle(engine)
        assert (len(secret), len(public)) == (1, 1)
    finally:
        for name in ("secret", "public"):
            engine.delete_queue(name)
        await idle(engine)
        await engine.stop()


@pytest_twisted.ensureDeferred
async def test_a_message_amqp_cannot_carry_is_refused_and_never_holds_the_others(
        rabbitmq_node):
    """Text that is not UTF-8 (an MQKS event or header may be any bytes): a subject is
    refused before the publish takes its place in the confirmation order, a header value
    when pika cannot marshal it; either way the confirmations after it still come."""
    engine = RabbitMQEngine(ReactorClock(task.Clock()), rabbitmq_node.urls(), node="g",
                            prefix=f"utf8-{uuid.uuid4().hex[:8]}.", replicas=1,
                            reactor=reactor)
    await engine.ready().addTimeout(TIMEOUT, reactor)
    try:
        jobs = engine.queue("jobs")
        bad = "\udcff"                                    # a byte 0xff, surrogate-escaped
        verdicts = await defer.gatherResults([
            engine.publish(jobs, Message("m0", "s", (b"x",)), confirm=True),
            engine.publish(jobs, Message("m1", "s" + bad, (b"x",)), confirm=True),
            engine.publish(jobs, Message("m2", "s", (b"x",), {"h": bad}), confirm=True),
            engine.publish(jobs, Message("m3", "s", (b"x",)), confirm=True),
        ]).addTimeout(TIMEOUT, reactor)
        assert verdicts == [True, False, False, True]
        assert engine.counters["refused"] == 2
        await idle(engine)
        assert len(jobs) == 2
    finally:
        engine.delete_queue("jobs")
        await idle(engine)
        await engine.stop()


@pytest_twisted.ensureDeferred
async def test_a_nacked_publish_is_sent_again_and_taken_once_the_queue_can(rabbitmq_node):
    """RabbitMQ nacks a publish a quorum queue cannot take yet (one another gateway is
    still creating, one electing a leader) as it nacks one a full queue rejects: the
    engine sends it again (resend.DELAYS) before it counts as refused. Here the queue is
    full; once RabbitMQ nacked the publish the test takes a message out, and the publish
    is then taken and confirmed, not refused. A publish to a queue that stays full is
    refused after the last resend."""
    engine = RabbitMQEngine(ReactorClock(task.Clock()), rabbitmq_node.urls(), node="g",
                            prefix=f"resend-{uuid.uuid4().hex[:8]}.", replicas=1,
                            reactor=reactor)
    await engine.ready().addTimeout(TIMEOUT, reactor)
    plain = await threads.deferToThread(
        lambda: pika.BlockingConnection(pika.URLParameters(rabbitmq_node.urls()[0])).channel())
    engine.resends = Resends(reactor, engine._resend, delays=(0.1,) * 300)
    try:                                 # (30 s to take two messages out, not 0.75)
        jobs = engine.queue("jobs", max_messages=2)
        verdicts = await defer.gatherResults([
            engine.publish(jobs, Message(f"m{n}", "s", (b"x",)), confirm=True)
            for n in range(2)])
        assert verdicts == [True, True]
        verdict = engine.publish(jobs, Message("late", "s", (b"x",)), confirm=True)
        await until(lambda: engine.resends.tries, TIMEOUT, "RabbitMQ's nack")
        for _ in range(2):           # below its limit again (RabbitMQ's low watermark)
            taken = await threads.deferToThread(plain.basic_get, jobs.amqp_name, auto_ack=True)
            assert taken[2] == b"x"
        assert await verdict.addTimeout(TIMEOUT, reactor) is True
        assert engine.resends.resent >= 1 and not engine.resends.tries

        engine.resends = Resends(reactor, engine._resend)      # as configured
        full = engine.queue("full", max_messages=1)
        for n in range(10):          # until RabbitMQ tells the channel the queue is full
            resent = engine.resends.resent
            if not await engine.publish(full, Message(f"f{n}", "s", (b"x",)), confirm=True):
                break
        else:
            raise AssertionError("the full queue took every publish")
        assert engine.resends.resent - resent == len(DELAYS) and not engine.resends.tries
    finally:
        await threads.deferToThread(plain.connection.close)
        for name in ("jobs", "full"):
            engine.delete_queue(name)
        await idle(engine)
        await engine.stop()
