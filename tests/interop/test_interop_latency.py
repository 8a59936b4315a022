"""The publish-to-deliver histogram observes every publisher door x consumer door path:
queues (each door's consumer, Twino pulls, TextQueue outbox files), streams and
mailboxes, the MQKS and Malamute doors' own fast paths included.

A real `twistd` with `admin.latency_sample_every = 1`, so every delivery is timed and the
histogram's count, read through /metrics with prometheus_client's own parser, grows by
exactly the deliveries a test made.
"""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.interop.conftest import spool_broker
from tests.interop.sides import unique
from tests.support.admin import fetch

DOORS = ("mqks", "malamute", "twino", "textqueue")
HISTOGRAM = "mqksbridge_publish_to_deliver_seconds"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """Every delivery timed; conftest's `net` talks to this broker."""
    process = spool_broker(tmp_path_factory.mktemp("latency"),
                           "[admin]\nlatency_sample_every = 1\n",
                           doors=("mqks", "malamute", "twino", "admin"))
    yield process
    process.stop()


def timed(net):
    """The histogram's count and sum, from /metrics."""
    status, _, raw = fetch(net.ports["admin"], "/metrics")
    assert status == 200
    samples = {s.name: s.value for f in text_string_to_metric_families(raw.decode())
               if f.name == HISTOGRAM for s in f.samples}
    return samples[HISTOGRAM + "_count"], samples[HISTOGRAM + "_sum"]


def publish_queue(side, pub, queue, body):
    """A Twino push is not waited for (its ack waits on a Twino member's own ack)."""
    if side.door == "twino":
        side.publish_queue(pub, queue, "ev", (body,), wait_ack=False)
        pub.ping()
    else:
        side.publish_queue(pub, queue, "ev", (body,))


def received(readers, n):
    for reader in readers:
        for _ in range(n):
            assert reader.recv() is not None


def assert_timed(net, before, deliveries):
    count, total = timed(net)
    assert count == before[0] + deliveries, (before, count)
    assert 0 <= total - before[1] < 60 * deliveries


@pytest.mark.parametrize("consumer", DOORS)
@pytest.mark.parametrize("publisher", DOORS)
def test_queue_deliveries_are_timed(net, publisher, consumer):
    pub_side, sub_side = net.side(publisher), net.side(consumer)
    queue = f"{unique('lat')}/1"
    readers = sub_side.queue_consumers(queue, 1)
    pub = pub_side.publisher()
    before = timed(net)
    for i in range(2):
        publish_queue(pub_side, pub, queue, b"m%d" % i)
    received(readers, 2)
    assert_timed(net, before, 2)


@pytest.mark.parametrize("reader", DOORS)
@pytest.mark.parametrize("publisher", DOORS)
def test_stream_deliveries_are_timed(net, publisher, reader):
    """A Malamute reader takes stream copies (its own delivery path); the other doors read
    a stream through a queue bound to it."""
    pub_side = net.side(publisher)
    subject = unique("s")
    readers = net.side(reader).stream_readers(1, subject)
    pub = pub_side.publisher()
    before = timed(net)
    for i in range(2):
        pub_side.publish_stream(pub, subject, (b"m%d" % i,))
    received(readers, 2)
    assert_timed(net, before, 2)


@pytest.mark.parametrize("owner", ("malamute", "twino"))
@pytest.mark.parametrize("publisher", DOORS)
def test_mailbox_deliveries_are_timed(net, publisher, owner):
    pub_side = net.side(publisher)
    if not pub_side.sends_direct:
        pytest.skip(f"{publisher} clients send no direct messages")
    reader, address = net.side(owner).mailbox_owner()
    pub = pub_side.publisher()
    before = timed(net)
    for i in range(2):
        if publisher == owner == "twino":    # its ack would wait on the recipient's
            pub.send_direct(address, b"m%d" % i, wait_ack=False)
            pub.ping()
        else:
            pub_side.send_direct(pub, address, "ev", (b"m%d" % i,))
    received([reader], 2)
    assert_timed(net, before, 2)


@pytest.mark.parametrize("publisher", DOORS)
def test_twino_pulls_are_timed(net, publisher):
    pub_side, twino = net.side(publisher), net.side("twino")
    channel = unique("pl")
    twino.make_queue(f"{channel}/1", "pull")
    pub = pub_side.publisher()
    for i in range(2):
        publish_queue(pub_side, pub, f"{channel}/1", b"m%d" % i)
    puller = twino.client()
    assert puller.join(channel) == 0
    before = timed(net)
    assert len(puller.pull(channel, 1, 2)) == 2
    assert_timed(net, before, 2)
