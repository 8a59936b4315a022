"""Direct messages, events, routers and crossing to the MQKS door."""
import json
import struct

import pytest_twisted

from mqksbridge.protocols.twino.codec import ContentType as Op, MessageType
from tests.twino.helpers import make_queue, receive_all, update_queue


# -- direct messages -----------------------------------------------------------------------------

@pytest_twisted.ensureDeferred
async def test_direct_by_id_carries_the_sender(server):
    a, b = await server.twino(), await server.twino()
    await a.send_direct(b.client_id, b"hi", content_type=7, headers=[("K", "v")])
    frame = await b.recv(5)
    assert (frame.type, frame.source, frame.target, frame.content_type, frame.content) == (
        MessageType.DIRECT_MESSAGE, a.client_id, b.client_id, 7, b"hi")
    assert frame.header("K") == "v" and frame.ttl == 14      # relayed: 16 -> 15 -> client 14


@pytest_twisted.ensureDeferred
async def test_unknown_client_id_gets_404(server):
    a = await server.twino()
    await a.send_direct("nobody", b"x")
    answer = await a.recv(5)
    assert (answer.type, answer.content_type) == (MessageType.RESPONSE, 404)
    assert (await a.request("@name:nobody", b"x", timeout=5)).content_type == 404


@pytest_twisted.ensureDeferred
async def test_by_name_and_type_all_or_only_the_oldest(server):
    s = await server.twino()
    workers = [await server.twino(name="w", type="worker") for _ in range(3)]
    await s.send_direct("@name:w", b"all")
    for w in workers:
        assert (await w.recv(5)).content == b"all"
    await s.send_direct("@type:worker", b"first", first_acquirer=True)
    assert (await workers[0].recv(5)).content == b"first"
    await s.ping()
    for w in workers[1:]:
        await w.nothing()


@pytest_twisted.ensureDeferred
async def test_request_response_and_direct_ack(server):
    a, b = await server.twino(), await server.twino()
    pending = a.request(b.client_id, b"question", timeout=5)
    question = await b.recv(5)
    assert question.pending_response
    await b.respond(question, b"answer")
    answer = await pending
    assert (answer.message_id, answer.content_type, answer.content) == (
        question.message_id, 0, b"answer")
    pending = a.send_direct(b.client_id, b"ack me", wait_ack=True, high_priority=True, timeout=5)
    message = await b.recv(5)
    await b.ack(message)
    assert (await pending).ok


# -- events --------------------------------------------------------------------------------------

async def event(client, name):
    frame = await client.recv(5)
    assert frame.type == MessageType.EVENT and frame.source == name, frame
    assert frame.message_id is None
    return frame, json.loads(frame.content)


@pytest_twisted.ensureDeferred
async def test_client_connected_and_disconnected(server):
    watcher = await server.twino()
    assert await watcher.subscribe("ClientConnected") == 0
    assert await watcher.subscribe("ClientDisconnected") == 0
    other = await server.twino(name="o")
    _, data = await event(watcher, "ClientConnected")
    assert (data["Id"], data["Name"]) == (other.client_id, "o")
    await other.close()
    _, data = await event(watcher, "ClientDisconnected")
    assert data["Id"] == other.client_id
    assert await watcher.subscribe("ClientConnected", subscribe=False) == 0
    await server.twino()                      # connected: its event would be out already
    await watcher.nothing()


@pytest_twisted.ensureDeferred
async def test_join_leave_and_channel_events(server):
    watcher, other = await server.twino(), await server.twino()
    assert await watcher.subscribe("ChannelCreated") == 0
    assert await watcher.subscribe("ChannelRemoved") == 0
    assert (await other.operation(Op.CREATE_CHANNEL, "ev", [("Channel-Name", "ev")])
            ).content_type == 0
    _, data = await event(watcher, "ChannelCreated")
    assert data["Name"] == "ev"
    assert await watcher.subscribe("ClientJoined", "ev") == 0
    assert await watcher.subscribe("ClientLeft", "ev") == 0
    assert await other.join("ev") == 0
    frame, data = await event(watcher, "ClientJoined")
    assert frame.target == "ev" and data["ClientId"] == other.client_id
    assert await other.leave("ev") == 0
    await event(watcher, "ClientLeft")
    assert (await other.operation(Op.REMOVE_CHANNEL, "ev", [("Channel-Name", "ev")])
            ).content_type == 0
    await event(watcher, "ChannelRemoved")
    assert await watcher.subscribe("ClientJoined", "missing") == 1
    assert await watcher.subscribe("NoSuchEvent") == 1


