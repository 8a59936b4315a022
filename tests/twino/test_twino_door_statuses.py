"""Queue statuses, acks and options (specs/twino.md, "Broker semantics": statuses, acks,
operations, and the upstream behaviours labelled B1 to B10 there)."""
import pytest
import pytest_twisted

from mqksbridge.protocols.twino.codec import Frame, MessageType, new_id
from tests.conftest import RunningBroker
from tests.twino.helpers import make_queue, receive_all, update_queue


async def clients(server, n):
    return [await server.twino() for _ in range(n)]


@pytest_twisted.ensureDeferred
async def test_auto_created_queue_has_the_real_defaults(server):
    p = await server.twino()
    await p.push("auto", 7, b"x")
    await p.ping()
    queue = server.broker.queues["auto/7"]
    state = queue.attrs["twino"]
    assert (queue.mode, state.request_ack, queue.ack_timeout, state.use_message_id) == (
        "push-all", True, 15.0, True)
    assert len(queue) == 1 and server.broker.channels["auto"].queues[7] is queue


@pytest_twisted.ensureDeferred
async def test_broadcast_without_members_is_dropped_and_not_kept(server):
    p, late = await clients(server, 2)
    await make_queue(p, "bc", 1, "broadcast", ack=False)
    await p.push("bc", 1, b"lost")
    await p.ping()
    assert len(server.broker.queues["bc/1"]) == 0
    assert await late.join("bc") == 0
    await late.nothing()


@pytest_twisted.ensureDeferred
async def test_broadcast_with_ack_and_no_members_nacks_the_producer(server):
    p = await server.twino()
    await make_queue(p, "bc", 1, "broadcast", ack=True)
    result = await p.push("bc", 1, b"x", wait_ack=True, timeout=5)
    assert not result.ok and result.reason == "no-consumers"


@pytest.mark.parametrize("members", [1, 5, 20])
@pytest_twisted.ensureDeferred
async def test_broadcast_reaches_every_online_member_once(server, members):
    p = await server.twino()
    await make_queue(p, "bc", 1, "broadcast", ack=False)
    consumers = await clients(server, members)
    for c in consumers:
        assert await c.join("bc") == 0
    await p.push("bc", 1, b"all")
    got = [await receive_all(c, p) for c in consumers]
    assert all([f.content for f in frames] == [b"all"] for frames in got)
    assert sum(f.first_acquirer for frames in got for f in frames) == 1


@pytest.mark.parametrize("members", [1, 2, 5])
@pytest_twisted.ensureDeferred
async def test_push_is_kept_for_a_late_member_then_reaches_all(server, members):
    p = await server.twino()
    await p.push("ps", 1, b"stored")
    await p.ping()
    consumers = await clients(server, members)
    assert await consumers[0].join("ps") == 0
    assert (await consumers[0].recv(5)).content == b"stored"
    for c in consumers[1:]:
        assert await c.join("ps") == 0
    await p.push("ps", 1, b"live")
    for c in consumers:
        frame = await c.recv(5)
        assert frame.content == b"live" and frame.target == "ps" and frame.content_type == 1
        await c.ack(frame)
    assert len(server.broker.queues["ps/1"]) == 0


@pytest_twisted.ensureDeferred
async def test_relayed_consumer_ack_reaches_the_producer(server):
    p, c1, c2 = await clients(server, 3)
    for c in (c1, c2):
        assert await c.join("rel") == 0
    pending = p.push("rel", 1, b"x", wait_ack=True, timeout=5)
    f1, f2 = await c1.recv(5), await c2.recv(5)
    assert f1.pending_ack and f2.pending_ack and f1.first_acquirer != f2.first_acquirer
    await c2.ack(f2)
    result = await pending
    assert result.ok and result.frame.source == c2.client_id and result.frame.target == "rel"
    await c1.ack(f1)
    await c1.ping()                         # the second ack handled too
    await p.nothing()                       # only one producer ack per message


@pytest_twisted.ensureDeferred
async def test_nack_reason_is_relayed(server):
    p, c = await clients(server, 2)
    assert await c.join("nk") == 0
    pending = p.push("nk", 1, b"x", wait_ack=True, timeout=5)
    await c.nack(await c.recv(5), "busy")
    result = await pending
    assert not result.ok and result.reason == "busy"


@pytest_twisted.ensureDeferred
async def test_producer_can_consume_and_ack_its_own_push(server):
    c = await server.twino()
    assert await c.join("self") == 0
    push = Frame(MessageType.QUEUE_MESSAGE, pending_ack=True, message_id=new_id(),
                 source=c.client_id, target="self", content_type=1, content=b"me")
    await c.send_frame(push)
    delivery = await c.recv(5)
    assert delivery.source == c.client_id and delivery.message_id == push.message_id
    await c.ack(delivery)
    ack = await c.recv(5)
    assert ack.type == MessageType.ACKNOWLEDGE and ack.message_id == push.message_id
    assert ack.header("Nack-Reason") is None


