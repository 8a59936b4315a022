"""The interop suite's door x door matrix through two gateways on one RabbitMQ node: the
publisher on gateway 1, the consumer on gateway 2, both real `twistd -n mqksbridge`
processes with `[cluster] engine = "rabbitmq"` and every door (TextQueue inbox and outbox
directories of their own).

What crosses gateways (docs/cluster.md): queues (quorum queues), a stream's exact
bindings (a direct exchange), its readers (each gateway's readers' queue) and mailboxes
(quorum queues, their owners told on the control bus).

An MQKS consume or rebind and a Twino join are answered once RabbitMQ has the consumer or
binding; a Malamute worker's and a TextQueue outbox's are in place only later (the gateway
declares and consumes on its own round trips): so each test waits for them in RabbitMQ (a
passive declare's consumer count, the exchange's bindings) before it publishes on gateway
1, where one process needs no such wait.
"""
import itertools
import json
import urllib.request

import pytest

from tests.cluster.gateways import start
from tests.interop.conftest import SIDES
from tests.interop.sides import WAIT, unique
from tests.support.waits import wait_until

DOORS = sorted(SIDES)
PAIRS = list(itertools.product(DOORS, DOORS))     # the same door on two gateways counts too
PAIR_IDS = [f"{a}-to-{b}" for a, b in PAIRS]
LEAVERS = [(a, b) for a in DOORS for b in DOORS if b != "malamute"]   # Malamute has no acks
REJECTERS = [(a, b) for a in DOORS for b in DOORS if SIDES[b].rejects]
BOUND_READERS = ("mqks", "textqueue")             # bound queues: RabbitMQ bindings
MAILERS = [(a, b) for a in ("malamute", "textqueue", "twino") for b in ("malamute", "twino")
           if (a, b) != ("twino", "twino")]   # its ack is the receiver's: test_cluster_mailboxes


@pytest.fixture(scope="module")
def gateways(_rabbitmq_node_session, tmp_path_factory):
    """Two gateways on the session's RabbitMQ node. A Twino producer's ack is sent once
    RabbitMQ has the message (`received`), as the one-process matrix's pairs expect of a
    queue; the default `relay` across gateways is test_cluster_modes'."""
    yield from start(_rabbitmq_node_session, tmp_path_factory,
                     settings='[twino]\nproducer_ack_default = "received"\n')


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
    the door shows it (Twino shows no retry count). After a Twino push the queue is push-all
    (Twino's auto-create default), whose copies are each consumer's own: the taker is then
    a consumer on gateway 2 as well."""
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
    (MQKS and TextQueue readers: RabbitMQ bindings) and gateway 2's Malamute readers and
    Twino readers (a Push queue bound to the router; through its readers' queue), as those
    on gateway 1.
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
    got = near.recv()
    assert (got.subject, got.frames) == (subject, (b"news",))
    got = far.recv()
    assert (got.subject, got.frames) == (subject, (b"news",))
    check_meta(got, source, there, pub, mid)
    far.nothing()
    near.nothing()


def wait_owner_known(gateway, address):
    """Until `gateway`'s admin view shows a live owner of `address` (the control bus told it:
    a Twino or TextQueue sender needs its gateway to know the address, a Malamute one not)."""
    url = f"http://127.0.0.1:{gateway.ports['admin']}/api/mailboxes?limit=100000"

    def known():
        with urllib.request.urlopen(url, timeout=WAIT) as answer:
            return any(row["name"] == address and row["owner"]
                       for row in json.load(answer)["items"])
    wait_until(known, 30, f"the owner of {address} known", step=0.05)


@pytest.mark.parametrize("src_door, dst_door", MAILERS, ids=[f"{a}-to-{b}" for a, b in MAILERS])
def test_mail_reaches_its_owner_on_the_other_gateway(nets, gateways, src_door, dst_door):
    """A message to a client's mailbox (Malamute address, Twino client id) sent on gateway 1
    reaches its owner on gateway 2 with its envelope, as inside one process."""
    src, dst = nets[0].side(src_door), nets[1].side(dst_door)
    owner, address = dst.mailbox_owner()
    wait_owner_known(gateways[0], address)
    pub = src.publisher()
    mid = src.send_direct(pub, address, "direct", (b"for you",))
    got = owner.recv()
    assert (got.subject, got.frames) == ("direct", (b"for you",))
    check_meta(got, src, dst, pub, mid)
    if dst.door == "malamute" and src.door != "malamute":
        assert got.tracker == mid           # the message id, for the reply to name

