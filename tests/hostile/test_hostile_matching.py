"""Issue 12 item 1: no pattern or subject blocks the reactor. Another client's round trip
stays short while a hostile pattern meets a hostile subject."""
import time

import pytest

from mqksbridge.bridge.clients.mqks import MqksError

BOUND = 1.0          # seconds another client's ping may take meanwhile (the fix: milliseconds)


def round_trip(client):
    started = time.monotonic()
    client.ping()
    return time.monotonic() - started


def test_catastrophic_pattern_meets_long_subject(broker):
    """a*a*a*a*a*a*a*b took ~10 s on a 50-byte subject and hung the broker on 200 bytes."""
    reader = broker.malamute()
    reader.set_consumer("hostile", "a*a*a*a*a*a*a*b")
    writer = broker.malamute()
    writer.set_producer("hostile")
    bystander = broker.mqks()
    writer.send("a" * 200, b"no b")
    writer.send("a" * 199 + "b", b"one b")
    assert round_trip(bystander) < BOUND
    got = reader.recv(BOUND)
    assert got is not None and got.frames == (b"one b",)


def test_dot_star_x_against_a_60_kb_mqks_event(broker):
    """.*x against a 60 KB event cost 7 s. Such an event is now refused (mqks.max_event),
    and an allowed long one is searched in linear time."""
    reader = broker.malamute()
    reader.set_consumer("mqks", ".*x")
    publisher, bystander = broker.mqks(), broker.mqks()
    refused = publisher.publish("a" * 60_000, "big", confirm=False)
    assert round_trip(bystander) < BOUND
    with pytest.raises(MqksError):
        publisher._reply(refused)                 # the error reply, even unconfirmed
    for _ in range(100):
        publisher.publish("a" * 1024, "long but allowed", confirm=False)
    assert round_trip(bystander) < BOUND
    publisher.publish("short.x", "delivered")
    got = reader.recv(BOUND)
    assert got is not None and got.frames == (b"delivered",)


def test_nested_groups_pattern_over_many_subjects(broker):
    """A pattern only the general matcher runs (groups, lazy loops), 300 subjects."""
    reader = broker.malamute()
    reader.set_consumer("hostile", "(.+?.*)(.+?.*)(.+?.*)(.+?.*)(.+?.*)(.+?.*)x")
    writer, bystander = broker.malamute(), broker.mqks()
    writer.set_producer("hostile")
    for i in range(300):
        writer.send("a" * 250, b"%d" % i)
    assert round_trip(bystander) < BOUND
    writer.send("ab" * 100 + "x", b"match")
    got = reader.recv(BOUND * 3)
    assert got is not None and got.frames == (b"match",)
