"""The engine contract for every queue mode (core/queue.py's table), on every engine of
tests/engine/conftest.py's ENGINES: what a mode stores, hands out and to whom.

A pull is the one verb whose answer may come later (RabbitMQ's basic.get is a round
trip): an engine that answers at once returns the entries, a networked one a Deferred of
them (`pulled`)."""
import pytest_twisted
from twisted.internet import defer

from mqksbridge.bridge.engine import Client, Consumer, Message
from mqksbridge.core.queue import BROADCAST, CACHE, PAUSED, PULL, PUSH_ALL, ROUND_ROBIN


def message(n):
    return Message(f"m{n}", "s", (b"body",))


def consumer(name, got, manual_ack=False, credit=None):
    return Consumer(name, Client(name, "test"), lambda c, e: got.append(e.message.id),
                    manual_ack=manual_ack, credit=credit)


async def pulled(started, queue, who, count, **options):
    taken = queue.pull(who, count, **options)
    if started.at_once:
        assert not isinstance(taken, defer.Deferred)
    elif isinstance(taken, defer.Deferred):
        taken = await taken
    return [entry.message.id for entry in taken]


@pytest_twisted.ensureDeferred
async def test_push_all_stores_while_nobody_consumes_then_hands_each_message_to_every_consumer(
        started):
    engine = started.engine
    jobs = engine.queue("jobs", mode=PUSH_ALL)
    engine.publish(jobs, message(0))
    await started.settle(lambda: len(jobs) == 1, "m0 stored")
    one, two = [], []
    engine.consume(jobs, consumer("a", one))
    await started.settle(lambda: one == ["m0"] and len(jobs) == 0, "m0 to the first consumer")
    engine.consume(jobs, consumer("b", two))
    for n in (1, 2):
        engine.publish(jobs, message(n))
    await started.settle(lambda: one == ["m0", "m1", "m2"] and two == ["m1", "m2"],
                         "m1 and m2 to both")
    assert len(jobs) == 0


@pytest_twisted.ensureDeferred
async def test_a_push_all_copy_handed_back_is_settled_for_that_consumer_alone(started):
    engine = started.engine
    jobs = engine.queue("jobs", mode=PUSH_ALL)
    one, two = [], []
    first = consumer("a", one, manual_ack=True)
    engine.consume(jobs, first)
    engine.consume(jobs, consumer("b", two))
    await started.settle(lambda: True, "both consuming")
    engine.publish(jobs, message(1))
    await started.settle(lambda: one == ["m1"] and two == ["m1"], "m1 to both")
    assert engine.requeue(first, "m1")
    engine.publish(jobs, message(2))
    await started.settle(lambda: one == ["m1", "m2"] and two == ["m1", "m2"], "m2 to both")
    assert len(jobs) == 0 and one == ["m1", "m2"]      # m1 never came back


@pytest_twisted.ensureDeferred
async def test_broadcast_hands_each_message_to_every_consumer_and_drops_it_with_none(started):
    engine = started.engine
    news = engine.queue("news", mode=BROADCAST)
    fates = []
    confirmed = engine.publish(news, message(0), confirm=True,
                               observer=lambda event, entry, c, reason, r: fates.append(
                                   (event, reason)))
    result = []
    confirmed.addCallback(result.append)
    await started.committed()
    await started.settle(lambda: fates == [("dropped", "no-consumers")], "m0 dropped")
    assert result == [True] and len(news) == 0
    one, two = [], []
    engine.consume(news, consumer("a", one))
    engine.consume(news, consumer("b", two))
    await started.settle(lambda: True, "both consuming")
    engine.publish(news, message(1))
    await started.settle(lambda: one == ["m1"] and two == ["m1"], "m1 to both")
    assert len(news) == 0


