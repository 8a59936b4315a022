"""No pattern or subject blocks the reactor: while a hostile pattern meets a hostile
subject, the broker spends little CPU on it, so another client's round trip stays short.

What is bounded is the broker's own CPU time from before the hostile traffic to the
bystander's answer: the reactor is one thread, so that is the most the bystander can have
waited for the matching (the old matcher spent 10 s of CPU on one subject), and unlike a
wall-clock bound it does not grow when other processes load the machine. The bystander
must still be answered (its client gives up after TIMEOUT)."""
import pytest

from mqksbridge.bridge.clients.mqks import MqksError
from tests.hostile.conftest import TIMEOUT

BOUND = 1.0          # broker CPU seconds the hostile traffic may cost (the fix: milliseconds)


class Spent:
    """Broker CPU seconds since it was made, read after the bystander's ping is answered."""

    def __init__(self, broker):
        self.process = broker.process
        self.started = self.process.cpu_seconds()

    def after_round_trip(self, client):
        client.ping()
        return self.process.cpu_seconds() - self.started


def test_catastrophic_pattern_meets_long_subject(broker):
    """a*a*a*a*a*a*a*b took ~10 s on a 50-byte subject and hung the broker on 200 bytes."""
    reader = broker.malamute()
    reader.set_consumer("hostile", "a*a*a*a*a*a*a*b")
    writer = broker.malamute()
    writer.set_producer("hostile")
    bystander = broker.mqks()
    spent = Spent(broker)
    writer.send("a" * 200, b"no b")
    writer.send("a" * 199 + "b", b"one b")
    assert spent.after_round_trip(bystander) < BOUND
    got = reader.recv(TIMEOUT)
    assert got is not None and got.frames == (b"one b",)


def test_dot_star_x_against_a_60_kb_mqks_event(broker):
    """.*x against a 60 KB event cost 7 s. Such an event is now refused (mqks.max_event),
    and an allowed long one is searched in linear time."""
    reader = broker.malamute()
    reader.set_consumer("mqks", ".*x")
    publisher, bystander = broker.mqks(), broker.mqks()
    spent = Spent(broker)
    refused = publisher.publish("a" * 60_000, "big", confirm=False)
    assert spent.after_round_trip(bystander) < BOUND
    with pytest.raises(MqksError):
        publisher._reply(refused)                 # the error reply, even unconfirmed
    for _ in range(100):
        publisher.publish("a" * 1024, "long but allowed", confirm=False)
    assert spent.after_round_trip(bystander) < BOUND
    publisher.publish("short.x", "delivered")
    got = reader.recv(TIMEOUT)
    assert got is not None and got.frames == (b"delivered",)


def test_nested_groups_pattern_over_many_subjects(broker):
    """A pattern only the general matcher runs (groups, lazy loops), 300 subjects."""
    reader = broker.malamute()
    reader.set_consumer("hostile", "(.+?.*)(.+?.*)(.+?.*)(.+?.*)(.+?.*)(.+?.*)x")
    writer, bystander = broker.malamute(), broker.mqks()
    writer.set_producer("hostile")
    spent = Spent(broker)
    for i in range(300):
        writer.send("a" * 250, b"%d" % i)
    assert spent.after_round_trip(bystander) < BOUND
    writer.send("ab" * 100 + "x", b"match")
    got = reader.recv(TIMEOUT)
    assert got is not None and got.frames == (b"match",)