@pytest.mark.parametrize("status", ["broadcast", "push", "round-robin"])
@pytest_twisted.ensureDeferred
async def test_without_consumer_acks_the_relay_policy_has_nothing_to_relay(server, status):
    p, c = await clients(server, 2)
    await make_queue(p, "na", 1, status, ack=False)
    assert await c.join("na") == 0
    await p.send_frame(Frame(MessageType.QUEUE_MESSAGE, pending_ack=True, message_id=new_id(),
                             target="na", content_type=1, content=b"x"))
    frame = await c.recv(5)
    assert not frame.pending_ack
    await p.nothing()                       # no ack came, nor will: nothing to relay


@pytest_twisted.ensureDeferred
async def test_received_policy_acks_at_once_and_keeps_the_message():
    running = await RunningBroker({"twino": {"producer_ack": [["fast/*", "received"]]}}).start()
    try:
        p, c = await clients(running, 2)
        result = await p.push("fast", 1, b"kept", wait_ack=True, timeout=5)
        assert result.ok and result.frame.source is None and result.frame.ttl == 15
        assert await c.join("fast") == 0
        assert (await c.recv(5)).content == b"kept"
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_sent_policy_acks_once_delivered(server):
    p, c = await clients(server, 2)
    await make_queue(p, "snt", 1, "push", handler="sent")
    assert await c.join("snt") == 0
    result = await p.push("snt", 1, b"x", wait_ack=True, timeout=5)
    assert result.ok
    assert (await c.recv(5)).content == b"x"


@pytest_twisted.ensureDeferred
async def test_only_first_acquirer_gives_one_member_the_message(server):
    p, *members = await clients(server, 4)
    await make_queue(p, "one", 1, "push", only_first=True, ack=False)
    for c in members:
        assert await c.join("one") == 0
    await p.push("one", 1, b"x")
    got = [await receive_all(c, p) for c in members]
    assert sorted(len(g) for g in got) == [0, 0, 1]


@pytest_twisted.ensureDeferred
async def test_only_first_acquirer_with_late_joiners(server):
    p, *members = await clients(server, 4)
    await make_queue(p, "one", 2, "push", only_first=True, ack=False)
    await p.push("one", 2, b"x")
    await p.ping()
    for c in members:
        assert await c.join("one") == 0
    got = [await receive_all(c) for c in members]
    assert sorted(len(g) for g in got) == [0, 0, 1]


@pytest.mark.parametrize("hide", [True, False])
@pytest_twisted.ensureDeferred
async def test_hide_client_names(server, hide):
    p, c = await clients(server, 2)
    await make_queue(p, "hd", 1, "push", hide=hide)
    assert await c.join("hd") == 0
    pending = p.push("hd", 1, b"x", wait_ack=True, timeout=5)
    frame = await c.recv(5)
    assert frame.target == "hd" and (frame.source is None) == hide
    await c.ack(frame)
    result = await pending
    assert result.ok and (result.frame.source is None) == hide


@pytest.mark.parametrize("members", [1, 2, 5])
@pytest_twisted.ensureDeferred
async def test_round_robin_spreads_fifty_messages(server, members):
    p, *consumers = await clients(server, members + 1)
    await make_queue(p, "rr", 1, "round-robin", ack=False)
    for i in range(10):
        await p.push("rr", 1, b"early-%d" % i)
    await p.ping()
    for c in consumers:
        assert await c.join("rr") == 0
    for i in range(40):
        await p.push("rr", 1, b"%d" % i)
    got = [await receive_all(c, p) for c in consumers]
    assert sum(len(g) for g in got) == 50
    assert max(len(g) for g in got) - min(len(g) for g in got) <= 10


@pytest_twisted.ensureDeferred
async def test_priority_messages_are_delivered_first(server):
    p, c = await clients(server, 2)
    await make_queue(p, "pr", 1, "push", ack=False)
    await p.push("pr", 1, b"regular")
    await p.push("pr", 1, b"urgent", high_priority=True)
    await p.ping()
    assert await c.join("pr") == 0
    assert [f.content for f in await receive_all(c)] == [b"urgent", b"regular"]


@pytest_twisted.ensureDeferred
async def test_wait_for_acknowledge_holds_the_next_message(server):
    p, c = await clients(server, 2)
    await make_queue(p, "wa", 1, "round-robin", wait=True)
    assert await c.join("wa") == 0
    await p.push("wa", 1, b"1")
    await p.push("wa", 1, b"2")
    first = await c.recv(5)
    await p.ping()                          # the second push is in the queue
    await c.nothing()
    await c.ack(first)
    assert (await c.recv(5)).content == b"2"


@pytest_twisted.ensureDeferred
async def test_ack_timeout_nacks_the_producer(server):
    p, c = await clients(server, 2)
    await make_queue(p, "to", 1, "push", ack_timeout=500)
    assert await c.join("to") == 0
    pending = p.push("to", 1, b"x", wait_ack=True, timeout=10)
    assert (await c.recv(5)).pending_ack
    server.advance(1)                       # the sweep after the 500 ms ack timeout
    result = await pending
    assert not result.ok and result.reason == "timeout"