@pytest_twisted.ensureDeferred
async def test_pull_stores_and_hands_out_only_what_is_pulled(started):
    engine = started.engine
    jobs = engine.queue("jobs", mode=PULL)
    got = []
    puller = consumer("p", got, manual_ack=True)
    engine.consume(jobs, puller)
    for n in range(3):
        engine.publish(jobs, message(n))
    await started.settle(lambda: len(jobs) == 3, "three stored")
    assert got == []
    left = []
    assert await pulled(started, jobs, puller, 2, left=left) == ["m0", "m1"]
    assert [regular for _, regular in left] == [2, 1]
    assert sorted(puller.unacked) == ["m0", "m1"] and got == []
    assert engine.settle(puller, "m0") and engine.requeue(puller, "m1")
    await started.settle(lambda: len(jobs) == 2, "m1 back")
    assert await pulled(started, jobs, puller, 5) == ["m2", "m1"]
    assert await pulled(started, jobs, puller, 1) == []


@pytest_twisted.ensureDeferred
async def test_a_pull_that_clears_empties_the_queue(started):
    engine = started.engine
    jobs = engine.queue("jobs", mode=PULL)
    puller = consumer("p", [])
    engine.consume(jobs, puller)
    for n in range(3):
        engine.publish(jobs, message(n))
    await started.settle(lambda: len(jobs) == 3, "three stored")
    assert await pulled(started, jobs, puller, 1, clear="all") == ["m0"]
    await started.settle(lambda: len(jobs) == 0, "the rest cleared")


@pytest_twisted.ensureDeferred
async def test_cache_keeps_only_the_latest_and_hands_out_nothing(started):
    engine = started.engine
    latest = engine.queue("latest", mode=CACHE)
    got = []
    engine.consume(latest, consumer("a", got))
    for n in range(3):
        engine.publish(latest, message(n))
        await started.committed()           # one after the other, as a cache is fed
    await started.settle(lambda: len(latest) == 1, "the latest only")
    assert got == []
    latest.set_mode(ROUND_ROBIN)
    await started.settle(lambda: got == ["m2"], "the latest, once it pushes")


@pytest_twisted.ensureDeferred
async def test_paused_stores_until_the_mode_changes(started):
    engine = started.engine
    jobs = engine.queue("jobs", mode=PAUSED)
    got = []
    engine.consume(jobs, consumer("a", got))
    for n in range(2):
        engine.publish(jobs, message(n))
    await started.settle(lambda: len(jobs) == 2, "both stored")
    assert got == []
    jobs.set_mode(ROUND_ROBIN)
    await started.settle(lambda: got == ["m0", "m1"], "both handed once it pushes")
    jobs.set_mode(PAUSED)
    engine.publish(jobs, message(2))
    await started.settle(lambda: len(jobs) == 1, "m2 stored")
    assert got == ["m0", "m1"]


@pytest_twisted.ensureDeferred
async def test_producer_acks_hear_sent_then_the_consumers_verdict(started):
    engine = started.engine
    jobs = engine.queue("jobs")
    fates = []
    got = []
    worker = consumer("w", got, manual_ack=True)
    engine.consume(jobs, worker)
    await started.settle(lambda: True, "consuming")
    engine.publish(jobs, message(1), observer=lambda event, entry, c, reason, r: fates.append(
        (event, entry.message.id, c.client.id if c is not None else None, reason)))
    await started.settle(lambda: got == ["m1"] and fates, "m1 handed")
    assert fates == [("sent", "m1", "w", None)]
    assert engine.settle(worker, "m1", False, "bad")
    await started.settle(lambda: len(fates) == 2, "the verdict")
    assert fates[1] == ("nack", "m1", "w", "bad")


@pytest_twisted.ensureDeferred
async def test_a_doors_answer_comes_once_its_consumer_is_in_place(started):
    """Where consumers are in place in the call the answer goes first (before any stored
    message the consume hands out); on a networked engine once the server has the
    consumer (the RabbitMQ engine: its basic.consume-ok)."""
    engine = started.engine
    jobs = engine.queue("jobs")
    engine.publish(jobs, message(0))
    await started.settle(lambda: len(jobs) == 1, "m0 stored")
    seen, got = [], []
    worker = consumer("w", got)

    def answer():
        subscription = getattr(jobs, "subscriptions", {}).get(worker)
        seen.append(("answer", list(got), subscription and subscription.ctag is not None))
    engine.answer_in_place(answer, lambda: engine.consume(jobs, worker))
    if started.at_once:
        assert seen == [("answer", [], None)] and got == ["m0"]
    else:
        assert seen == []
        await started.settle(lambda: seen, "the answer")
        assert seen[0][2] is True
