"""The blocking MalamuteClient against the broker's Malamute door, over tcp and ipc.

The broker runs in the test reactor; each client scenario runs in a worker thread.
"""

import time
from types import SimpleNamespace

import pytest
import pytest_twisted
from twisted.internet import reactor, threads

from mqksbridge.bridge import config
from mqksbridge.bridge.clients.malamute import Delivery, MalamuteClient, MalamuteError, MalamuteTimeout
from mqksbridge.bridge.service import build
from mqksbridge.protocols.malamute import codec


@pytest.fixture(params=["tcp", "ipc"])
def broker(request, tmp_path):
    endpoint = "tcp://127.0.0.1:*" if request.param == "tcp" else "ipc://%s" % (tmp_path / "m.ipc")
    top, _, _, listeners = build(config.load(overrides={
        "mqks": {"listen": []}, "twino": {"listen": []}, "admin": {"listen": []},
        "malamute": {"listen": [endpoint]}}),
        reactor)
    top.startService()
    listener = listeners["malamute"][0]
    pytest_twisted.blockon(listener.ready)
    yield SimpleNamespace(endpoint=listener.endpoints[0])
    pytest_twisted.blockon(top.stopService())


@pytest_twisted.inlineCallbacks
def test_connect_ping_close(broker):
    def scenario():
        client = MalamuteClient(broker.endpoint, "alice", timeout=5)
        client.connect()
        assert client.connected
        assert 0 <= client.ping() < 5
        client.close()
        assert not client.connected
        client.close()
    yield threads.deferToThread(scenario)


@pytest_twisted.inlineCallbacks
def test_stream(broker):
    def scenario():
        with MalamuteClient(broker.endpoint, "reader") as reader, \
                MalamuteClient(broker.endpoint, "writer") as writer:
            reader.set_consumer("weather", "temp.")
            writer.set_producer("weather")
            writer.send("rain.moscow", "0")
            writer.send("temp.moscow", "10", b"\x00")
            got = reader.recv(5)
            assert got == Delivery("STREAM DELIVER", "weather", "writer", "temp.moscow", "",
                                   (b"10", b"\x00"))
            reader.ping()                        # a barrier: anything due came before
            assert reader.recv(0) is None
    yield threads.deferToThread(scenario)


@pytest_twisted.inlineCallbacks
def test_mailbox_and_service(broker):
    def scenario():
        with MalamuteClient(broker.endpoint, "bob") as bob, \
                MalamuteClient(broker.endpoint, "worker") as worker, \
                MalamuteClient(broker.endpoint, "") as anon:
            worker.set_worker("svc", r"req\.\d")
            anon.sendto("bob", "hi", "x", tracker="trk", timeout=1000)
            assert bob.recv(5) == Delivery("MAILBOX DELIVER", "bob", "", "hi", "trk", (b"x",))
            bob.sendfor("svc", "req.1", "a", "b", tracker="t1")
            request = worker.recv(5)
            assert request == Delivery("SERVICE DELIVER", "svc", "bob", "req.1", "t1", (b"a", b"b"))
            worker.sendto(request.sender, "answer")
            assert bob.recv(5).subject == "answer"
    yield threads.deferToThread(scenario)


@pytest_twisted.inlineCallbacks
def test_deliveries_during_a_wait_are_kept(broker):
    def scenario():
        with MalamuteClient(broker.endpoint, "r") as reader, \
                MalamuteClient(broker.endpoint, "w") as writer:
            reader.set_consumer("s")
            writer.set_producer("s")
            writer.send("one")
            writer.send("two")
            writer.ping()
            reader.ping()       # PONG arrives after both deliveries
            assert [reader.recv(10).subject, reader.recv(10).subject] == ["one", "two"]
    yield threads.deferToThread(scenario)


@pytest_twisted.inlineCallbacks
def test_pipelined_sends_arrive_in_order(broker):
    def scenario():
        with MalamuteClient(broker.endpoint, "r", hwm=0) as reader, \
                MalamuteClient(broker.endpoint, "w", hwm=0) as writer:
            reader.set_consumer("s")
            writer.set_producer("s")
            for i in range(2000):
                writer.send("n", b"%d" % i)
            got = [reader.recv(5) for _ in range(2000)]
            assert [int(d.frames[0]) for d in got if d] == list(range(2000))
    yield threads.deferToThread(scenario)


@pytest_twisted.inlineCallbacks
def test_error_from_broker_raises(broker):
    def scenario():
        with MalamuteClient(broker.endpoint, "x") as client:
            client.send("no producer set")
            with pytest.raises(MalamuteError) as error:
                client.ping()
            assert error.value.code == 300
            assert not client.connected
    yield threads.deferToThread(scenario)


@pytest_twisted.inlineCallbacks
def test_invalid_pattern_refused_locally_but_raw_is_possible(broker):
    def scenario():
        with MalamuteClient(broker.endpoint, "x") as client:
            with pytest.raises(ValueError):
                client.set_consumer("s", "[")
            with pytest.raises(ValueError):
                client.set_worker("svc", "a)")
            client.send_command(codec.StreamRead("s", "["))
            assert client.recv_command(5) == codec.Ok()
            client.send_command([b"\xaa\xa8\x02"])
            assert client.recv_command(5) == codec.ConnectionPong()
            assert client.recv_command(0.1) is None
    yield threads.deferToThread(scenario)


@pytest_twisted.inlineCallbacks
def test_remove_consumer(broker):
    def scenario():
        with MalamuteClient(broker.endpoint, "x") as client:
            client.remove_consumer("never-read")
    yield threads.deferToThread(scenario)


def test_timeout_without_broker():
    client = MalamuteClient("tcp://127.0.0.1:9", "x", timeout=0.2)
    started = time.monotonic()
    with pytest.raises(MalamuteTimeout):
        client.connect()
    assert time.monotonic() - started < 2
    client.close()
