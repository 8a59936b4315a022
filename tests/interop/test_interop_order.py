"""Fairness and order whatever the doors: each publisher's messages keep their order per
queue and per stream, and consumers of different doors on one queue take strict turns."""
import itertools

import pytest

from tests.interop.conftest import SIDES
from tests.interop.sides import unique

N = 200


def publish_from_every_door(net, queue, subject):
    """N messages from a publisher of each door, interleaved, each tagged `door:i`."""
    publishers = [(door, net.side(door), net.side(door).publisher()) for door in sorted(SIDES)]
    for i in range(N):
        for door, side, pub in publishers:
            body = (f"{door}:{i}".encode(),)
            if queue is None:
                side.publish_stream(pub, subject, body)
            elif door == "twino":
                side.publish_queue(pub, queue, subject, body, wait_ack=False)
            else:
                side.publish_queue(pub, queue, subject, body)
    return [door for door, _, _ in publishers]


def assert_per_publisher_order(bodies, doors):
    for door in doors:
        mine = [b for b in bodies if b.startswith(door + ":")]
        assert mine == [f"{door}:{i}" for i in range(N)], door


@pytest.mark.parametrize("consumer_door", sorted(SIDES))
def test_per_publisher_order_in_one_queue(net, consumer_door):
    queue = unique("ch") + "/1"
    (consumer,) = net.side(consumer_door).queue_consumers(queue, 1)
    doors = publish_from_every_door(net, queue, "ordered")
    bodies = [consumer.recv().frames[0].decode() for _ in range(N * len(doors))]
    assert_per_publisher_order(bodies, doors)


@pytest.mark.parametrize("reader_door", sorted(SIDES))
def test_per_publisher_order_in_the_stream(net, reader_door):
    subject = unique("ev")
    (reader,) = net.side(reader_door).stream_readers(1, subject)
    doors = publish_from_every_door(net, None, subject)
    bodies = [reader.recv().frames[0].decode() for _ in range(N * len(doors))]
    assert_per_publisher_order(bodies, doors)


def test_round_robin_across_doors_is_strict(net):
    """One consumer per door, in join order: message k goes to consumer k mod n."""
    queue = unique("ch") + "/1"
    net.side("twino").make_queue(queue, "round-robin")
    consumers = [c for door in sorted(SIDES) for c in net.side(door).queue_consumers(queue, 1)]
    twino = net.side("twino")
    pub = twino.publisher()
    rounds = 10
    for k in range(rounds * len(consumers)):
        twino.publish_queue(pub, queue, "turn", (b"%d" % k,), wait_ack=False)
    pub.ping()                               # every push handled before the barriers below
    for i, consumer in enumerate(consumers):
        got = [int(consumer.recv().frames[0]) for _ in range(rounds)]
        assert got == list(itertools.islice(itertools.count(i, len(consumers)), rounds))
        consumer.nothing()