@pytest_twisted.ensureDeferred
async def test_message_limits_refuse_pushes(server):
    p = await server.twino()
    await make_queue(p, "lim", 1, "pull", limit=1, size_limit=10)
    await p.push("lim", 1, b"ok")
    refused = await p.push("lim", 1, b"two", wait_ack=True, timeout=5)
    assert not refused.ok and refused.reason == "full"
    assert len(server.broker.queues["lim/1"]) == 1
    assert await update_queue(p, "lim", 1, MessageLimit=0) == 0
    big = await p.push("lim", 1, b"x" * 11, wait_ack=True, timeout=5)
    assert not big.ok and big.reason == "too-large"


@pytest_twisted.ensureDeferred
async def test_stopped_queue_answers_401_and_paused_keeps_until_resumed(server):
    p, c = await clients(server, 2)
    await make_queue(p, "st", 1, "stopped", ack=False)
    await p.push("st", 1, b"x")
    answer = await p.recv(5)
    assert (answer.type, answer.content_type, answer.target) == (0x14, 401, "st")
    await make_queue(p, "st", 2, "paused", ack=False)
    assert await c.join("st") == 0
    await p.push("st", 2, b"held")
    await p.ping()
    await c.nothing()
    assert await update_queue(p, "st", 2, Status=1) == 0
    assert (await c.recv(5)).content == b"held"


@pytest_twisted.ensureDeferred
async def test_status_numbers_follow_the_stock_client(server):
    p = await server.twino()
    await make_queue(p, "num", 1, "push")
    assert await update_queue(p, "num", 1, Status=4) == 0        # the client's "Paused"
    assert server.broker.queues["num/1"].mode == "paused"
    assert await update_queue(p, "num", 1, Status=5) == 0
    assert server.broker.queues["num/1"].mode == "stopped"


@pytest_twisted.ensureDeferred
async def test_cache_keeps_only_the_latest_and_refuses_pulls(server):
    p = await server.twino()
    await make_queue(p, "ca", 1, "cache", ack=False)
    for body in (b"a", b"b", b"c"):
        await p.push("ca", 1, body)
    await p.ping()
    queue = server.broker.queues["ca/1"]
    assert [e.message.body for e in queue.entries] == [b"c"]
    assert await p.join("ca") == 0
    with pytest.raises(Exception, match="Unacceptable"):
        await p.pull("ca", 1, 1)


@pytest_twisted.ensureDeferred
async def test_message_ids_are_filled_in_only_when_use_message_id(server):
    p, c = await clients(server, 2)
    await make_queue(p, "ids", 1, "push", ack=False)
    await make_queue(p, "ids", 2, "push", ack=False)
    assert await update_queue(p, "ids", 2, UseMessageId=False) == 0
    assert await c.join("ids") == 0
    for qid in (1, 2):
        await p.send_frame(Frame(MessageType.QUEUE_MESSAGE, target="ids", content_type=qid,
                                 content=b"anon"))
    first, second = await c.recv(5), await c.recv(5)
    assert len(first.message_id) == 32 and second.message_id is None


@pytest_twisted.ensureDeferred
async def test_cc_copies_go_to_other_queues_under_their_own_names(server):
    p, a, b = await clients(server, 3)
    assert await a.join("orig") == 0
    assert await b.join("copy") == 0
    await p.push("orig", 5, b"x", headers=[("CC", "copy"), ("App", "1")])
    original, copy = await a.recv(5), await b.recv(5)
    assert original.header("CC") == "copy" and original.header("App") == "1"
    assert (copy.target, copy.content_type, copy.header("CC"), copy.header("App")) == (
        "copy", 5, None, "1")
    assert copy.message_id != original.message_id
    await a.nothing()
    await b.nothing()


@pytest_twisted.ensureDeferred
async def test_push_whose_frame_cannot_be_relayed_still_reaches_other_doors(server):
    """Push ids are relayed as decoded: 200 bytes that are not UTF-8 come back as 600 bytes
    of U+FFFD, which no frame can carry. Only the Twino member misses that message."""
    p, member = await clients(server, 2)
    await make_queue(p, "odd", 1, "push", ack=False)
    assert await member.join("odd") == 0
    mqks = await server.mqks()
    assert (await mqks.request("c consume --confirm odd/1 ev")).startswith("c ok")
    await p.send_frame(bytes([0x11, 0x10, 200, 0, 3, 1, 0, 3]) + b"\xff" * 200 + b"odd" + b"bad")
    await p.push("odd", 1, b"good")
    assert [f.content for f in await receive_all(member, p)] == [b"good"]
    assert [line.rsplit(" ", 1)[1] for line in await mqks.lines_n(2)] == ["bad", "good"]
    assert server.broker.counters["unrepresentable.twino"] == 1
