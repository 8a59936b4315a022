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
