"""Server operations 601-631: channels, queues, lists, and the upstream bugs we do not copy."""
import json
import struct

import pytest_twisted

from mqksbridge.protocols.twino.codec import ContentType as Op
from tests.conftest import RunningBroker
from tests.twino.helpers import make_queue, options_json, update_queue


def body(answer):
    return json.loads(answer.content)


@pytest_twisted.ensureDeferred
async def test_join_and_leave(server):
    c = await server.twino()
    assert await c.join("ch") == 0
    assert await c.join("ch") == 0                       # joining twice is fine
    assert len(server.broker.channels["ch"].members) == 1
    assert await c.leave("ch") == 0
    assert await c.leave("ch") == 404
    assert await c.leave("nowhere") == 404
    assert server.broker.channels["ch"].members == {}


@pytest_twisted.ensureDeferred
async def test_join_without_waiting_for_the_response(server):
    c = await server.twino()
    assert await c.join("quiet", wait_response=False) is None
    await c.ping()
    assert c.client_id in server.broker.channels["quiet"].members


@pytest_twisted.ensureDeferred
async def test_channel_create_info_list_remove(server):
    c = await server.twino(type="client-test")
    made = await c.operation(Op.CREATE_CHANNEL, "ch-push", [("Channel-Name", "ch-push")],
                             options_json(only_first=True, ack_timeout=33000))
    assert made.content_type == 0
    assert (await c.operation(Op.CREATE_CHANNEL, "ch-push",
                              [("Channel-Name", "ch-push")])).content_type == 481
    info = await c.operation(Op.CHANNEL_INFORMATION, "ch-push")
    assert body(info)["Name"] == "ch-push" and body(info)["AcknowledgeTimeout"] == 33000
    for pattern in (None, "ch-push", "*h-pu*", "ch-*", "*push"):
        headers = [("Channel-Name", pattern)] if pattern else []
        listed = await c.operation(Op.CHANNEL_LIST, None, headers)
        assert [ch["Name"] for ch in body(listed)] == ["ch-push"]
    clients = await c.operation(Op.CLIENT_LIST, "*client*")
    assert [x["Type"] for x in body(clients)] == ["client-test"]
    assert (await c.operation(Op.REMOVE_CHANNEL, "ch-push",
                              [("Channel-Name", "ch-push")])).content_type == 0
    assert "ch-push" not in server.broker.channels
    assert (await c.operation(Op.CHANNEL_INFORMATION, "ch-push")).content_type == 404


@pytest_twisted.ensureDeferred
async def test_channel_options_reach_new_queues(server):
    c = await server.twino()
    made = await c.operation(Op.CREATE_CHANNEL, "opt", [("Channel-Name", "opt")],
                             b'{"AllowMultipleQueues":false,"SendOnlyFirstAcquirer":true,'
                             b'"AcknowledgeTimeout":33000,"Status":3}')
    assert made.content_type == 0
    await make_queue(c, "opt", 1, "pull")
    queue = server.broker.queues["opt/1"]
    assert (queue.only_first, queue.ack_timeout, queue.mode) == (True, 33.0, "pull")
    refused = await c.operation(Op.CREATE_QUEUE, "opt", [("Channel-Name", "opt"),
                                                         ("Queue-Id", "2")])
    assert refused.content_type == 401 and "opt/2" not in server.broker.queues


@pytest_twisted.ensureDeferred
async def test_bad_channel_name_is_an_error_response_not_a_drop(server):
    c = await server.twino()
    answer = await c.operation(Op.CREATE_CHANNEL, "bad name", [("Channel-Name", "bad name")])
    assert answer.content_type == 400
    assert await c.join("a@b") == 400
    assert await c.join("fine") == 0


@pytest_twisted.ensureDeferred
async def test_create_queue_without_queue_id_creates_nothing(server):
    c = await server.twino()
    answer = await c.operation(Op.CREATE_QUEUE, "nq", [("Channel-Name", "nq")])
    assert answer.content_type == 406
    assert not any(name.startswith("nq/") for name in server.broker.queues)
    await c.nothing()                                     # and no second answer


@pytest_twisted.ensureDeferred
async def test_queue_options_apply_in_an_existing_channel(server):
    c = await server.twino()
    assert await c.join("exists") == 0
    await make_queue(c, "exists", 3, "pull", only_first=True, ack_timeout=33000)
    queue = server.broker.queues["exists/3"]
    assert (queue.mode, queue.only_first, queue.ack_timeout) == ("pull", True, 33.0)
    again = await c.operation(Op.CREATE_QUEUE, "exists", [("Channel-Name", "exists"),
                                                          ("Queue-Id", "3")])
    assert again.content_type == 481


