"""A publish the cluster refuses after the door published it reaches the client as the refusal
it is, on every door that confirms (docs/cluster.md, 'publish with confirmation').

One gateway (a real `twistd -n mqksbridge` with `[cluster] engine = "rabbitmq"`) on the
session's RabbitMQ node. The refusing queue is a quorum queue full (`x-max-length` 1,
`x-overflow` reject-publish, published to until RabbitMQ nacks: a quorum queue takes the
publish that fills it) declared in RabbitMQ before the gateway declares it, which takes it
as the cluster has it: the gateway publishes to it and RabbitMQ nacks each publish. Each
door's client is then told what it is told for a synchronous refusal: MQKS --confirm an
error line, a Twino producer waiting for its `received` ack a nack (`refused`), a TextQueue
inbox record `!`. Beside each, the same client's publish to a queue that takes it is
confirmed as before.
"""
import pika
import pytest

from mqksbridge.bridge.clients.mqks import MqksError
from tests.cluster.gateways import QUEUE as PREFIX, start
from tests.interop.sides import Mqks, Refused, TextQueue, Twino, split_queue, unique


@pytest.fixture(scope="module")
def gateways(_rabbitmq_node_session, tmp_path_factory):
    yield from start(_rabbitmq_node_session, tmp_path_factory, nodes=("refused",),
                     doors=("mqks", "malamute", "twino"),
                     settings='[twino]\nproducer_ack_default = "received"\n')


@pytest.fixture
def net(nets):
    return nets[0]


@pytest.fixture
def full(_rabbitmq_node_session):
    """full(name): the quorum queue of core queue `name`, full, rejecting publishes."""
    connection = pika.BlockingConnection(pika.URLParameters(_rabbitmq_node_session.urls()[0]))
    channel = connection.channel()
    channel.confirm_delivery()
    made = []

    def declare(name):
        channel.queue_declare(PREFIX + name, durable=True, arguments={
            "x-queue-type": "quorum", "x-max-length": 1, "x-overflow": "reject-publish"})
        made.append(name)
        for _ in range(10):
            try:
                channel.basic_publish("", PREFIX + name, b"filler")
            except pika.exceptions.NackError:
                return name
        raise AssertionError(f"{name} never refused a publish")
    yield declare
    for name in made:
        channel.queue_delete(PREFIX + name)
    connection.close()


def test_mqks_confirm_of_an_event_a_bound_queue_refused_is_an_error(net, full):
    side = Mqks(net)
    pub = side.client()
    refuser, taker = full(unique("full-")), unique("taker-")
    subject, other = unique("refused."), unique("taken.")
    pub.rebind(refuser, f"--add {subject}")
    with pytest.raises(MqksError):
        pub.publish(subject, "to a full queue")
    (reader,) = side.queue_consumers(taker, 1)
    pub.rebind(taker, f"--add {other}")
    pub.publish(other, "to a queue that takes it")       # the control: ok
    assert reader.recv().frames == (b"to a queue that takes it",)


def test_twino_received_ack_of_a_push_the_cluster_refused_is_a_nack(net, full):
    side = Twino(net)
    refuser = full(unique("full") + "/1")
    taker = unique("taker") + "/1"
    side.make_queue(refuser)
    side.make_queue(taker)
    pub = side.publisher()
    channel, queue_id = split_queue(refuser)
    result = pub.push(channel, queue_id, b"to a full queue", wait_ack=True)
    assert not result.ok and result.reason == "refused", result
    side.publish_queue(pub, taker, None, [b"to a queue that takes it"])   # asserts its ack


def test_textqueue_record_the_cluster_refused_is_marked_refused(net, full):
    side = TextQueue(net)
    pub = side.publisher()
    refuser, taker = full(unique("full-")), unique("taker-")
    with pytest.raises(Refused):
        side.publish_queue(pub, refuser, None, [b"to a full queue"])
    side.publish_queue(pub, taker, None, [b"to a queue that takes it"])   # marked '='
