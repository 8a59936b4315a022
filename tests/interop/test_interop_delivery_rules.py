"""The core's delivery rules hold whichever door a consumer or a queue came through
(docs/delivery.md), over real sockets: what a departing consumer's unacked messages become
is decided by how the queue delivered them, not by the door the consumer used; removing a
channel sends nothing; and a channel sees every queue of its name, whoever made it.

No quiet periods: "nothing more arrived" is shown by a marker sent after the event, which
the client must receive next (the broker writes a connection's output in order)."""
import pytest_twisted

from mqksbridge.protocols.twino.codec import ContentType
from tests.conftest import RunningBroker
from tests.support.waits import until
from tests.twino.helpers import make_queue


async def mqks_client_id(mqks):
    line = await mqks.request("e _eval request['client']")
    return line.split(" ok ", 1)[1]


@pytest_twisted.ensureDeferred
async def test_mqks_manual_ack_consumer_leaving_a_push_queue_sends_no_second_copy(server):
    """Push: every consumer present had the message, so a departing MQKS consumer's unacked
    copy is settled, not handed to the Twino member a second time."""
    producer, member = await server.twino(), await server.twino()
    await make_queue(producer, "rules-push", 1, "push", ack=False)
    assert await member.join("rules-push") == 0
    mqks = await server.mqks()
    assert await mqks.request("c1 consume --confirm rules-push/1 --manual-ack") == "c1 ok "
    mqks_id = await mqks_client_id(mqks)
    await producer.push("rules-push", 1, b"once")
    assert (await mqks.line()).endswith(" once")
    assert (await member.recv(5)).content == b"once"
    await mqks.close()                       # leaves without acking
    await until(lambda: mqks_id not in server.broker.clients, what="the MQKS client gone")
    await producer.push("rules-push", 1, b"marker")
    assert (await member.recv(5)).content == b"marker"


@pytest_twisted.ensureDeferred
async def test_mqks_manual_ack_consumer_leaving_a_round_robin_queue_hands_it_on(server):
    """Round robin: only the departing consumer had it, so it goes to the next one."""
    producer, member = await server.twino(), await server.twino()
    await make_queue(producer, "rules-rr", 1, "round-robin", ack=False)
    mqks = await server.mqks()
    assert await mqks.request("c1 consume --confirm rules-rr/1 --manual-ack") == "c1 ok "
    await producer.push("rules-rr", 1, b"work")
    assert (await mqks.line()).endswith(" work")
    assert await member.join("rules-rr") == 0
    await mqks.close()
    assert (await member.recv(5)).content == b"work"


@pytest_twisted.ensureDeferred
async def test_remove_channel_sends_members_nothing(server):
    """604 removes the channel and its queues; members holding unacked messages do not get
    them again (from each other) on the way out."""
    producer, first, second, admin = [await server.twino() for _ in range(4)]
    await make_queue(producer, "rules-gone", 1, "push", ack=True)
    assert await first.join("rules-gone") == 0
    assert await second.join("rules-gone") == 0
    await producer.push("rules-gone", 1, b"held")
    assert (await first.recv(5)).content == b"held"
    assert (await second.recv(5)).content == b"held"
    answer = await admin.operation(ContentType.REMOVE_CHANNEL, "rules-gone",
                                   [("Channel-Name", "rules-gone")])
    assert answer.content_type == 0
    assert "rules-gone" not in server.broker.channels and "rules-gone/1" not in server.broker.queues
    for member in (first, second):
        await admin.send_direct(member.client_id, b"marker")
        assert (await member.recv(5)).content == b"marker"


@pytest_twisted.ensureDeferred
async def test_remove_channel_round_robin_sends_members_nothing(server):
    producer, first, second, admin = [await server.twino() for _ in range(4)]
    await make_queue(producer, "rules-gone-rr", 1, "round-robin", ack=True)
    assert await first.join("rules-gone-rr") == 0
    assert await second.join("rules-gone-rr") == 0
    await producer.push("rules-gone-rr", 1, b"a")
    await producer.push("rules-gone-rr", 1, b"b")
    assert (await first.recv(5)).content == b"a"
    assert (await second.recv(5)).content == b"b"
    answer = await admin.operation(ContentType.REMOVE_CHANNEL, "rules-gone-rr",
                                   [("Channel-Name", "rules-gone-rr")])
    assert answer.content_type == 0
    for member in (first, second):
        await admin.send_direct(member.client_id, b"marker")
        assert (await member.recv(5)).content == b"marker"


# -- one queue, whoever made it ------------------------------------------------------------

@pytest_twisted.ensureDeferred
async def test_twino_member_of_jobs_consumes_the_queue_an_mqks_consume_made(server):
    """Requests come through Malamute, so no Twino push ever names (jobs-m, 0)."""
    mqks = await server.mqks()
    assert await mqks.request("c1 consume --confirm jobs-m") == "c1 ok "
    member = await server.twino()
    assert await member.join("jobs-m") == 0
    client = await server.malamute("client-m")
    for i in range(4):
        await client.sendfor("jobs-m", "job", b"job-%d" % i)
    assert [(await mqks.line()).rsplit(" ", 1)[1] for _ in range(2)] == ["job-0", "job-2"]
    got = [await member.recv(5) for _ in range(2)]
    assert [(f.target, f.content_type, f.content) for f in got] == [
        ("jobs-m", 0, b"job-1"), ("jobs-m", 0, b"job-3")]


