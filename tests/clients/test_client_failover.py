"""The blocking clients and the `mqksbridge` command given several gateways' addresses:
when the gateway a client is on dies (`kill -9`), the client moves to the next address,
re-establishes its session there (MQKS consumers, Malamute address and registrations,
Twino channels) and carries on; with every address down it fails with a clear error
in bounded time, never hangs.

Two real `twistd mqksbridge` processes on free loopback ports stand for two gateways.
With the embedded engine they do not share queues: the message a consumer had on the
dead broker is not redelivered by the second (over a cluster engine it would be, with
retry + 1). These tests check the client's side: the move, the session on the second
broker (what is published there after the move reaches the re-created consumer), a
confirmed publish that the death interrupted done again there, and that the client does
not ack a delivery of the lost connection on the new one.
"""
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.failover import ROUNDS, AllAddressesDown
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.bridge.clients.mqks import MqksClient
from mqksbridge.protocols.twino.codec import ContentType
from tests.support.process import BrokerProcess, free_port

DOORS = ("mqks", "malamute", "twino")
SCRIPT = os.path.join(os.path.dirname(sys.executable), "mqksbridge")
TIMEOUT = 10.0


@pytest.fixture
def gateways(tmp_path):
    """Two brokers with the three doors, started side by side; a test kills the first."""
    brokers = [BrokerProcess(tmp_path / name, doors=DOORS,
                             all_doors=(*DOORS, "admin")) for name in ("a", "b")]
    for broker in brokers:
        os.makedirs(broker.workdir)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(BrokerProcess.start, brokers))
    yield brokers
    for broker in brokers:
        broker.stop()


def addresses(brokers, door):
    return [("127.0.0.1", broker.ports[door]) for broker in brokers]


def endpoints(brokers):
    return [f"tcp://127.0.0.1:{broker.ports['malamute']}" for broker in brokers]


def kill(broker):
    """kill -9, and wait until the process is gone."""
    broker.stop()
    assert broker.process.returncode == -9


def test_mqks_client_moves_and_consumes_again(gateways):
    a, b = gateways
    moves = []
    client = MqksClient(addresses=addresses(gateways, "mqks"), timeout=TIMEOUT,
                        on_failover=lambda old, new: moves.append((old, new)))
    cid = client.consume("jobs", ["job"], manual_ack=True)
    client.publish("job", "one")
    first = client.recv()
    assert first.data == b"one" and client.address == ("127.0.0.1", a.ports["mqks"])

    kill(a)
    # The client has not seen the death yet: this publish goes to the dead connection,
    # finds it lost, and is sent again (same id) on b, after the consumer is re-issued.
    mid = client.publish("job", "two")
    assert moves == [(("127.0.0.1", a.ports["mqks"]), ("127.0.0.1", b.ports["mqks"]))]
    assert client.failovers == 1 and client.address == ("127.0.0.1", b.ports["mqks"])
    second = client.recv()
    assert (second.consumer, second.id, second.data) == (cid, mid, b"two")
    assert second.retry == 0
    assert client.ack(cid, first.id) is None        # of the lost connection: not sent
    assert client.ack(cid, second.id) is not None   # confirmed by b
    with pytest.raises(TimeoutError):               # acked: b does not deliver it again
        client.recv(timeout=0.2)

    kill(b)                                         # no gateway left: an error, no hang
    with pytest.raises(AllAddressesDown):
        client.recv()
    client.close()


def test_malamute_client_moves_with_its_address_and_registrations(gateways):
    a, b = gateways
    moves = []
    client = MalamuteClient(endpoints(gateways), "worker-1", timeout=TIMEOUT,
                            on_failover=lambda old, new: moves.append(new))
    client.connect()
    client.set_worker("jobs")
    client.set_consumer("news", "^hot")
    client.set_producer("out")

    kill(a)
    client.ping()                                   # sees the loss, moves, registers again
    assert moves == [endpoints(gateways)[1]] and client.failovers == 1

    with MalamuteClient(endpoints(gateways)[1], timeout=TIMEOUT) as other:
        other.set_producer("news")
        other.send("cold", b"skipped")
        other.send("hot", b"headline")
        other.sendfor("jobs", "resize", b"photo")
        other.sendto("worker-1", "hello", b"mail")
        other.ping()
        got = sorted((d.command, d.subject, d.frames) for d in
                     (client.recv(timeout=TIMEOUT) for _ in range(3)))
    assert got == [("MAILBOX DELIVER", "hello", (b"mail",)),
                   ("SERVICE DELIVER", "resize", (b"photo",)),
                   ("STREAM DELIVER", "hot", (b"headline",))]
    assert client.recv(timeout=0.2) is None
    client.close()


def create_queue(port, channel, ack):
    """A round-robin queue on one broker (each has its own: no shared engine here)."""
    with twino.connect(port=port, timeout=TIMEOUT) as admin:
        answer = admin.operation(ContentType.CREATE_QUEUE, channel, [
            ("Channel-Name", channel), ("Queue-Id", "0"), ("Queue-Status", "round-robin")],
            json.dumps({"RequestAcknowledge": ack}).encode())
        assert answer.content_type == 0


