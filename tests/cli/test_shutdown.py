"""SIGTERM under load, on a real `twistd mqksbridge` subprocess.

Two MQKS publishers send `publish --confirm` as fast as the broker confirms, an MQKS
consumer takes the queue, a Twino and a Malamute client sit connected. On SIGTERM the
process must exit 0 within the shutdown bound; the Twino client gets a Terminate frame,
the MQKS sockets are closed after their pending output; no message sent after the
listener closed is confirmed; and every confirmed message was delivered to the consumer
or is reported still queued (a queue in memory: gone with the process); with the queue
durable, every confirmed message is delivered before the exit or after a restart.
"""
import fcntl
import re
import signal
import socket
import struct
import termios
import threading
import time

import pytest
import pytest_twisted
from twisted.application import service
from twisted.internet import defer, reactor

from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.protocols.twino.codec import MessageType
from tests.conftest import RunningBroker
from tests.support.waits import unless, until, wait_until
from tests.support.process import BrokerProcess

BOUND = 5.0          # --shutdown-timeout
SLACK = 5.0          # interpreter exit and a busy machine


class Lines:
    """Reads lines from a socket in a thread until the broker closes it."""

    def __init__(self, sock):
        self.sock = sock
        self.lines = []          # (arrival time, line)
        self.ended = None        # "eof" or the error's name
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        buffer = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    self.ended = "eof"
                    return
                parts = (buffer + chunk).split(b"\n")
                buffer = parts.pop()
                now = time.monotonic()
                self.lines.extend((now, line.decode()) for line in parts)
        except OSError as exc:
            self.ended = type(exc).__name__


class Publisher:
    """Pipelined confirmed publishes; remembers when each id was sent."""

    def __init__(self, port, name):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.name = name
        self.sent = {}           # id -> send time
        self.reader = Lines(self.sock)
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.stop = False
        self.thread.start()

    def _send(self):
        i = 0
        try:
            while not self.stop:
                batch = []
                for _ in range(20):
                    mid = f"{self.name}-{i}"
                    i += 1
                    batch.append(f"{mid} publish --confirm ev {mid}\n")
                    self.sent[mid] = time.monotonic()
                self.sock.sendall("".join(batch).encode())
                while len(self.sent) - len(self.reader.lines) > 200 and not self.stop:
                    time.sleep(0.001)    # at most 200 unconfirmed: keeps the load steady
                    if self.reader.ended:
                        return
        except OSError:
            return

    def confirmed(self):
        return {line.split(" ", 1)[0]: at for at, line in self.reader.lines
                if line.endswith(" ok ")}


def drain(broker, queue, until_seen, timeout=30):
    """The message ids an MQKS consumer of `queue` gets until it has every id of
    `until_seen` (or `timeout` passed)."""
    sock = socket.create_connection(("127.0.0.1", broker.ports["mqks"]), timeout=timeout)
    sock.sendall(b"d-%s consume --confirm %s\n" % (queue.encode(), queue.encode()))
    lines = Lines(sock)
    deadline = time.monotonic() + timeout
    while not lines.lines and lines.ended is None and time.monotonic() < deadline:
        time.sleep(0.01)
    seen = set()
    while not until_seen <= seen and time.monotonic() < deadline and lines.ended is None:
        seen = {line.rsplit(" ", 1)[1] for _, line in lines.lines[1:]}
        time.sleep(0.01)
    sock.close()
    assert lines.lines and lines.lines[0][1] == f"d-{queue} ok ", lines.lines[:1]
    return seen


