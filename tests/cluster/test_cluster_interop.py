"""The interop suite's door x door matrix through two gateways on one RabbitMQ node: the
publisher on gateway 1, the consumer on gateway 2, both real `twistd -n mqksbridge`
processes with `[cluster] engine = "rabbitmq"` and every door (TextQueue inbox and outbox
directories of their own).

What crosses gateways (docs/cluster.md): queues (quorum queues), a stream's exact
bindings (a direct exchange) and its readers (each gateway's readers' queue). What stays
in the gateway that holds it: mailboxes; those pairs are asserted as documented, each
beside a positive control that shows the message did reach the other gateway.

A consumer or a binding on gateway 2 is in place once RabbitMQ has it, which is after the
door answered its client (the gateway declares, binds and consumes on its own round trips):
each test waits for that in RabbitMQ (a passive declare's consumer count, the exchange's
bindings) before it publishes on gateway 1, where one process needs no such wait.
"""
import itertools
import json

import pika
import pytest

from tests.interop.conftest import SIDES, Net, spool_broker
from tests.interop.sides import WAIT, unique
from tests.support.waits import wait_until

DOORS = sorted(SIDES)
PAIRS = list(itertools.product(DOORS, DOORS))     # the same door on two gateways counts too
PAIR_IDS = [f"{a}-to-{b}" for a, b in PAIRS]
LEAVERS = [(a, b) for a in DOORS for b in DOORS if b != "malamute"]   # Malamute has no acks
REJECTERS = [(a, b) for a in DOORS for b in DOORS if SIDES[b].rejects]
BOUND_READERS = ("mqks", "textqueue")             # bound queues: RabbitMQ bindings


@pytest.fixture(scope="module")
def gateways(_rabbitmq_node_session, tmp_path_factory):
    """Two gateways on the session's RabbitMQ node; both listen once they reach it. A
    Twino producer's ack is sent once RabbitMQ has the message (`received`): the default,
    relaying the consumer's ack, cannot cross gateways (the consumer's gateway settles it)."""
    urls = json.dumps(_rabbitmq_node_session.urls())
    started = []
    try:
        for node in ("gw1", "gw2"):
            settings = ("[broker]\nsweep_interval = 0.1\n"
                        f'[cluster]\nengine = "rabbitmq"\nurls = {urls}\nnode = "{node}"\n'
                        '[twino]\nproducer_ack_default = "received"\n')
            started.append(spool_broker(tmp_path_factory.mktemp(node), settings))
        yield started
    finally:
        for process in started:
            process.stop()


