"""The engine contract for mailboxes and their one live owner, on one gateway and across
two (`fleet`: on the embedded engine both are the one broker, as there is only one; on
RabbitMQ a second engine on the same cluster and prefix), and lifecycle events heard on
the other gateway. What holds within one process must hold across gateways."""
import pytest
import pytest_twisted

from mqksbridge.bridge.engine import Client, Consumer, Message, Taken
from tests.engine.conftest import RabbitMQ


def message(n):
    return Message(f"m{n}", f"s{n}", (b"body",))


class Owner:
    """A client that owns a mailbox and keeps what it is handed."""

    def __init__(self, id, door="malamute"):
        self.client = Client(id, door)
        self.got = []

    def take(self, engine, name):
        engine.connect(self.client)
        engine.mailbox(name).attach(self.client, lambda box, m: self.got.append(m.subject))

    def leave(self, engine):
        engine.disconnect(self.client)


@pytest_twisted.async_yield_fixture
async def fleet(started):
    """(gateway A, gateway B) harnesses; the mailboxes' queues go at the end."""
    if started.at_once:
        yield started, started
        return
    other = await RabbitMQ(None, None, started.urls, started.prefix).start()
    yield started, other
    names = {m.amqp_name for h in (started, other) for m in h.engine.mailboxes.values()}
    await other.engine.stop()
    for name in sorted(names):
        channel = await started.engine.open_channel()
        await channel.queue_delete(name)
        channel.close()


@pytest_twisted.ensureDeferred
async def test_mail_for_an_absent_owner_is_kept_and_handed_over_in_order(fleet):
    a, b = fleet
    for n in range(3):
        a.engine.mailbox("box").send(message(n))
    await a.committed()
    owner = Owner("o1")
    owner.take(b.engine, "box")
    await b.settle(lambda: len(owner.got) == 3, "the kept mail")
    assert owner.got == ["s0", "s1", "s2"]
    a.engine.mailbox("box").send(message(3))
    await b.settle(lambda: len(owner.got) == 4, "mail to a live owner")
    assert owner.got[-1] == "s3"


@pytest_twisted.ensureDeferred
async def test_a_newer_session_of_the_same_door_takes_the_address_over(fleet):
    a, b = fleet
    older, newer = Owner("old"), Owner("new")
    older.take(a.engine, "addr")
    await b.settle(lambda: b.engine.mailboxes.get("addr") is not None
                   and b.engine.mailboxes["addr"].owner is not None, "the owner known")
    taken = []
    a.engine.subscribe(lambda event, **data: taken.append(data["client"].id)
                       if event == "mailbox-taken" else None)
    newer.take(b.engine, "addr")
    await a.settle(lambda: older.client.mailbox is None, "the older session let go")
    assert taken == ([] if a is b else ["old"])    # one process: the door sees it itself
    a.engine.mailbox("addr").send(message(1))
    await b.settle(lambda: newer.got == ["s1"], "mail for the newer session")
    assert older.got == []


@pytest_twisted.ensureDeferred
async def test_a_live_owner_of_another_door_keeps_the_address(fleet):
    a, b = fleet
    Owner("mlm", "malamute").take(a.engine, "mine")
    await b.settle(lambda: b.engine.mailboxes.get("mine") is not None
                   and b.engine.mailboxes["mine"].owner is not None, "the owner known")
    with pytest.raises(Taken):
        b.engine.mailbox("mine").claim(Client("tw", "twino"))


@pytest_twisted.ensureDeferred
async def test_an_owner_that_leaves_frees_the_address_everywhere(fleet):
    a, b = fleet
    owner = Owner("gone", "malamute")
    owner.take(a.engine, "free")
    await b.settle(lambda: b.engine.mailboxes.get("free") is not None
                   and b.engine.mailboxes["free"].owner is not None, "the owner known")
    owner.leave(a.engine)
    await b.settle(lambda: b.engine.mailboxes["free"].owner is None, "the owner gone")
    b.engine.mailbox("free").claim(Client("tw", "twino"))


@pytest_twisted.ensureDeferred
async def test_lifecycle_events_are_heard_on_every_gateway(fleet):
    a, b = fleet
    heard = []
    b.engine.subscribe(lambda event, **data: heard.append(
        (event, data["client"].id) if "client" in data else (event, data["queue"].name)
        if "queue" in data else (event,)))
    client = Client("c1", "test")
    a.engine.connect(client)
    channel = a.engine.channel("room")
    a.engine.join_channel(channel, client,
                           lambda queue: Consumer(queue.name, client, lambda c, e: None))
    a.engine.queue("room/1")
    await b.settle(lambda: ("queue-created", "room/1") in heard, "the events")
    assert [c.id for c in b.engine.members(b.engine.channel("room"))] == ["c1"]
    a.engine.disconnect(client)
    await b.settle(lambda: ("client-disconnected", "c1") in heard, "the disconnect")
    assert [h for h in heard if h[0] != "channel-created"] == [
        ("client-connected", "c1"), ("client-joined", "c1"), ("queue-created", "room/1"),
        ("client-left", "c1"), ("client-disconnected", "c1")]
    assert "room/1" in b.engine.queues
    assert b.engine.members(b.engine.channels["room"]) == []


@pytest_twisted.ensureDeferred
async def test_two_sessions_taking_an_address_at_once_leave_one_owner_everywhere(fleet):
    a, b = fleet
    first, second = Owner("first"), Owner("second")
    first.take(a.engine, "race")
    second.take(b.engine, "race")            # before gateway B heard of the first

    def agreed():
        owners = {a.engine.mailboxes["race"].owner.id, b.engine.mailboxes["race"].owner.id}
        holding = [o for o in (first, second) if o.client.mailbox is not None]
        return len(owners) == 1 and len(holding) == 1 and holding[0].client.id in owners
    await a.settle(lambda: "race" in b.engine.mailboxes and agreed(), "one owner")
    await b.settle(agreed, "one owner, on both gateways")


@pytest_twisted.ensureDeferred
async def test_the_addresses_of_a_gateway_that_died_are_free(fleet):
    a, b = fleet
    if a is b:
        pytest.skip("one process: its owners go with it")
    owner = Owner("lost", "malamute")
    owner.take(b.engine, "orphan")
    await a.settle(lambda: a.engine.mailboxes.get("orphan") is not None
                   and a.engine.mailboxes["orphan"].owner is not None, "the owner known")
    await b.engine.stop()                    # no goodbye: its connection just goes

    def freed():
        a.advance(3)                         # the sweep asks RabbitMQ who is alive
        return a.engine.mailboxes["orphan"].owner is None
    await a.settle(freed, "the dead gateway's address free")
    a.engine.mailbox("orphan").claim(Client("tw", "twino"))


@pytest_twisted.ensureDeferred
async def test_a_client_moving_to_another_gateway_keeps_its_address(fleet):
    """The notice of its old session (on B) reaches A after its new session took the
    address there: the newer claim stays."""
    a, b = fleet
    older, newer = Owner("older"), Owner("newer")
    older.take(b.engine, "moved")
    older.leave(b.engine)
    a.clock.advance(1)
    newer.take(a.engine, "moved")

    def known_everywhere():
        mailbox = b.engine.mailboxes.get("moved")
        return mailbox is not None and mailbox.owner is not None \
            and mailbox.owner.id == "newer"
    await b.settle(known_everywhere, "the newer session known on B")
    await a.settle(lambda: newer.client.mailbox is not None, "the newer session kept")
    a.engine.mailbox("moved").send(message(1))
    await a.settle(lambda: newer.got == ["s1"], "its mail")