@pytest.mark.parametrize("durable", [False, True], ids=["in-memory", "durable"])
def test_sigterm_under_load_exits_0_with_goodbyes(tmp_path, durable):
    durability = ["--set", 'durability.queues=["load", "kept"]'] if durable else []
    broker = BrokerProcess(tmp_path, doors=("mqks", "malamute", "twino"),
                           args=["--shutdown-timeout", str(BOUND), *durability])
    broker.start()
    try:
        port = broker.ports["mqks"]
        consumer = socket.create_connection(("127.0.0.1", port), timeout=30)
        consumer.sendall(b"c1 consume --confirm load ev\n")
        deliveries = Lines(consumer)
        wait_until(lambda: deliveries.lines, 30, "the consume's answer", step=0.01)
        assert deliveries.lines[0][1] == "c1 ok "
        if durable:                      # `kept`: bound to ev, no consumer, holds everything
            consumer.sendall(b"k1 consume --confirm kept ev\nk2 delete_consumer --confirm k1\n")
            wait_until(lambda: len(deliveries.lines) >= 3, 30, "the answers for `kept`",
                       step=0.01)
            assert [line for _, line in deliveries.lines[1:3]] == ["k1 ok ", "k2 ok "]
        tw = twino.connect(port=broker.ports["twino"], name="watching", timeout=30)
        mlm = MalamuteClient(f"tcp://127.0.0.1:{broker.ports['malamute']}", "watcher")
        mlm.connect()
        publishers = [Publisher(port, f"p{k}") for k in range(2)]
        wait_until(unless(lambda: sum(len(p.confirmed()) for p in publishers) >= 2000,
                          lambda: broker.process.poll() is not None and broker.log()),
                   60, "2000 confirmed publishes", step=0.01)

        closed_at = []

        def probe():
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                except OSError:
                    closed_at.append(time.monotonic())
                    return
                time.sleep(0.002)
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()

        terminate = []

        def twino_reader():
            try:
                while True:
                    frame = tw.recv(30)
                    if frame is not None and frame.type == MessageType.TERMINATE:
                        terminate.append(frame)
            except (ConnectionError, OSError):
                return
        tw_thread = threading.Thread(target=twino_reader, daemon=True)
        tw_thread.start()

        signalled = time.monotonic()
        broker.process.send_signal(signal.SIGTERM)
        code = broker.process.wait(BOUND + SLACK)
        took = time.monotonic() - signalled
        for p in publishers:
            p.stop = True
            p.thread.join(10)
            p.reader.thread.join(10)
        deliveries.thread.join(10)
        tw_thread.join(10)
        prober.join(10)
        mlm.close = lambda: None          # the broker is gone: nothing to say goodbye to
    finally:
        broker.stop()
    log = broker.log()
    assert code == 0, log
    assert took < BOUND + SLACK, (took, log)
    assert "Traceback" not in log, log
    goodbyes = re.search(r"shutdown: (\d+) connections closed, (\d+) aborted", log)
    assert goodbyes and goodbyes.group(2) == "0" and int(goodbyes.group(1)) >= 5, log
    assert terminate, "the Twino client got no Terminate frame"
    assert deliveries.ended == "eof"
    assert all(p.reader.ended is not None for p in publishers)

    confirmed = {}
    for p in publishers:
        confirmed.update({mid: (at, p.sent[mid]) for mid, at in p.confirmed().items()})
    assert len(confirmed) >= 2000
    assert closed_at, "the listener never closed"
    late = [mid for mid, (_, sent) in confirmed.items() if sent > closed_at[0]]
    assert not late, f"confirmed though sent after the listener closed: {late[:5]}"

    delivered = {line.rsplit(" ", 1)[1] for _, line in deliveries.lines[1 + 2 * durable:]}
    queued = re.search(r"still queued in \d+ queues: load=(\d+)", log)
    missing = set(confirmed) - delivered
    assert len(missing) <= (int(queued.group(1)) if queued else 0), (len(missing), log[-2000:])
    if durable:                          # a confirm means on disk: all of them come back
        broker.start()
        try:
            load, kept = drain(broker, "load", missing), drain(broker, "kept", set(confirmed))
        finally:
            broker.stop()
        assert missing <= load, (len(missing - load), len(missing), broker.log()[-2000:])
        assert set(confirmed) <= kept, (len(set(confirmed) - kept), broker.log()[-2000:])


# -- the order, in process: a service that takes its time to stop (what a journal finishing
# its fsyncs will be) must find the doors no longer reading, and goodbyes must wait for it.

