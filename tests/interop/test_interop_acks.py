"""Acks across doors: a Twino producer that waits for its ack hears what a consumer behind
another door did (ack, reject, ack timeout, taking it automatically), and MQKS ack/reject
semantics hold whoever published."""
import threading

import pytest

from tests.interop.sides import nothing, unique


def push_waiting(producer, channel, queue_id, body):
    """Push with PendingAcknowledge from a thread; `.result()` is the AckResult."""
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault(
        "ack", producer.push(channel, queue_id, body, wait_ack=True, timeout=20)))
    thread.start()

    def result():
        thread.join(30)
        return out["ack"]
    return result


@pytest.fixture
def queue(net):
    channel = unique("ch")
    net.side("twino").make_queue(f"{channel}/1", "round-robin", ack=True,
                                 AcknowledgeTimeout=1000)
    return channel


def mqks_consumer(net, channel, manual_ack=True):
    client = net.side("mqks").client()
    return client, client.consume(f"{channel}/1", manual_ack=manual_ack)


def test_mqks_ack_acks_the_twino_producer(net, queue):
    mqks, cid = mqks_consumer(net, queue)
    producer = net.side("twino").client()
    result = push_waiting(producer, queue, 1, b"work")
    got = mqks.recv()
    mqks.ack(cid, got.id)
    ack = result()
    assert ack.ok and ack.frame.message_id == got.id
    assert ack.frame.source == mqks.eval("request['client']")


def test_mqks_reject_nacks_the_producer_and_still_retries(net, queue):
    mqks, cid = mqks_consumer(net, queue)
    producer = net.side("twino").client()
    result = push_waiting(producer, queue, 1, b"work")
    got = mqks.recv()
    mqks.reject(cid, got.id)
    ack = result()
    assert (ack.ok, ack.reason) == (False, "rejected")
    again = mqks.recv()
    assert (again.id, again.data, again.retry) == (got.id, b"work", 1)
    mqks.ack(cid, again.id)


def test_ack_timeout_behind_mqks_nacks_the_producer(net):
    """Through the real process (the fast layer has the exact timing: see
    tests/mqks/test_mqks_door_timers.py)."""
    queue = unique("ch")
    net.side("twino").make_queue(f"{queue}/1", "round-robin", ack=True, AcknowledgeTimeout=100)
    mqks, _ = mqks_consumer(net, queue)
    producer = net.side("twino").client()
    result = push_waiting(producer, queue, 1, b"slow")
    assert mqks.recv().data == b"slow"              # ...and never acked
    ack = result()
    assert (ack.ok, ack.reason) == (False, "timeout")


def test_auto_ack_consumer_of_another_door_acks_by_taking(net, queue):
    mqks, _ = mqks_consumer(net, queue, manual_ack=False)
    producer = net.side("twino").client()
    ack = producer.push(queue, 1, b"taken", wait_ack=True, timeout=20)
    assert ack.ok
    assert mqks.recv().data == b"taken"


def test_mqks_reject_semantics_hold_for_a_twino_publish(net):
    """Two manual-ack MQKS consumers: a reject goes to the back with retry + 1, to whoever is
    next in turn."""
    queue = unique("ch") + "/1"
    mqks_side = net.side("mqks")
    first, second = mqks_side.queue_consumers(queue, 2, manual_ack=True)
    producer = net.side("twino").client()
    channel = queue.split("/")[0]
    for body in (b"a", b"b"):
        producer.push(channel, 1, body)
    a = first.recv()
    b = second.recv()
    assert (a.frames, b.frames) == ((b"a",), (b"b",))
    first.reject(a)
    retried = first.recv()
    assert (retried.frames, retried.retry) == ((b"a",), 1)
    second.ack(b)
    first.ack(retried)
    first.nothing()
    second.nothing()


def test_malamute_worker_taking_a_request_acks_the_twino_producer(net):
    channel = unique("ch")
    worker = net.side("malamute").client()
    worker.set_worker(f"{channel}/1")
    producer = net.side("twino").client()
    ack = producer.push(channel, 1, b"please", wait_ack=True, timeout=20)
    assert ack.ok
    assert worker.recv(10).frames == (b"please",)


def test_no_confirm_ever_reaches_a_malamute_sender(net, queue):
    """Whatever the consumer does with a request that carries a tracker, the Malamute
    client hears nothing back (its library halts on CONFIRM)."""
    mqks, cid = mqks_consumer(net, queue)
    sender = net.side("malamute").client()
    for body in (b"ack me", b"reject me"):
        sender.sendfor(f"{queue}/1", "job", body, tracker="trk-" + body.decode())
    first = mqks.recv()
    mqks.ack(cid, first.id)
    second = mqks.recv()
    mqks.reject(cid, second.id)
    mqks.ack(cid, mqks.recv().id)
    nothing(sender)
    assert sender.ping() >= 0                        # and its session is fine
