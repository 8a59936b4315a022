"""Pull (QueuePullRequest): exact counts, order, clear, info, refusals, acks."""
import pytest
import pytest_twisted

from mqksbridge.bridge.clients.twino import TwinoError
from mqksbridge.protocols.twino.codec import Frame, MessageType, new_id
from tests.twino.helpers import make_queue, receive_all


async def filled(server, n, priority=(), ack=False):
    p, c = await server.twino(), await server.twino()
    await make_queue(p, "pl", 1, "pull", ack=ack)
    for i in range(n):
        await p.push("pl", 1, b"m%d" % i, high_priority=i in priority)
    await p.ping()
    assert await c.join("pl") == 0
    return p, c


@pytest_twisted.ensureDeferred
async def test_pull_one_then_empty(server):
    _, c = await filled(server, 1)
    got = await c.pull("pl", 1, 1)
    assert [f.content for f in got] == [b"m0"]
    assert got[0].header("Count") == "1" and got[0].header("Index") == "1"
    assert await c.pull("pl", 1, 1) == []


@pytest.mark.parametrize("count", [1, 3, 10])
@pytest_twisted.ensureDeferred
async def test_pull_gives_exactly_count_and_loses_nothing(server, count):
    _, c = await filled(server, 25)
    first = await c.pull("pl", 1, count)
    rest = await c.pull("pl", 1, 100)
    assert [f.content for f in first + rest] == [b"m%d" % i for i in range(25)]
    assert len(first) == count


@pytest_twisted.ensureDeferred
async def test_pull_answer_shapes(server):
    _, c = await filled(server, 2)
    request = Frame(MessageType.QUEUE_PULL_REQUEST, message_id=new_id(), source=c.client_id,
                    target="pl", content_type=1, headers=[("Count", " 5 "), ("Info", "yes")])
    await c.send_frame(request)
    frames = await receive_all(c)
    assert [f.header("Index") for f in frames] == ["1", "2", None]
    assert [f.header("Messages") for f in frames[:2]] == ["1", "0"]
    end = frames[-1]
    assert (end.message_id, end.target, end.content_type, end.content) == (
        request.message_id, "pl", 1, b"")
    assert end.headers == [("Request-Id", request.message_id), ("No-Content", "End")]
    assert all(f.header("Count") == "5" and f.first_acquirer for f in frames[:2])


@pytest_twisted.ensureDeferred
async def test_pull_order_fifo_and_lifo(server):
    _, c = await filled(server, 3)
    assert [f.content for f in await c.pull("pl", 1, 1)] == [b"m0"]
    assert [f.content for f in await c.pull("pl", 1, 1, order_lifo=True)] == [b"m2"]


@pytest.mark.parametrize("clear, left", [(True, []), ("High-Priority", [b"m1", b"m3"]),
                                         ("Default-Priority", [b"m2"])])
@pytest_twisted.ensureDeferred
async def test_pull_clear_empties_the_chosen_lists(server, clear, left):
    _, c = await filled(server, 4, priority=(0, 2))
    got = await c.pull("pl", 1, 1, clear=clear)
    assert [f.content for f in got] == [b"m0"]
    assert [f.content for f in await c.pull("pl", 1, 10)] == left


@pytest_twisted.ensureDeferred
async def test_pull_refusals(server):
    p, c = await filled(server, 1)
    outsider = await server.twino()
    with pytest.raises(TwinoError, match="Unauthorized"):
        await outsider.pull("pl", 1, 1)
    with pytest.raises(TwinoError, match="Unacceptable"):
        await c.pull("pl", 1, 0)
    await make_queue(p, "pl", 2, "push")
    with pytest.raises(TwinoError, match="Unacceptable"):
        await c.pull("pl", 2, 1)


@pytest_twisted.ensureDeferred
async def test_pull_with_acks_keeps_the_producer_waiting_until_the_ack(server):
    p, c = await server.twino(), await server.twino()
    await make_queue(p, "pa", 1, "pull", ack=True)
    assert await c.join("pa") == 0
    pending = p.push("pa", 1, b"x", wait_ack=True, timeout=5)
    got = []
    while not got:
        got = await c.pull("pa", 1, 1)
    assert got[0].pending_ack
    await c.ack(got[0])
    assert (await pending).ok
