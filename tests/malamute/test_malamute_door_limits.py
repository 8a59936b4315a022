"""Per-session subscription limits: malamute.max_subscriptions stream
reads and service offers, malamute.max_pattern bytes a pattern; past either ERROR 300
(mlm_client stops; 500 would make it replay the same subscriptions for ever) and the
session ends, so its next command finds no session."""
import pytest
import pytest_twisted
from twisted.internet import defer

from mqksbridge.protocols.malamute import codec
from tests.conftest import RunningBroker


@pytest.fixture
def limited():
    running = RunningBroker({"malamute": {"max_subscriptions": 3, "max_pattern": 10}})
    pytest_twisted.blockon(defer.ensureDeferred(running.start()))
    yield running
    pytest_twisted.blockon(defer.ensureDeferred(running.stop()))


def refused(reply, reason):
    return reply.__class__ is codec.Error and reply.code == codec.FAILED and reason in reply.reason


@pytest_twisted.ensureDeferred
async def test_reads_and_offers_count_together_repeats_do_not(limited):
    peer = await limited.malamute_raw("greedy")
    assert await peer.call(codec.StreamRead("s", "a")) == codec.Ok()
    assert await peer.call(codec.StreamRead("s", "a")) == codec.Ok()       # the same pair
    assert await peer.call(codec.ServiceOffer("jobs", "b")) == codec.Ok()
    assert await peer.call(codec.ServiceOffer("jobs", "b")) == codec.Ok()
    assert await peer.call(codec.StreamRead("t", "a")) == codec.Ok()
    assert refused(await peer.call(codec.StreamRead("t", "c")), "more than 3")
    assert await peer.call(codec.ConnectionPing()) == codec.Error(codec.COMMAND_INVALID)
    assert limited.broker.streams["s"].readers == []
    assert limited.doors["malamute"].counters["subscriptions_refused"] == 1


@pytest_twisted.ensureDeferred
async def test_cancel_gives_the_slots_back(limited):
    peer = await limited.malamute_raw("reader")
    for pattern in ("a", "b", "c"):
        assert await peer.call(codec.StreamRead("s", pattern)) == codec.Ok()
    assert await peer.call(codec.StreamCancel("s")) == codec.Ok()
    for pattern in ("d", "e", "f"):
        assert await peer.call(codec.StreamRead("s", pattern)) == codec.Ok()
    assert [r.key for r in limited.broker.streams["s"].readers] == ["d", "e", "f"]


@pytest_twisted.ensureDeferred
async def test_long_patterns_are_refused(limited):
    peer = await limited.malamute_raw("reader")
    assert await peer.call(codec.StreamRead("s", "x" * 10)) == codec.Ok()
    assert refused(await peer.call(codec.ServiceOffer("jobs", "x" * 11)), "longer than 10")
    other = await limited.malamute_raw("other")
    assert refused(await other.call(codec.StreamRead("s", "é" * 6)), "longer than 10")


@pytest_twisted.ensureDeferred
async def test_the_real_client_reports_the_refusal(limited):
    client = await limited.malamute("")
    for pattern in ("a", "b", "c"):
        await client.set_consumer("s", pattern)
    with pytest.raises(Exception) as error:
        await client.set_consumer("s", "d")
    assert getattr(error.value, "code", None) == codec.FAILED
