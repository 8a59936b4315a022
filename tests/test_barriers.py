"""The barriers the tests use instead of quiet periods can fail: a delivery that is due
when a client's `nothing()` runs is caught at once, without waiting for anything."""
import pytest
import pytest_twisted

from mqksbridge.protocols.malamute import codec
from tests.twino.helpers import make_queue, receive_all


@pytest_twisted.ensureDeferred
async def test_an_mqks_line_that_is_due_fails_nothing(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q e") == "c1 ok "
    assert await p.request("m1 publish --confirm e x") == "m1 ok "
    with pytest.raises(AssertionError, match="c1 ok m1 event=e x"):
        await c.nothing()


@pytest_twisted.ensureDeferred
async def test_a_malamute_delivery_that_is_due_fails_nothing(server):
    raw = await server.malamute_raw("raw")
    assert await raw.call(codec.StreamRead("s", "")) == codec.Ok()
    client = await server.malamute("client")
    await client.set_consumer("s", "")
    writer = await server.malamute("writer")
    await writer.set_producer("s")
    await writer.send("due", b"1")
    await writer.ping()
    with pytest.raises(AssertionError, match="unexpected"):
        await raw.nothing()
    with pytest.raises(AssertionError, match="unexpected"):
        await client.nothing()


@pytest_twisted.ensureDeferred
async def test_a_twino_delivery_that_is_due_fails_nothing_and_is_received(server):
    p, member, other = await server.twino(), await server.twino(), await server.twino()
    await make_queue(p, "due", 1, "push", ack=False)
    assert await member.join("due") == 0
    assert await other.join("due") == 0
    await p.push("due", 1, b"x")
    await p.ping()
    with pytest.raises(AssertionError, match="unexpected"):
        await member.nothing()
    assert [f.content for f in await receive_all(other)] == [b"x"]
