"""The engine contract: confirmations, lifecycle events and credit, for every engine in
tests/engine/conftest.py's ENGINES (the delivery rules: test_engine_delivery.py).

Each test runs on the reactor: an engine that answers in the call (`at_once`) is held to
answering in the call; a networked one is waited for, bounded, with `settle`."""
import pytest_twisted
from zope.interface.verify import verifyObject

from mqksbridge.bridge.engine import Client, Consumer, IEngine, Message

BODY = b"body"


def message(n):
    return Message(f"m{n}", "s", (BODY,))


def fired(deferred):
    """What a Deferred fired with so far: [] while it waits."""
    result = []
    deferred.addCallback(result.append)
    return result


@pytest_twisted.ensureDeferred
async def test_the_engine_provides_the_interface(started):
    assert verifyObject(IEngine, started.engine)


@pytest_twisted.ensureDeferred
async def test_a_confirmation_on_a_durable_queue_waits_for_the_disk(started):
    name = started.durable_prefix + "jobs"
    confirmed = fired(started.engine.publish(name, message(1), confirm=True))
    assert confirmed == []
    await started.committed()
    assert confirmed == [True]
    again = await started.restarted()          # confirmed means there after a crash
    jobs = again.engine.queue(name)
    await again.settle(lambda: len(jobs) == 1, "the confirmed message, after the restart")
    assert len(jobs) == 1


@pytest_twisted.ensureDeferred
async def test_a_confirmation_on_a_plain_queue_is_at_once_where_the_engine_answers_at_once(
        started):
    confirmed = fired(started.engine.publish("plain", message(1), confirm=True))
    if not started.at_once:
        assert confirmed == []
        await started.committed()
    assert confirmed == [True]


@pytest_twisted.ensureDeferred
async def test_confirmations_fire_in_publish_order(started):
    """A plain publish after a durable one is not confirmed before it."""
    engine, durable = started.engine, started.durable_prefix + "jobs"
    order = []
    for n, name in enumerate((durable, "plain", durable, "plain")):
        engine.publish(name, message(n), confirm=True).addCallback(
            lambda ok, n=n: order.append((n, ok)))
    assert order == []
    await started.committed()
    assert order == [(0, True), (1, True), (2, True), (3, True)]
    last = fired(engine.publish("plain", message(9), confirm=True))
    if not started.at_once:
        await started.committed()
    assert last == [True]


@pytest_twisted.ensureDeferred
async def test_a_refused_publish_is_confirmed_false(started):
    """At once where the engine knows at once; after the engine's verdict otherwise
    (RabbitMQ nacks a publish to a full queue that rejects publishes)."""
    engine = started.engine
    small = engine.queue("small", max_messages=1)
    assert engine.publish("small", message(1)) is True
    await started.settle(lambda: len(small) == 1, "the first message stored")
    refused = fired(engine.publish("small", message(2), confirm=True))
    if started.at_once:
        assert refused == [False]
        assert engine.publish("small", message(3)) is False
    else:
        await started.committed()
        assert refused == [False]
    await started.settle(lambda: len(small) == 1, "the queue holding the first only")


@pytest_twisted.ensureDeferred
async def test_lifecycle_events(started):
    engine = started.engine
    seen = []

    def listener(event, **data):
        seen.append((event, *sorted((key, value.id if isinstance(value, Client) else value.name)
                                    for key, value in data.items())))
    engine.subscribe(listener)
    client = Client("c1", "test")
    engine.connect(client)
    engine.queue("ch/1")
    channel = engine.channel("ch")
    engine.join_channel(channel, client, lambda queue: Consumer(queue.name, client,
                                                                 lambda c, e: None))
    engine.mailbox("box")
    engine.emit("queue-defined", queue=engine.queues["ch/1"])
    engine.leave_channel(channel, client)
    engine.remove_channel("ch")
    engine.disconnect(client)
    engine.unsubscribe(listener)
    engine.queue("after")
    assert seen == [
        ("client-connected", ("client", "c1")),
        ("queue-created", ("queue", "ch/1")),
        ("channel-created", ("channel", "ch")),
        ("client-joined", ("channel", "ch"), ("client", "c1")),
        ("mailbox-created", ("mailbox", "box")),
        ("queue-defined", ("queue", "ch/1")),
        ("client-left", ("channel", "ch"), ("client", "c1")),
        ("queue-removed", ("queue", "ch/1")),
        ("channel-removed", ("channel", "ch")),
        ("client-disconnected", ("client", "c1")),
    ]