@pytest_twisted.ensureDeferred
async def test_twino_member_of_jobs_consumes_a_malamute_service(server):
    worker = await server.malamute("worker-s")
    await worker.set_worker("jobs-s", "")
    member = await server.twino()
    assert await member.join("jobs-s") == 0
    client = await server.malamute("client-s")
    for i in range(4):
        await client.sendfor("jobs-s", "resize", b"img-%d" % i)
    got = [await worker.recv(5) for _ in range(2)]
    assert [g.frames for g in got] == [(b"img-0",), (b"img-2",)]
    frames = [await member.recv(5) for _ in range(2)]
    assert [(f.target, f.content) for f in frames] == [("jobs-s", b"img-1"), ("jobs-s", b"img-3")]
    for frame in frames:
        await member.ack(frame)


@pytest_twisted.ensureDeferred
async def test_a_queue_another_door_makes_later_joins_the_channel(server):
    """Members first, queues after: an MQKS `consume jobs-l/3` and a Malamute service
    `jobs-l` made after the Twino member joined are queues (jobs-l, 3) and (jobs-l, 0)."""
    member = await server.twino()
    assert await member.join("jobs-l") == 0
    mqks = await server.mqks()
    assert await mqks.request("c1 consume --confirm jobs-l/3") == "c1 ok "
    worker = await server.malamute("worker-l")
    await worker.set_worker("jobs-l", "")
    client = await server.malamute("client-l")
    for body in (b"l3-a", b"l3-b"):
        await client.sendfor("jobs-l/3", "s", body)
    for body in (b"l0-a", b"l0-b"):
        await client.sendfor("jobs-l", "s", body)
    to_mqks = (await mqks.line()).rsplit(" ", 1)[1].encode()
    to_worker = (await worker.recv(5)).frames
    got = dict(((f.content_type, f.content) for f in [await member.recv(5), await member.recv(5)]))
    assert {to_mqks, got[3]} == {b"l3-a", b"l3-b"}       # one each, round robin
    assert {to_worker, (got[0],)} == {(b"l0-a",), (b"l0-b",)}
    assert sorted(server.broker.channels["jobs-l"].queues) == [0, 3]


# -- limits belong to the queue, not to the door that made it -------------------------------

@pytest_twisted.ensureDeferred
async def test_a_queue_size_limit_is_the_queues_whoever_created_it():
    """`jobs-cap*` queues keep 20 content bytes: the one an MQKS consume made refuses a
    Twino push over it, and a Malamute service of the same pattern drops the request;
    other queues are unlimited."""
    running = await RunningBroker({"broker": {"queue_size_limit": [["jobs-cap*", 20],
                                                                   ["*", "max"]]},
                                   "twino": {"producer_ack_default": "received"}}).start()
    try:
        mqks = await running.mqks()
        assert await mqks.request("c1 consume --confirm jobs-cap") == "c1 ok "
        assert await mqks.request("d delete_consumer --confirm c1") == "d ok "
        producer = await running.twino()
        for body in (b"x" * 10, b"y" * 10):
            assert (await producer.push("jobs-cap", 0, body, wait_ack=True)).ok
        refused = await producer.push("jobs-cap", 0, b"z", wait_ack=True)
        assert (refused.ok, refused.reason) == (False, "full")
        assert running.broker.queues["jobs-cap"].max_bytes == 20
        assert (await producer.push("free", 0, b"w" * 100, wait_ack=True)).ok
        assert running.broker.queues["free"].max_bytes is None
        client = await running.malamute("client-cap")
        await client.run(lambda c: [c.sendfor("jobs-cap-2", "r", b"x" * 10) for _ in range(3)])
        # the full queue holds the sender (Malamute has no answer to a SEND): flow control
        # lets go after flow_max_hold, the queue being stalled (nobody consumes it)
        await until(lambda: running.broker.flow.holds == 1, what="the sender held")
        running.advance(running.config["broker"]["flow_max_hold"])
        await client.ping()
        assert len(running.broker.queues["jobs-cap-2"]) == 2
        assert running.doors["malamute"].counters["service_dropped"] == 1
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_the_mailbox_size_limit_is_the_same_for_every_doors_mailboxes():
    """A Twino client's mailbox and one a Malamute send made for an absent address get the
    broker's limit; the second keeps no more than it."""
    running = await RunningBroker({"broker": {"mailbox_size_limit": 20}}).start()
    try:
        owner = await running.twino()
        mailbox = running.broker.mailboxes[owner.client_id]
        assert mailbox.limit_bytes == 20
        mailer = await running.malamute("mailer")
        await mailer.sendto("away", "s", b"x" * 15)
        await mailer.sendto("away", "s", b"y" * 15)
        await mailer.ping()
        assert running.broker.mailboxes["away"].limit_bytes == 20
        assert len(running.broker.mailboxes["away"].stored) == 1
    finally:
        await running.stop()
