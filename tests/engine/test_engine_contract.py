"""The engine contract: confirmations and lifecycle events, for every engine in
tests/engine/conftest.py's ENGINES (the delivery rules: test_engine_delivery.py)."""
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


def test_the_engine_provides_the_interface(under_test):
    assert verifyObject(IEngine, under_test.engine)


def test_a_confirmation_on_a_durable_queue_waits_for_the_disk(under_test):
    engine = under_test.engine
    confirmed = fired(engine.publish(under_test.durable_prefix + "jobs", message(1),
                                     confirm=True))
    assert confirmed == []
    under_test.commit()
    assert confirmed == [True]
    again = under_test.restart()           # confirmed means there after a crash
    assert len(again.engine.queues[under_test.durable_prefix + "jobs"]) == 1


def test_a_confirmation_on_a_plain_queue_is_at_once(under_test):
    assert fired(under_test.engine.publish("plain", message(1), confirm=True)) == [True]


def test_confirmations_fire_in_publish_order(under_test):
    """A plain publish after a durable one is not confirmed before it."""
    engine, durable = under_test.engine, under_test.durable_prefix + "jobs"
    order = []
    for n, name in enumerate((durable, "plain", durable, "plain")):
        engine.publish(name, message(n), confirm=True).addCallback(
            lambda ok, n=n: order.append((n, ok)))
    assert order == []
    under_test.commit()
    assert order == [(0, True), (1, True), (2, True), (3, True)]
    assert fired(engine.publish("plain", message(9), confirm=True)) == [True]


def test_a_refused_publish_is_confirmed_false_at_once(under_test):
    engine = under_test.engine
    engine.queue("small", max_messages=1)
    assert engine.publish("small", message(1)) is True
    assert fired(engine.publish("small", message(2), confirm=True)) == [False]
    assert engine.publish("small", message(3)) is False


def test_lifecycle_events(under_test):
    engine = under_test.engine
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


def test_a_consumer_with_credit_takes_no_more_than_it_was_given(under_test):
    engine = under_test.engine
    got = []
    consumer = Consumer("c", Client("c1", "test"), lambda c, entry: got.append(entry),
                        manual_ack=True, credit=1)
    engine.consume(engine.queue("jobs"), consumer)
    for n in range(3):
        engine.publish("jobs", message(n))
    assert [e.message.id for e in got] == ["m0"]
    engine.credit(consumer, 2)
    assert [e.message.id for e in got] == ["m0", "m1", "m2"]
    assert engine.settle(consumer, "m0") and not engine.settle(consumer, "m0")
    assert engine.requeue(consumer, "m1") and engine.settle(consumer, "m2", False)
    assert len(engine.queues["jobs"]) == 1      # m1, back; no credit left to take it