@pytest_twisted.ensureDeferred
async def test_a_consumer_with_credit_takes_no_more_than_it_was_given(started):
    engine = started.engine
    got = []
    consumer = Consumer("c", Client("c1", "test"), lambda c, entry: got.append(entry),
                        manual_ack=True, credit=1)
    jobs = engine.queue("jobs")
    engine.consume(jobs, consumer)
    for n in range(3):
        engine.publish("jobs", message(n))

    def ids():
        return [e.message.id for e in got]
    # two stored, one handed over: a state nothing moves out of while credit is spent
    await started.settle(lambda: ids() == ["m0"] and len(jobs) == 2, "m0 handed, two stored")
    engine.credit(consumer, 2)
    await started.settle(lambda: ids() == ["m0", "m1", "m2"], "m1 and m2 handed")
    assert ids() == ["m0", "m1", "m2"]
    assert [e.retry for e in got] == [0, 0, 0]
    assert engine.settle(consumer, "m0") and not engine.settle(consumer, "m0")
    assert engine.requeue(consumer, "m1") and engine.settle(consumer, "m2", False)
    # m1, back; no credit left to take it
    await started.settle(lambda: len(jobs) == 1, "m1 stored again")
    assert ids() == ["m0", "m1", "m2"]
    engine.credit(consumer, 1)
    await started.settle(lambda: len(got) == 4, "m1 handed again")
    assert (got[3].message.id, got[3].retry) == ("m1", 1)


@pytest_twisted.ensureDeferred
async def test_credit_is_not_a_window_an_ack_gives_no_more(started):
    """Credit counts deliveries, not deliveries held: settling one lets no more through
    (an AMQP prefetch window would: a burst after an ack would bring one too many)."""
    engine = started.engine
    got = []
    consumer = Consumer("c", Client("c1", "test"), lambda c, entry: got.append(entry.message.id),
                        manual_ack=True, credit=3)
    jobs = engine.queue("jobs")
    engine.consume(jobs, consumer)
    engine.publish("jobs", message(0))
    await started.settle(lambda: got == ["m0"], "m0 handed")
    assert engine.settle(consumer, "m0")
    await started.settle(lambda: True, "the ack taken")
    for n in (1, 2, 3, 4):
        engine.publish("jobs", message(n))
    await started.settle(lambda: got == ["m0", "m1", "m2"] and len(jobs) == 2,
                         "m1 and m2 handed, m3 and m4 stored")
    assert got == ["m0", "m1", "m2"]
    assert engine.settle(consumer, "m1")
    await started.settle(lambda: len(jobs) == 2, "m3 and m4 still stored")
    assert got == ["m0", "m1", "m2"]


class Every:
    """A reader's matcher that takes every subject."""

    def search(self, subject):
        return True


@pytest_twisted.ensureDeferred
async def test_a_stream_hands_each_publish_to_its_bound_queues_and_readers_once(started):
    """A publish, and a run of publishes of one subject (the MQKS door's batch), reach the
    queue bound to their subject and every reader, once each and in order; a subject no
    queue is bound to reaches the readers only. (On a gateway the reader's own publishes
    also come back through its readers' queue: they must not be read twice.)"""
    engine = started.engine
    stream = engine.stream("events")
    bound = engine.queue("bound")
    assert stream.set_bindings("bound", ["s"])
    read, got = [], []
    stream.add_reader(Client("r", "test"), "every", Every(),
                      lambda name, message: read.append(message.id))
    engine.consume(bound, Consumer("c", Client("c1", "test"),
                                   lambda c, entry: got.append(entry.message.id)))
    await started.settle(lambda: True, "the binding, reader and consumer in place")
    stream.publish(message(0))
    stream.publish_run([message(1), message(2)])
    stream.publish(Message("m3", "unbound", (BODY,)))
    await started.settle(lambda: len(got) == 3 and len(read) == 4, "the deliveries")
    assert got == ["m0", "m1", "m2"]
    assert read == ["m0", "m1", "m2", "m3"]
