"""Services through the Malamute door: round robin among matching workers, waiting
requests, bounded queues and workers that vanish, over loopback ZeroMQ."""
import pytest
import pytest_twisted
from twisted.internet import defer

from mqksbridge.protocols.malamute import codec
from tests.conftest import RunningBroker
from tests.support.waits import until


async def drain(client, *senders):
    """Every delivery `client` has once the broker handled what `senders` sent."""
    for sender in senders:
        await sender.ping()
    return await client.received()


@pytest_twisted.ensureDeferred
async def test_round_robin_among_matching_workers(server):
    w1, w2 = await server.malamute("w1"), await server.malamute("w2")
    await w1.set_worker("svc", "req")
    await w2.set_worker("svc", "req")
    client = await server.malamute("client")
    await client.run(lambda c: [c.sendfor("svc", "req.%d" % i, b"x", tracker="t%d" % i)
                                for i in range(6)])
    one, two = await drain(w1, client), await drain(w2)
    assert [d.subject for d in one] == ["req.0", "req.2", "req.4"]
    assert [d.subject for d in two] == ["req.1", "req.3", "req.5"]
    assert one[0] == ("SERVICE DELIVER", "svc", "client", "req.0", "t0", (b"x",))


@pytest_twisted.ensureDeferred
async def test_unmatched_requests_wait_for_a_new_offer(server):
    worker = await server.malamute("w")
    await worker.set_worker("svc", "^a")
    client = await server.malamute("client")
    for subject in ("b1", "a1", "c1", "b2"):
        await client.sendfor("svc", subject, b"x")
    assert [d.subject for d in await drain(worker, client)] == ["a1"]
    await worker.set_worker("svc", "b")
    assert [d.subject for d in await drain(worker)] == ["b1", "b2"]
    other = await server.malamute("other")
    await other.set_worker("svc", "")
    assert [d.subject for d in await drain(other)] == ["c1"]


@pytest_twisted.ensureDeferred
async def test_requests_before_any_worker_are_queued(server):
    client = await server.malamute("client")
    await client.run(lambda c: [c.sendfor("later", "r%d" % i, b"x") for i in range(3)])
    await client.ping()
    worker = await server.malamute("w")
    await worker.set_worker("later", "")
    assert [d.subject for d in await drain(worker)] == ["r0", "r1", "r2"]


@pytest_twisted.ensureDeferred
async def test_vanished_worker_loses_no_waiting_request(server):
    """A worker that disconnects without CLOSE: requests sent afterwards go to the
    other worker instead of the dead peer (the original delivered them into the void)."""
    dead = await server.malamute_raw("dead")
    await dead.call(codec.ServiceOffer("svc", ""))
    live = await server.malamute("live")
    await live.set_worker("svc", "")
    dead.close()
    door = server.doors["malamute"]
    await until(lambda: door.counters["vanished"] == 1, what="the broker to see it gone")
    client = await server.malamute("client")
    await client.run(lambda c: [c.sendfor("svc", "r%d" % i, b"x") for i in range(10)])
    got = await drain(live, client)
    assert sorted(d.subject for d in got) == sorted("r%d" % i for i in range(10))
    assert server.doors["malamute"].counters["vanished"] == 1


@pytest.fixture
def bounded():
    running = RunningBroker({"broker": {"queue_size_limit": 20}})
    pytest_twisted.blockon(defer.ensureDeferred(running.start()))
    yield running
    pytest_twisted.blockon(defer.ensureDeferred(running.stop()))


@pytest_twisted.ensureDeferred
async def test_service_queue_limit_drops_and_counts(bounded):
    client = await bounded.malamute("client")
    await client.run(lambda c: [c.sendfor("svc", "r", b"x" * 10) for _ in range(5)])
    # the full queue holds the sender (no answer to a SEND in Malamute: core.flow); the
    # queue delivers nothing, so flow control lets go after flow_max_hold
    await until(lambda: bounded.broker.flow.holds == 1, what="the sender held")
    bounded.advance(bounded.config["broker"]["flow_max_hold"])
    await client.ping()
    worker = await bounded.malamute("w")
    await worker.set_worker("svc", "")
    assert len(await drain(worker)) == 2
    assert bounded.doors["malamute"].counters["service_dropped"] == 3
