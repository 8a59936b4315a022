"""Admin actions over HTTP against a live broker: purge, pause/resume, delete, move (and the
dead-letter requeue routed to it), closing a connection with its door's goodbye; and the
sampler's rates on an injected clock."""
import pytest_twisted
from twisted.internet import task
from twisted.internet.threads import deferToThread

from mqksbridge.bridge.admin.sampler import Sampler
from mqksbridge.protocols.twino.codec import MessageType
from tests.support.admin import aget, validate


async def backlog(server, queue, count, event="ev"):
    """`count` messages waiting in `queue` (bound to `event`, no consumer)."""
    client = await server.mqks()
    assert await client.request(f"b1 consume --confirm {queue} {event}") == "b1 ok "
    assert await client.request("b2 delete_consumer --confirm b1") == "b2 ok "
    client.send(*(f"m{i} publish {event} body{i}" for i in range(count)))
    assert await client.request("p1 ping x") == "p1 ok x"
    return client


@pytest_twisted.ensureDeferred
async def test_purge_and_delete(server):
    await backlog(server, "q1", 5)
    port = server.port("admin")
    assert (await aget(port, "/api/queues/q1"))["depth"] == 5
    purged = await aget(port, "/api/queues/q1/purge", "POST", {})
    validate(purged, "Purged")
    assert purged == {"queue": "q1", "purged": 5}
    assert (await aget(port, "/api/queues/q1"))["depth"] == 0
    deleted = await aget(port, "/api/queues/q1", "DELETE", {})
    validate(deleted, "Deleted")
    assert "q1" not in server.broker.queues
    await aget(port, "/api/queues/q1", "DELETE", {}, expect=404)


@pytest_twisted.ensureDeferred
async def test_pause_holds_deliveries_until_resume(server):
    port = server.port("admin")
    consumer, publisher = await server.mqks(), await server.mqks()
    assert await consumer.request("c1 consume --confirm q2 ev") == "c1 ok "
    paused = await aget(port, "/api/queues/q2/pause", "POST", {})
    validate(paused, "Mode")
    assert paused["mode"] == "paused"
    publisher.send("m1 publish ev one", "m2 publish ev two")
    assert await publisher.request("p1 ping x") == "p1 ok x"
    await consumer.nothing()
    assert (await aget(port, "/api/queues/q2"))["depth"] == 2
    resumed = await aget(port, "/api/queues/q2/resume", "POST", {})
    assert resumed["mode"] == "round-robin"
    assert await consumer.lines_n(2) == ["c1 ok m1 event=ev one", "c1 ok m2 event=ev two"]


@pytest_twisted.ensureDeferred
async def test_move_and_requeue_dead_letters(server):
    port = server.port("admin")
    await backlog(server, "work.dlq", 3, event="dead")
    consumer = await server.mqks()
    assert await consumer.request("c1 consume --confirm work ev") == "c1 ok "
    moved = await aget(port, "/api/queues/work/requeue-dead", "POST", {})
    validate(moved, "Moved")
    assert moved == {"from": "work.dlq", "to": "work", "moved": 3, "refused": 0}
    lines = await consumer.lines_n(3)
    assert [line.rsplit(" ", 1)[1] for line in lines] == ["body0", "body1", "body2"]
    assert (await aget(port, "/api/queues/work.dlq"))["depth"] == 0
    await backlog(server, "a", 2, event="ea")
    await backlog(server, "b", 1, event="eb")
    moved = await aget(port, "/api/queues/a/move", "POST", {"to": "b"})
    assert moved["moved"] == 2
    assert server.broker.queues["b"].bytes == sum(
        e.message.size for e in server.broker.queues["b"].entries)
    assert [e.message.body for e in server.broker.queues["b"].entries] == [
        b"body0", b"body0", b"body1"]
    await aget(port, "/api/queues/a/move", "POST", {"to": "nowhere"}, expect=404)


@pytest_twisted.ensureDeferred
async def test_close_connection_uses_each_doors_goodbye(server):
    port = server.port("admin")
    mqks = await server.mqks()
    twino = await server.twino(name="closing")
    assert await mqks.request("p1 ping x") == "p1 ok x"
    items = (await aget(port, "/api/connections"))["items"]
    ids = {c["door"]: c["id"] for c in items}
    closed = await aget(port, f"/api/connections/{ids['mqks']}/close", "POST", {})
    validate(closed, "Closed")
    await mqks.closed
    await aget(port, f"/api/connections/{ids['twino']}", "DELETE", {})
    frame = await deferToThread(twino.client.recv_frame, 5)
    assert frame is not None and frame.type == MessageType.TERMINATE
    await aget(port, f"/api/connections/{ids['twino']}", expect=404)


@pytest_twisted.ensureDeferred
async def test_rates_are_counter_deltas_per_sampled_second(server):
    """The sampler on an injected clock: 4 publishes between two samples 2 s apart are
    2 messages/s in (door, queue, stream) and out, and the flow mqks -> mqks."""
    clock = task.Clock()
    sampler = Sampler(server.broker, server.doors, clock)
    consumer, publisher = await server.mqks(), await server.mqks()
    assert await consumer.request("c1 consume --confirm r ev") == "c1 ok "
    sampler.sample()
    assert sampler.door_rates == {}
    publisher.send(*(f"m{i} publish ev x" for i in range(4)))
    await consumer.lines_n(4)
    clock.advance(2)
    sampler.sample()
    assert sampler.door_rates["mqks"]["messages_in"] == 2.0
    assert sampler.door_rates["mqks"]["messages_out"] == 2.0
    assert sampler.door_rates["twino"]["messages_in"] == 0.0
    assert sampler.queue_rates["r"] == {"publish": 2.0, "deliver": 2.0, "ack": 0.0}
    assert sampler.stream_rates["mqks"] == {"publish": 2.0}
    assert sampler.flow_rates["mqks", "mqks"] == 2.0
    assert list(sampler.history["mqks"]) == [(clock.seconds(), 2.0, 2.0)]


def test_a_sample_sums_a_slice_of_connections_per_reactor_turn():
    """With 5,000 connections one pass over them held the reactor 1.7-2.3 ms each second,
    the soak's longest turns: the sampler sums SLICE connections per turn, and what it
    found is what the overview shows until the next pass."""
    from mqksbridge.bridge.admin import sampler as sampler_module
    from mqksbridge.bridge.traffic import DoorTraffic
    from mqksbridge.core import Broker

    class Door:
        traffic = DoorTraffic("mqks", lambda: 0.0)

    clock = task.Clock()
    door = Door()
    conns = [door.traffic.open(("peer", i), None, None, None, input=object())
             for i in range(2 * sampler_module.SLICE + 1)]
    for t in conns:
        t.own = 1
    sampler = sampler_module.Sampler(Broker(clock), {"mqks": door}, clock)
    sampler.sample()
    slice_ = sampler_module.SLICE
    assert sampler.door_totals == {} and sampler._pass[1]["mqks"].at == slice_
    calls = clock.getDelayedCalls()
    assert [c.getTime() for c in calls] == [0.0]       # the next slice: the next turn
    clock.advance(0)                                   # (task.Clock runs them all now)
    assert sampler._pass is None
    assert sampler.totals("mqks", door)["messages_out"] == len(conns)
    conns[0].own += 5                                  # counted at the next pass
    assert sampler.totals("mqks", door)["messages_out"] == len(conns)
    door.traffic.close(conns[1])                       # connection counts are read live
    assert sampler.totals("mqks", door)["connections"] == len(conns) - 1