class SlowStop(service.Service):
    """stopService takes its time (as a journal's pending fsyncs do): until the test
    fires `done`."""

    def __init__(self):
        self.done = defer.Deferred()
        self.done_at = None
        self.stopping = False

    def stopService(self):
        super().stopService()
        self.stopping = True

        def finished(_):
            self.done_at = reactor.seconds()
        return self.done.addCallback(finished)


def unread(broker, door, port):
    """Bytes the client at local `port` sent that wait, unread, in the broker's socket of
    its connection (None once that connection is closed)."""
    for traffic in broker.doors[door].traffic.live.values():
        sock = getattr(traffic.transport, "socket", None)
        if sock is not None and traffic.transport.getPeer().port == port:
            return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
    return None


@pytest_twisted.ensureDeferred
async def test_no_confirm_while_stopping_and_goodbyes_after_pending_work():
    broker = await RunningBroker({"broker": {"shutdown_timeout": 5.0}}).start()
    slow = SlowStop()
    slow.setServiceParent(broker.top)
    consumer, publisher = await broker.mqks(), await broker.mqks()
    assert await consumer.request("c1 consume --confirm q ev") == "c1 ok "
    assert await publisher.request("m0 publish --confirm ev before") == "m0 ok "
    assert await consumer.line() == "c1 ok m0 event=ev before"
    closed_at = []
    consumer.closed.addCallback(lambda _: closed_at.append(reactor.seconds()))

    stopping = broker.top.stopService()
    await until(lambda: slow.stopping, what="the stop to reach SlowStop")
    during = [f"m{i} publish --confirm ev during{i}" for i in range(1, 11)]
    publisher.send(*during)
    size, port = sum(len(line) + 1 for line in during), publisher.transport.getHost().port
    await until(lambda: unread(broker, "mqks", port) == size,
                what="the sends at the broker, unread")
    slow.done.callback(None)
    await stopping
    await consumer.closed
    await publisher.closed
    assert slow.done_at is not None and closed_at[0] >= slow.done_at
    assert not publisher.lines, f"confirmed while stopping: {list(publisher.lines)}"
    assert publisher.lost and consumer.lost
    assert broker.top.stopped == {"goodbyes": 2, "aborted": 0, "in_time": True}


async def stuck_consumer(broker):
    """A consumer that stopped reading, holding megabytes of deliveries (its close cannot
    finish), and the publisher that sent them; returns (its socket, the publisher)."""
    stuck = socket.create_connection(("127.0.0.1", broker.mqks_port))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(b"c1 consume q ev\n")
    publisher = await broker.mqks()
    body = "x" * 60_000
    for i in range(200):                      # 12 MB, far more than the socket buffers
        publisher.send(f"m{i} publish ev {body}")
    assert await publisher.request("p1 ping x", timeout=10) == "p1 ok x"
    return stuck, publisher


@pytest_twisted.ensureDeferred
async def test_a_connection_that_cannot_drain_is_aborted_at_the_deadline():
    """The stuck consumer's close cannot finish, so the stop aborts it when the bound is
    reached on the broker's clock (the test's task.Clock: no real time is measured)."""
    broker = await RunningBroker({"broker": {"shutdown_timeout": 1.0}}).start()
    stuck, publisher = await stuck_consumer(broker)
    stopping = broker.top.stopService()
    await publisher.closed            # after the goodbyes: the stop waits for the closes
    broker.clock.advance(0.99)
    assert broker.top.stopped is None and not stopping.called
    broker.clock.advance(0.01)
    assert broker.top.stopped == {"goodbyes": 2, "aborted": 1, "in_time": False}
    await stopping
    stuck.close()


@pytest_twisted.ensureDeferred
async def test_the_in_process_broker_stop_moves_its_clock_to_the_deadline():
    """RunningBroker.stop (every fixture's teardown) ends a stop that only the deadline
    can end, though nothing but the test moves the broker's clock."""
    broker = await RunningBroker({"broker": {"shutdown_timeout": 0.2}}).start()
    stuck, _ = await stuck_consumer(broker)
    stopping = defer.ensureDeferred(broker.stop())
    await until(lambda: stopping.called, timeout=10, what="the harness's stop to end")
    await stopping
    stuck.close()
    assert broker.top.stopped["aborted"] == 1