def test_twino_client_moves_and_joins_again(gateways):
    """The queue acks a push when its consumer acks it (the default producer-ack
    policy), so the producer waits in a thread of its own."""
    a, b = gateways
    for broker in gateways:
        create_queue(broker.ports["twino"], "jobs", True)
    moves = []
    consumer = twino.connect(addresses=addresses(gateways, "twino"), name="worker",
                             timeout=TIMEOUT, on_failover=lambda old, new: moves.append(new))
    assert consumer.join("jobs") == 0
    producer = twino.connect(addresses=addresses(gateways, "twino"), timeout=TIMEOUT)
    with ThreadPoolExecutor(1) as pool:
        one = pool.submit(producer.push, "jobs", 0, "one", wait_ack=True)
        first = consumer.recv()
        assert first.content == b"one" and first.pending_ack

        kill(a)             # the push of "one" waits for its ack: in flight
        consumer.ping()     # sees the loss, moves, joins `jobs` on b
        assert moves == [("127.0.0.1", b.ports["twino"])] and consumer.failovers == 1
        consumer.ack(first)                         # of the lost connection: not sent
        again = consumer.recv()                     # the producer pushed it again on b
        assert (again.content, again.message_id) == (b"one", first.message_id)
        consumer.ack(again)
        assert one.result(TIMEOUT).ok and producer.failovers == 1

        two = pool.submit(producer.push, "jobs", 0, "two", wait_ack=True)
        second = consumer.recv()
        assert second.content == b"two" and second.pending_ack
        consumer.ack(second)
        assert two.result(TIMEOUT).ok
    assert consumer.recv(timeout=0.2) is None
    consumer.close()
    producer.close()


@pytest.mark.parametrize("door", DOORS)
def test_every_address_down_is_a_clear_error_in_bounded_time(door):
    """Nothing listens: the bounded passes end in AllAddressesDown naming each address."""
    ports = [free_port(), free_port()]
    started = time.monotonic()
    with pytest.raises(AllAddressesDown) as raised:
        if door == "mqks":
            MqksClient(addresses=[("127.0.0.1", p) for p in ports], timeout=TIMEOUT)
        elif door == "twino":
            twino.connect(addresses=[("127.0.0.1", p) for p in ports], timeout=TIMEOUT)
        else:
            MalamuteClient([f"tcp://127.0.0.1:{p}" for p in ports],
                           timeout=TIMEOUT).connect()
    elapsed = time.monotonic() - started
    assert all(str(p) in str(raised.value) for p in ports)
    assert f"after {ROUNDS} passes" in str(raised.value)
    assert elapsed < TIMEOUT            # refused at once: the pauses between passes only


def publish_one(door, broker, body):
    """`body` into queue `jobs` on one broker, through `door`, taken when this returns."""
    if door == "mqks":
        client = MqksClient(port=broker.ports["mqks"], timeout=TIMEOUT)
        client.delete_consumer(client.consume("jobs", ["job"]))   # the queue waits
        client.publish("job", body)
        client.close()
    elif door == "malamute":
        with MalamuteClient(f"tcp://127.0.0.1:{broker.ports['malamute']}",
                            timeout=TIMEOUT) as client:
            client.sendfor("jobs", "job", body)
            client.ping()
    else:
        with twino.connect(port=broker.ports["twino"], timeout=TIMEOUT) as client:
            client.push("jobs", 0, body)
            client.ping()


@pytest.mark.parametrize("door", DOORS)
def test_cli_consumer_carries_on_with_the_next_gateway(gateways, door):
    """`mqksbridge consume DOOR://A,B jobs`: it says on standard error when it moved,
    and prints what is published on B after that."""
    a, b = gateways
    if door == "malamute":
        url, names = "malamute://" + ",".join(endpoints(gateways)), endpoints(gateways)
    else:
        names = [f"127.0.0.1:{broker.ports[door]}" for broker in gateways]
        url = f"{door}://" + ",".join(names)
    if door == "twino":
        for broker in gateways:
            create_queue(broker.ports["twino"], "jobs", True)
    extra = {"mqks": ["--event", "job", "--ack"], "twino": ["--ack"], "malamute": []}[door]
    publish_one(door, a, "one")
    consume = subprocess.Popen([SCRIPT, "consume", url, "jobs", *extra, "--count", "2",
                                "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert consume.stdout.readline() == b"one\n"
        kill(a)
        moved = consume.stderr.readline().decode()
        assert moved == f"mqksbridge: lost {names[0]}; carrying on with {names[1]}\n"
        publish_one(door, b, "two")
        assert consume.stdout.readline() == b"two\n"
        assert consume.wait(TIMEOUT) == 0
    finally:
        consume.kill()
        consume.wait()


def test_cli_publish_skips_a_dead_gateway_and_names_all_when_none_answers(gateways):
    a, b = gateways
    kill(a)
    url = "twino://" + ",".join(f"127.0.0.1:{broker.ports['twino']}" for broker in gateways)
    create_queue(b.ports["twino"], "jobs", False)
    with twino.connect(port=b.ports["twino"], timeout=TIMEOUT) as consumer:
        assert consumer.join("jobs") == 0
        done = subprocess.run([SCRIPT, "publish", url, "--queue", "jobs", "hello"],
                              capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert consumer.recv().content == b"hello"
    kill(b)
    done = subprocess.run([SCRIPT, "publish", url, "--queue", "jobs", "hello"],
                          capture_output=True, timeout=60)
    assert done.returncode == 3
    assert all(f"127.0.0.1:{broker.ports['twino']}" in done.stderr.decode()
               for broker in gateways)