@pytest_twisted.ensureDeferred
async def test_update_info_list_clear_remove_queue(server):
    c = await server.twino()
    await make_queue(c, "q", 1001, "pull", tag="t1")
    assert await update_queue(c, "q", 1001, WaitForAcknowledge=True, MessageTimeout=666000,
                              SendOnlyFirstAcquirer=True) == 0
    for i in range(4):
        await c.push("q", 1001, b"%d" % i, high_priority=i % 2 == 0)
    info = body(await c.operation(Op.QUEUE_INFORMATION, "q", (), struct.pack("<H", 1001)))
    assert (info["Channel"], info["Id"], info["TagName"], info["Status"]) == (
        "q", 1001, "t1", "pull")
    assert (info["WaitForAcknowledge"], info["MessageTimeout"], info["OnlyFirstAcquirer"]) == (
        True, 666000, True)
    assert (info["PriorityMessages"], info["Messages"]) == (2, 2)
    listed = body(await c.operation(Op.QUEUE_LIST, "q"))
    assert [q["Id"] for q in listed] == [1001]
    cleared = await c.operation(Op.CLEAR_MESSAGES, "q", [("Channel-Name", "q"),
                                                         ("Queue-Id", "1001"),
                                                         ("Priority-Messages", "yes")])
    assert cleared.content_type == 0
    queue = server.broker.queues["q/1001"]
    assert (len(queue.priority), len(queue.entries)) == (0, 2)
    assert (await c.operation(Op.REMOVE_QUEUE, "q", (), struct.pack("<H", 1001))).content_type == 0
    assert "q/1001" not in server.broker.queues
    assert (await c.operation(Op.REMOVE_QUEUE, "q", (), struct.pack("<H", 1001))).content_type \
        == 404
    assert await update_queue(c, "q", 1001, Status=1) == 404


@pytest_twisted.ensureDeferred
async def test_status_change_takes_effect_for_members(server):
    p, c = await server.twino(), await server.twino()
    await make_queue(p, "live", 1, "pull", ack=False)
    assert await c.join("live") == 0
    await p.push("live", 1, b"waiting")
    await p.ping()
    await c.nothing()
    assert await update_queue(p, "live", 1, Status=1) == 0
    assert (await c.recv(5)).content == b"waiting"


@pytest_twisted.ensureDeferred
async def test_instance_and_consumer_lists(server):
    c = await server.twino(name="me")
    assert await c.join("m") == 0
    nodes = body(await c.operation(Op.INSTANCE_LIST))
    assert len(nodes) == 1 and nodes[0]["Name"] == "mqksbridge" and nodes[0]["IsConnected"]
    members = body(await c.operation(Op.CHANNEL_CONSUMERS, "m"))
    assert [(x["Id"], x["Name"]) for x in members] == [(c.client_id, "me")]


@pytest_twisted.ensureDeferred
async def test_admin_operations_need_allow_admin():
    running = await RunningBroker({"twino": {"allow_admin": False}}).start()
    try:
        c = await running.twino()
        assert await c.join("ch") == 0
        assert (await c.operation(Op.CHANNEL_LIST)).content_type == 401
        assert (await c.operation(Op.CLIENT_LIST)).content_type == 401
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_auto_create_off_gives_404(server):
    running = await RunningBroker({"twino": {"auto_create_channels": False}}).start()
    try:
        c = await running.twino()
        assert await c.join("none") == 404
    finally:
        await running.stop()


def sweeps(running):
    """A few broker sweeps (sweep_interval 0.1) on the broker's clock."""
    running.advance(0.3)


@pytest_twisted.ensureDeferred
async def test_destroy_when_empty_waits_for_messages_and_consumers_of_every_door():
    running = await RunningBroker({"broker": {"sweep_interval": 0.1}}).start()
    try:
        c = await running.twino()
        for name, destroy in (("dwe", True), ("keep", False)):
            made = await c.operation(Op.CREATE_CHANNEL, name, [("Channel-Name", name)],
                                     json.dumps({"DestroyWhenEmpty": destroy}).encode())
            assert made.content_type == 0
            await make_queue(c, name, 1, "push", ack=False)
        info = await c.operation(Op.CHANNEL_INFORMATION, "dwe")
        assert body(info)["DestroyWhenEmpty"] is True
        await c.push("dwe", 1, b"waiting")           # no member: the push-all queue keeps it
        await c.ping()
        sweeps(running)
        assert "dwe" in running.broker.channels       # a message is still in it
        mqks = await running.mqks()
        assert (await mqks.request("m consume --confirm dwe/1 ev")).startswith("m ok")
        assert (await mqks.line()).endswith(" waiting")
        sweeps(running)
        assert "dwe" in running.broker.channels       # empty, but an MQKS consumer is on it
        assert await c.join("dwe") == 0
        assert await mqks.request("d delete_consumer --confirm m") == "d ok "
        sweeps(running)
        assert "dwe" in running.broker.channels       # a Twino member is in it
        assert await c.leave("dwe") == 0
        sweeps(running)
        assert "dwe" not in running.broker.channels and "dwe/1" not in running.broker.queues
        assert (await c.operation(Op.CHANNEL_INFORMATION, "dwe")).content_type == 404
        assert "keep" in running.broker.channels      # empty too, but never asked
    finally:
        await running.stop()
