"""The cluster engine on a real 3-node RabbitMQ cluster: a node dies under a gateway and
nothing confirmed is lost.

The gateway's engine is connected to node 1 and holds deliveries unacked when node 1 is
killed (SIGKILL, as a machine that dies): it reconnects to the next node of its list,
every message RabbitMQ confirmed and the gateway never settled is handed out from the
surviving nodes (quorum queues on three replicas), and nothing it acked comes back.

What its consumer held unacked through node 1 is not judged here: RabbitMQ 3.10.8 keeps
it checked out by the dead node's consumer (the queue counts it unacked, a ghost consumer
among its consumers), and did not hand it out again within a minute of node 1's return
either; docs/cluster.md says so."""
import uuid

import pytest_twisted
from twisted.internet import defer, reactor, task, threads

from mqksbridge.bridge.clock import ReactorClock
from mqksbridge.bridge.engine import Client, Consumer, Message
from mqksbridge.bridge.engine.rabbitmq import RabbitMQEngine
from tests.support.waits import until

TIMEOUT = 60.0


async def idle(engine):
    """Every confirm in, no consume or cancel in flight, deliveries arrived."""
    await until(lambda: not engine.busy(), TIMEOUT, "the engine idle")
    await engine.barrier()


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
    retry + 1; a publish while it is away is refused (confirmed False), not lost silently."""
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
        refused = []
        engine.publish(jobs, Message("away", "s", (b"x",)), confirm=True).addCallback(
            refused.append)
        assert refused == [False]
        await until(lambda: engine.ready().called, TIMEOUT, "the engine connected again")
        await until(lambda: len(got) == 5, TIMEOUT, "m1 and m2 again", detail=lambda: got)
        assert sorted(got[3:]) == [("m1", 1), ("m2", 1)]
        assert sorted(worker.unacked) == ["m1", "m2"]
        assert engine.settle(worker, "m1") and engine.settle(worker, "m2")
        await idle(engine)
        assert len(jobs) == 0 and len(got) == 5
    finally:
        declarer = engine._declarer
        if declarer is not None:
            await declarer.queue_delete(engine.names.queue("jobs"))
        await engine.stop()
