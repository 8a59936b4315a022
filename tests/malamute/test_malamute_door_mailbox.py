"""Mailboxes through the Malamute door: live delivery, storage while away, limits,
expiry and takeover, over loopback ZeroMQ."""
import pytest
import pytest_twisted
from twisted.internet import defer

from mqksbridge.protocols.malamute import codec
from tests.conftest import RunningBroker
from tests.support.waits import until


@pytest.fixture
def tight():
    """Mailboxes of 20 content bytes; a session expires after 1 s of silence."""
    running = RunningBroker({"broker": {"mailbox_size_limit": 20},
                             "malamute": {"mailbox_size_warn": 10, "timeout": 1.0,
                                          "check_interval": 0.1}})
    pytest_twisted.blockon(defer.ensureDeferred(running.start()))
    yield running
    pytest_twisted.blockon(defer.ensureDeferred(running.stop()))


@pytest_twisted.ensureDeferred
async def test_live_delivery_keeps_sender_subject_tracker_frames(server):
    alice, bob = await server.malamute("alice"), await server.malamute("bob")
    await alice.sendto("bob", "greeting", b"hi", b"there", tracker="t-1", timeout=5000)
    got = await bob.recv(10)
    assert got == ("MAILBOX DELIVER", "bob", "alice", "greeting", "t-1", (b"hi", b"there"))


@pytest_twisted.ensureDeferred
async def test_stored_mail_comes_in_order_right_after_the_ok(server):
    alice = await server.malamute("alice")
    await alice.run(lambda c: [c.sendto("carol", "s%d" % i, b"%d" % i, tracker="t%d" % i)
                               for i in range(3)])
    await alice.ping()                             # the sends have been handled
    carol = await server.malamute_raw()
    carol.send(codec.ConnectionOpen("carol"))
    assert await carol.recv() == codec.Ok()
    assert [await carol.recv() for _ in range(3)] == [
        codec.MailboxDeliver("alice", "carol", "s%d" % i, "t%d" % i, (b"%d" % i,))
        for i in range(3)]                         # each with its own tracker


@pytest_twisted.ensureDeferred
async def test_mail_survives_close_and_anonymous_sender_is_empty(server):
    bob = await server.malamute("bob")
    await bob.close()
    anonymous = await server.malamute("")
    await anonymous.sendto("bob", "x", b"1")
    await anonymous.ping()
    bob = await server.malamute("bob")
    got = await bob.recv(10)
    assert (got.sender, got.subject) == ("", "x")


@pytest_twisted.ensureDeferred
async def test_size_limit_drops_and_counts(tight):
    alice = await tight.malamute("alice")
    await alice.run(lambda c: [c.sendto("bob", "s", b"x" * 10) for _ in range(5)])
    await alice.ping()
    bob = await tight.malamute("bob")
    assert [len((await bob.recv(10)).frames[0]) for _ in range(2)] == [10, 10]
    await bob.nothing()
    assert tight.doors["malamute"].counters["mailbox_dropped"] == 3


@pytest_twisted.ensureDeferred
async def test_expired_mail_is_dropped_and_counted(tight):
    alice = await tight.malamute("alice")
    await alice.sendto("bob", "late", b"1", timeout=200)
    await alice.sendto("bob", "keep", b"2")
    await alice.ping()
    tight.advance(1.5)                             # the broker's sweep runs every 1 s
    bob = await tight.malamute("bob")
    assert (await bob.recv(10)).subject == "keep"
    await bob.nothing()
    assert tight.broker.mailboxes["bob"].expired == 1


@pytest_twisted.ensureDeferred
async def test_takeover_moves_the_mailbox_and_ends_the_old_session(server):
    old = await server.malamute_raw("bob")
    await old.call(codec.StreamRead("s", ""))
    new = await server.malamute("bob")
    sender = await server.malamute("alice")
    await sender.sendto("bob", "to-new", b"1")
    assert (await new.recv(10)).subject == "to-new"
    await old.nothing()
    assert await old.call(codec.ConnectionPing()) == codec.Error(500, "")
    assert server.broker.streams["s"].readers == []


@pytest_twisted.ensureDeferred
async def test_mail_for_a_vanished_owner_is_kept(server):
    """The original lost it (sent to a dead peer until expiry); we store it."""
    gone = await server.malamute_raw("bob")
    gone.close()
    door = server.doors["malamute"]
    await until(lambda: door.counters["vanished"] == 1, what="the broker to see it gone")
    alice = await server.malamute("alice")
    await alice.sendto("bob", "kept", b"1")
    await alice.ping()
    bob = await server.malamute("bob")
    assert (await bob.recv(10)).subject == "kept"
    assert server.doors["malamute"].counters["vanished"] == 1