@pytest_twisted.ensureDeferred
async def test_queue_events_and_message_produced(server):
    watcher, other = await server.twino(), await server.twino()
    await make_queue(other, "qe", 1001, "pull")
    for name in ("QueueCreated", "QueueUpdated", "QueueRemoved"):
        assert await watcher.subscribe(name, "qe") == 0
    await make_queue(other, "qe", 1002, "pull")
    frame, data = await event(watcher, "QueueCreated")
    assert (frame.target, data["Channel"], data["Id"], data["Status"]) == ("qe", "qe", 1002,
                                                                           "pull")
    assert await update_queue(other, "qe", 1002, MessageLimit=10) == 0
    await event(watcher, "QueueUpdated")
    assert await watcher.subscribe("MessageProduced", "qe", 1001) == 0
    await other.push("qe", 1001, b"x")
    frame, data = await event(watcher, "MessageProduced")
    assert (frame.target, frame.content_type, data["ProducerId"]) == ("qe", 1001,
                                                                      other.client_id)
    assert (await other.operation(Op.REMOVE_QUEUE, "qe", (), struct.pack("<H", 1002))
            ).content_type == 0
    _, data = await event(watcher, "QueueRemoved")
    assert data["Id"] == 1002


# -- routers -------------------------------------------------------------------------------------

async def router(c, name, method, *bindings):
    assert (await c.operation(Op.CREATE_ROUTER, name, [("Route-Method", str(method))])
            ).content_type == 0
    for i, (kind, target, ct, priority) in enumerate(bindings):
        binding = {"Name": f"b{i}", "Target": target, "ContentType": ct, "Priority": priority,
                   "Interaction": 0, "BindingType": kind, "Method": None}
        answer = await c.operation(Op.ADD_BINDING, name, (), json.dumps(binding).encode())
        assert answer.content_type == 0


@pytest_twisted.ensureDeferred
async def test_unknown_route_methods_are_refused(server):
    c = await server.twino()
    for method in ("3", "-1", "x"):
        answer = await c.operation(Op.CREATE_ROUTER, "bad-method", [("Route-Method", method)])
        assert answer.content_type == 400, method
    assert (await c.operation(Op.CREATE_ROUTER, "bad-method", [("Route-Method", "2")])
            ).content_type == 0


@pytest_twisted.ensureDeferred
async def test_distribute_router_reaches_queues_and_clients(server):
    p = await server.twino()
    q1, q2, d1, d2 = [await server.twino() for _ in range(4)]
    assert await q1.join("r1") == 0 and await q2.join("r2") == 0
    await router(p, "dist", 0, (1, "r1", 1, 0), (1, "r2", 1, 0), (0, d1.client_id, 5, 0),
                 (0, d2.client_id, 5, 0))
    assert (await p.publish_router("dist", b"x", wait_ack=True, timeout=5)).ok
    for c in (q1, q2, d1, d2):
        assert (await c.recv(5)).content == b"x"
    listed = json.loads((await p.operation(Op.LIST_BINDINGS, "dist")).content)
    assert len(listed) == 4


@pytest_twisted.ensureDeferred
async def test_round_robin_and_only_first_routers(server):
    p = await server.twino()
    consumers = [await server.twino() for _ in range(3)]
    for i, c in enumerate(consumers):
        await make_queue(p, f"rq{i}", 1, "push", ack=False)
        assert await c.join(f"rq{i}") == 0
    await router(p, "rr", 1, *[(1, f"rq{i}", 1, 0) for i in range(3)])
    for _ in range(5):
        await p.publish_router("rr", b"x")
    counts = sorted([len(await receive_all(c, p)) for c in consumers])
    assert counts == [1, 2, 2]
    await router(p, "of", 2, (1, "rq0", 1, 1), (1, "rq2", 1, 9))
    await p.publish_router("of", b"top")
    assert (await consumers[2].recv(5)).content == b"top"
    await consumers[0].nothing()


