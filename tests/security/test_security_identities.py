"""Identities cannot be stolen across doors: a Malamute address and a
Twino client id are one mailbox name, and a live owner keeps it against a client of the
other door; each refusal is that protocol's own (Twino 503 at the handshake, Malamute ERROR
300 to the OPEN). Within Malamute a new OPEN still takes an address over."""
import pytest
import pytest_twisted

from mqksbridge.bridge.clients.twino import TwinoRefused
from mqksbridge.protocols.malamute import codec


@pytest_twisted.ensureDeferred
async def test_twino_client_cannot_take_a_live_malamute_address(server):
    alice = await server.malamute_raw("alice2")
    with pytest.raises(TwinoRefused) as refused:
        await server.twino(client_id="alice2")
    assert refused.value.code == 503
    sender = await server.twino()
    await sender.send_direct("alice2", b"for alice")
    got = await alice.recv()
    assert isinstance(got, codec.MailboxDeliver) and got.content == (b"for alice",), got
    assert server.doors["twino"].broker.mailboxes["alice2"].owner.door == "malamute"


@pytest_twisted.ensureDeferred
async def test_malamute_open_cannot_take_a_live_twino_client_id(server):
    bob = await server.twino(client_id="bob1")
    thief = await server.malamute_raw()
    reply = await thief.call(codec.ConnectionOpen("bob1"))
    assert isinstance(reply, codec.Error) and reply.code == 300, reply
    assert server.doors["malamute"].counters["opens_refused"] == 1
    sender = await server.twino()
    await sender.send_direct("bob1", b"still mine")
    assert (await bob.recv(5)).content == b"still mine"


@pytest_twisted.ensureDeferred
async def test_malamute_takeover_of_its_own_address_still_works(server):
    first = await server.malamute_raw("carol")
    second = await server.malamute_raw("carol")
    sender = await server.twino()
    await sender.send_direct("carol", b"to the new one")
    got = await second.recv()
    assert isinstance(got, codec.MailboxDeliver) and got.content == (b"to the new one",), got
    assert first is not second
