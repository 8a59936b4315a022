"""Queue modes and producer acks across two gateways on one RabbitMQ node (docs/cluster.md,
"Queue modes"): both real `twistd -n mqksbridge` processes with `[cluster] engine =
"rabbitmq"`, the Twino producer-ack policy left at its default (`relay`).

- one mode per queue: a Twino push that makes a queue push-all on gateway 1 makes it
  push-all on gateway 2 as well, and a mode set on one gateway reaches the other;
- push-all hands each message to every consumer of both gateways;
- a pull on one gateway takes what a publisher on the other stored;
- a Twino producer waiting for its consumer's ack hears it from the other gateway.

What RabbitMQ has is read from RabbitMQ itself (a passive declare's counts), and a
gateway's view of a queue from its admin API.
"""
import json
import threading
import urllib.parse

import pytest

from tests.cluster.gateways import start
from tests.interop.sides import WAIT, TwinoReader, unique
from tests.support.admin import fetch, fetch_json
from tests.support.waits import wait_until


@pytest.fixture(scope="module")
def gateways(_rabbitmq_node_session, tmp_path_factory):
    yield from start(_rabbitmq_node_session, tmp_path_factory)


def mode(gateway, queue):
    """The queue's mode as this gateway sees it (None: it does not know the queue)."""
    status, _, raw = fetch(gateway.ports["admin"], "/api/queues/" + urllib.parse.quote(queue))
    return json.loads(raw)["mode"] if status == 200 else None


def joined(net, channel):
    client = net.side("twino").client()
    assert client.join(channel) == 0
    return TwinoReader(client)


def test_a_twino_push_makes_the_queue_push_all_on_every_gateway(gateways, nets, rabbit):
    """The push makes it push-all on gateway 1 (Twino's default status); gateway 2, asked
    for a round-robin queue of that name, takes the fleet's mode; every consumer of both
    gateways then gets every message, and one stored while nobody consumed goes to the
    first consumer."""
    gw1, gw2 = nets[0].side("twino"), nets[1].side("twino")
    queue = unique("ch")
    gw1.publish_queue(gw1.publisher(), queue, "s", (b"stored",), wait_ack=False)
    rabbit.wait_ready(queue, 1)
    assert mode(gateways[0], queue) == "push-all"
    gw2.make_queue(queue, "round-robin")
    assert mode(gateways[1], queue) == "push-all"
    second = joined(nets[1], queue)
    assert second.recv().frames == (b"stored",)
    first = joined(nets[0], queue)
    pub = gw1.publisher()
    for body in (b"one", b"two"):
        gw2.publish_queue(pub, queue, "s", (body,), wait_ack=False)
    for reader in (first, second):
        assert [reader.recv().frames for _ in range(2)] == [(b"one",), (b"two",)]
    second.nothing()
    assert rabbit.counts(queue)[0] == 0


def test_a_mode_set_on_one_gateway_reaches_the_other(gateways, nets, rabbit):
    gw1, gw2 = nets[0].side("twino"), nets[1].side("twino")
    queue = unique("ch")
    gw1.make_queue(queue, "round-robin")
    gw2.make_queue(queue, "push")            # the fleet's round-robin holds
    wait_until(lambda: mode(gateways[1], queue) == "round-robin", WAIT,
               "gateway 1's record on gateway 2")
    reader = joined(nets[1], queue)
    fetch_json(gateways[0].ports["admin"], f"/api/queues/{queue}/pause", "POST")
    wait_until(lambda: mode(gateways[1], queue) == "paused", WAIT, "the pause on gateway 2")
    gw2.publish_queue(gw2.publisher(), queue, "s", (b"held",), wait_ack=False)
    rabbit.wait_ready(queue, 1)
    reader.nothing()
    fetch_json(gateways[1].ports["admin"], f"/api/queues/{queue}/resume", "POST")
    assert reader.recv().frames == (b"held",)
    wait_until(lambda: mode(gateways[0], queue) == "round-robin", WAIT,
               "the resume on gateway 1")


def test_a_pull_on_one_gateway_takes_what_the_other_stored(gateways, nets, rabbit):
    gw1, gw2 = nets[0].side("twino"), nets[1].side("twino")
    queue = unique("ch")
    gw1.make_queue(queue, "pull")
    pub = gw1.publisher()
    for body in (b"a", b"b", b"c"):
        gw1.publish_queue(pub, queue, "s", (body,), wait_ack=False)
    rabbit.wait_ready(queue, 3)
    gw2.make_queue(queue, "pull")
    puller = gw2.client()
    assert puller.join(queue) == 0
    assert [f.content for f in puller.pull(queue, 0, 2, timeout=WAIT)] == [b"a", b"b"]
    assert [f.content for f in puller.pull(queue, 0, 5, timeout=WAIT)] == [b"c"]
    assert puller.pull(queue, 0, 1, timeout=WAIT) == []


def test_a_twino_producer_waiting_for_the_relay_hears_the_consumer_on_the_other_gateway(
        gateways, nets, rabbit):
    """The default producer ack (`relay`): the consumer's ack, then its nack with its
    reason, reach a producer on the other gateway."""
    gw1, gw2 = nets[0].side("twino"), nets[1].side("twino")
    queue = unique("ch")
    gw2.make_queue(queue, "round-robin", ack=True)
    reader = joined(nets[1], queue)
    wait_until(lambda: rabbit.counts(queue)[1] == 1, 30, "the consumer in RabbitMQ")
    pub = gw1.publisher()
    for verdict in ("ack", "nack"):
        answers = []
        waiting = threading.Thread(target=lambda: answers.append(
            pub.push(queue, 0, verdict.encode(), wait_ack=True, timeout=WAIT)))
        waiting.start()
        got = reader.recv()
        assert got.frames == (verdict.encode(),)
        if verdict == "ack":
            reader.ack(got)
        else:
            reader.nack(got, "busy")
        waiting.join(WAIT)
        (answer,) = answers
        assert answer.ok is (verdict == "ack"), answer
    reader.nothing()


@pytest.mark.parametrize("door, status", [("mqks", None), ("twino", "round-robin"),
                                          ("twino", "push")])
def test_a_consumer_told_it_is_subscribed_gets_what_the_other_gateway_publishes_next(
        nets, door, status):
    """No waiting for RabbitMQ in the test: the MQKS `consume` ok and the Twino join's
    answer on gateway 2 come once RabbitMQ has the consumer (or its own queue, bound to a
    push-all queue's fanout), and the MQKS publisher's `rebind` ok on gateway 1 once its
    binding is there."""
    queue = unique("ch")
    consuming = nets[1].side(door)
    if status is None:
        (reader,) = consuming.queue_consumers(queue, 1)
    else:
        consuming.make_queue(queue, status)
        reader = joined(nets[1], queue)
    source = nets[0].side("mqks")
    source.publish_queue(source.publisher(), queue, "next", (b"at once",))
    assert reader.recv().frames == (b"at once",)