@pytest_twisted.ensureDeferred
async def test_router_to_offline_direct_binding_fails(server):
    p = await server.twino()
    await router(p, "gone", 0, (0, "offline-client", 0, 0))
    result = await p.publish_router("gone", b"x", wait_ack=True, timeout=5)
    assert not result.ok


@pytest_twisted.ensureDeferred
async def test_tag_binding_reaches_every_queue_with_a_matching_tag(server):
    p = await server.twino()
    members = [await server.twino() for _ in range(3)]
    for c, (channel, queue_id, tag) in zip(members, (("ta", 1, "eu-orders"),
                                                     ("tb", 7, "us-orders"),
                                                     ("tc", 1, "billing"))):
        await make_queue(p, channel, queue_id, "push", tag=tag, ack=False)
        assert await c.join(channel) == 0
    mqks = await server.mqks()                       # another door on a tagged queue
    assert (await mqks.request("m consume --confirm tb/7 ev")).startswith("m ok")
    await router(p, "tags", 0, (3, "*orders", 0, 0))
    assert (await p.publish_router("tags", b"order-1", wait_ack=True, timeout=5)).ok
    got = [await c.recv(5) for c in members[:2]]
    assert [(f.type, f.target, f.content_type, f.content) for f in got] == [
        (MessageType.QUEUE_MESSAGE, "ta", 1, b"order-1"),
        (MessageType.QUEUE_MESSAGE, "tb", 7, b"order-1")]
    assert got[0].message_id == got[1].message_id
    line = await mqks.line(5)
    assert line.endswith(" order-1") and "origin=twino" in line
    await members[2].nothing()
    await router(p, "untagged", 0, (3, "nothing*", 0, 0))
    refused = await p.publish_router("untagged", b"x", wait_ack=True, timeout=5)
    assert not refused.ok and refused.reason == "no-consumers"
    for kind, target, code in ((2, "http://127.0.0.1:1/", 406), (3, "", 400)):
        binding = {"Name": "bad", "Target": target, "ContentType": 0, "Priority": 0,
                   "Interaction": 0, "BindingType": kind, "Method": None}
        answer = await p.operation(Op.ADD_BINDING, "tags", (), json.dumps(binding).encode())
        assert answer.content_type == code


# -- crossing doors ------------------------------------------------------------------------------

@pytest_twisted.ensureDeferred
async def test_mqks_consumer_of_c_n_receives_a_twino_push(server):
    m = await server.mqks()
    assert await m.request("c1 consume --confirm jobs/1 unused") == "c1 ok "
    p = await server.twino()
    await p.push("jobs", 1, b"from-twino", headers=[("Subject", "job.created")])
    line = await m.line(5)
    assert line.startswith("c1 ok ") and line.endswith(" from-twino")
    assert "event=job.created" in line and "origin=twino" in line


@pytest_twisted.ensureDeferred
async def test_twino_consumer_receives_an_mqks_publish_bound_by_rebind(server):
    c = await server.twino()
    assert await c.join("feed") == 0
    await c.operation(Op.CREATE_QUEUE, "feed", [("Channel-Name", "feed"), ("Queue-Id", "1"),
                                                 ("Queue-Status", "push")])
    m = await server.mqks()
    m.send("r1 rebind feed/1 --add news")
    assert await m.request("p0 ping sync") == "p0 ok sync"
    m.send("m1 publish news hello-from-mqks")
    frame = await c.recv(5)
    assert (frame.target, frame.content_type, frame.content) == ("feed", 1, b"hello-from-mqks")
    assert frame.message_id == "m1" and frame.header("Subject") == "news"
    assert frame.header("X-Origin") == "mqks" and frame.pending_ack
    await c.ack(frame)
    await c.ping()                            # the ack handled
    assert server.broker.queues["feed/1"].consumers[0].unacked == {}