class Rabbit:
    """What RabbitMQ has: a queue's consumers (a passive declare), a subject's bindings."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.connection = pika.BlockingConnection(pika.URLParameters(cluster.urls()[0]))

    def channel(self):
        """A channel, on a new connection if RabbitMQ closed the last one (a blocking
        connection idle through tests that only ask rabbitmqctl misses its heartbeats)."""
        try:
            return self.connection.channel()
        except pika.exceptions.AMQPError:
            self.connection = pika.BlockingConnection(
                pika.URLParameters(self.cluster.urls()[0]))
            return self.connection.channel()

    def consumers(self, queue):
        channel = self.channel()
        try:
            return channel.queue_declare("mqksbridge.q." + queue, passive=True) \
                .method.consumer_count
        except pika.exceptions.ChannelClosedByBroker:      # 404: not declared yet
            return 0
        finally:
            if channel.is_open:
                channel.close()

    def wait_consumers(self, queue, n=1):
        wait_until(lambda: self.consumers(queue) >= n, 30, f"{n} consumers of {queue}",
                   step=0.02)

    def wait_bindings(self, subject, n):
        def bound():
            rows = json.loads(self.cluster.ctl(1, "list_bindings", "-p", self.cluster.vhost,
                                               "source_name", "routing_key",
                                               "--formatter", "json"))
            return sum(1 for row in rows if row["routing_key"] == subject
                       and row["source_name"] == "mqksbridge.b.mqks") >= n
        wait_until(bound, 60, f"{n} bindings of {subject}", step=0.2)

    def wait_reading(self, n):
        """Until `n` gateways' readers' queues are bound to the stream `mqks`."""
        def bound():
            rows = json.loads(self.cluster.ctl(1, "list_bindings", "-p", self.cluster.vhost,
                                               "source_name", "destination_name",
                                               "--formatter", "json"))
            return sum(1 for row in rows if row["source_name"] == "mqksbridge.s.mqks"
                       and row["destination_name"].startswith("mqksbridge.r.")) >= n
        wait_until(bound, 60, f"{n} gateways reading mqks", step=0.2)

    def close(self):
        if self.connection.is_open:
            self.connection.close()


@pytest.fixture(scope="module")
def rabbit(_rabbitmq_node_session):
    seen = Rabbit(_rabbitmq_node_session)
    yield seen
    seen.close()


@pytest.fixture
def nets(gateways):
    made = [Net(gw.ports, gw.inbox, gw.outbox) for gw in gateways]
    yield made
    for net in made:
        net.close()


@pytest.fixture(params=PAIRS, ids=PAIR_IDS)
def pair(request, nets):
    """(publishing side on gateway 1, consuming side on gateway 2)."""
    src, dst = request.param
    return nets[0].side(src), nets[1].side(dst)


def publish_queue(src, pub, queue, subject, frames, headers=None):
    """Returns (message id or None, Malamute tracker or None)."""
    if src.door == "malamute":
        tracker = unique("trk")
        pub.sendfor(queue, subject, *frames, tracker=tracker)
        pub.ping()
        return None, tracker
    return src.publish_queue(pub, queue, subject, frames, headers=headers), None


def check_meta(got, src, dst, pub, mid):
    """As in the one-process suite: sender, origin door and id where the consumer shows them
    (between two doors: a door's own clients see its native metadata, which that suite does
    not pair)."""
    if src.door == dst.door:
        return
    assert got.sender == pub.sender
    if dst.shows_origin:
        assert got.origin == src.door
    if dst.shows_id:
        assert got.id == mid if mid is not None else got.id.startswith("mlm-")


def test_a_queue_message_crosses_gateways_with_its_envelope(pair, rabbit):
    """Subject, body bytes (every frame), sender, origin, id, headers and a Malamute tracker
    arrive on the other gateway as they do inside one process (several frames from a door
    without headers, headers from the doors that have them, as the one-process suite pairs
    them)."""
    src, dst = pair
    queue = unique("ch") + "/1"
    (consumer,) = dst.queue_consumers(queue, 1)
    rabbit.wait_consumers(queue)
    pub = src.publisher()
    body = bytes(b for b in range(256) if b not in b"\n\t") if src.door == "mqks" \
        else bytes(range(256))
    headers = {"X-Trace": "a b,c=d%e", "Reply-To": "me"} if src.headers else None
    frames = (b"head", body, b"") if src.multi_frame and not headers else (body,)
    subject = unique("cross.")
    mid, tracker = publish_queue(src, pub, queue, subject, frames, headers)
    got = consumer.recv()
    assert (got.subject, got.frames, got.retry) == (subject, frames, 0)
    check_meta(got, src, dst, pub, mid)
    native = src.door == dst.door           # a Twino consumer reads its own Subject as subject
    sent = ({"Subject": subject, **headers} if src.subject_header and not native
            else headers) or {}
    if dst.headers or dst.door == "mqks":
        assert got.headers == sent
    else:
        assert got.headers == {}            # the target has no place for headers
    if tracker is not None and dst.door in ("malamute", "textqueue"):
        assert got.tracker == tracker
    consumer.nothing()


@pytest.mark.parametrize("src, dst", LEAVERS, ids=[f"{a}-to-{b}" for a, b in LEAVERS])
def test_an_unacked_delivery_left_on_one_gateway_reaches_a_consumer_on_the_other(
        nets, rabbit, src, dst):
    """A manual-ack consumer on gateway 2 leaves holding a delivery: RabbitMQ hands it back
    and a consumer of the same door on gateway 1 gets it, same envelope, retry + 1 where
    the door shows it (Twino shows no retry count). After a Twino push the taker stays on
    gateway 2: the push made the queue, unknown to gateway 1 until then, push-all there
    (Twino's auto-create default), and each gateway keeps its own view of a queue's mode
    (docs/cluster.md), so a consumer on gateway 1 would get nothing."""
    source, leaving = nets[0].side(src), nets[1].side(dst)
    staying = nets[1 if src == "twino" else 0].side(dst)
    queue = unique("ch") + "/1"
    (first,) = leaving.queue_consumers(queue, 1, manual_ack=True)
    rabbit.wait_consumers(queue)
    pub = source.publisher()
    mid, _ = publish_queue(source, pub, queue, "task", (b"do it",))
    got = first.recv()
    assert (got.frames, got.retry) == ((b"do it",), 0)
    first.close()
    (second,) = staying.queue_consumers(queue, 1, manual_ack=True)
    again = second.recv()
    assert (again.subject, again.frames) == ("task", (b"do it",))
    check_meta(again, source, staying, pub, mid)
    assert again.retry == (0 if dst == "twino" else 1)
    second.ack(again)
    second.nothing()


@pytest.mark.parametrize("src, dst", REJECTERS, ids=[f"{a}-to-{b}" for a, b in REJECTERS])
def test_a_rejected_delivery_comes_back_with_retry_on_the_other_gateway(nets, rabbit, src, dst):
    source, consuming = nets[0].side(src), nets[1].side(dst)
    queue = unique("ch") + "/1"
    (consumer,) = consuming.queue_consumers(queue, 1, manual_ack=True)
    rabbit.wait_consumers(queue)
    pub = source.publisher()
    mid, _ = publish_queue(source, pub, queue, "task", (b"again",))
    got = consumer.recv()
    assert got.retry == 0
    consumer.reject(got)
    again = consumer.recv()
    assert (again.subject, again.frames, again.retry) == ("task", (b"again",), 1)
    check_meta(again, source, consuming, pub, mid)
    consumer.ack(again)
    consumer.nothing()


@pytest.mark.parametrize("src, dst", PAIRS, ids=PAIR_IDS)
def test_stream_readers_across_gateways_as_documented(nets, rabbit, src, dst):
    """A stream publish on gateway 1 reaches the queues bound to its subject on gateway 2
    (MQKS and TextQueue readers: RabbitMQ bindings) and gateway 2's Malamute readers
    (through its readers' queue), as those on gateway 1.
    A Twino reader (a Push queue bound to the router) gets nothing on either gateway: a
    push-all queue has no consumer on the cluster engine yet (docs/cluster.md).
    An MQKS reader on gateway 2 getting it first shows the message reached that gateway."""
    source, there, here = nets[0].side(src), nets[1].side(dst), nets[0].side(dst)
    subject = unique("ev.")
    witness = nets[1].side("mqks").stream_readers(1, subject)[0]
    (far,) = there.stream_readers(1, subject)
    (near,) = here.stream_readers(1, subject)
    rabbit.wait_bindings(subject, 3 if dst in BOUND_READERS else 1)
    if dst not in BOUND_READERS:
        rabbit.wait_reading(2)
    pub = source.publisher()
    mid = source.publish_stream(pub, subject, (b"news",))
    assert witness.recv().frames == (b"news",)
    if dst == "twino":                  # its reader is a Push queue: push-all, no consume
        near.nothing()
        far.nothing()
        return
    got = near.recv()
    assert (got.subject, got.frames) == (subject, (b"news",))
    got = far.recv()
    assert (got.subject, got.frames) == (subject, (b"news",))
    check_meta(got, source, there, pub, mid)
    far.nothing()
    near.nothing()


def test_a_malamute_mailbox_stays_on_the_gateway_that_holds_it(nets, rabbit):
    """Mail to an address is kept by the gateway it was sent to: its owner on the other
    gateway gets nothing, a client that opens the address on the sender's gateway gets it."""
    sender, far = nets[0].side("malamute"), nets[1].side("malamute")
    owner, address = far.mailbox_owner()
    pub = sender.publisher()
    witness_queue = unique("ch") + "/1"
    (witness,) = far.queue_consumers(witness_queue, 1)
    rabbit.wait_consumers(witness_queue)
    sender.send_direct(pub, address, "direct", (b"for you",))
    sender.publish_queue(pub, witness_queue, "after", (b"later",))
    assert witness.recv().frames == (b"later",)   # what was sent after it has crossed
    owner.nothing()
    owner.close()
    got = sender.client(address).recv(WAIT)
    assert (got.subject, got.frames) == ("direct", (b"for you",))


def test_a_twino_direct_message_to_a_client_on_the_other_gateway_is_unknown(nets):
    """Twino clients are known to the gateway they are connected to: a direct message from
    gateway 1 to a client of gateway 2 is refused as to an unknown client (404)."""
    owner, address = nets[1].side("twino").mailbox_owner()
    pub = nets[0].side("twino").publisher()
    assert pub.request(address, b"x").content_type == 404
    owner.nothing()

