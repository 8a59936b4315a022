"""In-process door benchmarks: MQKS lines and Malamute frames fed straight into a door,
no sockets and no reactor, so that a change to a door's hot path can be measured against
another checkout in the same run (interleaved, best of N, ratios).

    python -m bench.door_inproc --base /path/to/other/checkout [--runs 7] [--cases a,b]

Each measurement is a fresh process with PYTHONPATH set to one checkout's `src/`; the two
checkouts alternate (ABBA), and the best rate of each is compared. Rates are per second of the
process's CPU time, so other work on a shared machine disturbs them less. Only APIs both
sides have are used: the door classes, their entry points (`dataReceived`,
`received_all`) and the codecs.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BODY = b"x" * 40
BATCH = 256                 # lines or messages per read


class FakeTransport:
    """What a door's connection writes to: counts bytes, never pushes back."""

    disconnecting = False

    def __init__(self):
        self.written = 0

    def write(self, data):
        self.written += len(data)

    def writeSequence(self, parts):
        self.written += sum(map(len, parts))

    def registerProducer(self, producer, streaming):
        pass

    def unregisterProducer(self):
        pass

    def getPeer(self):
        return type("Peer", (), {"host": "127.0.0.1", "port": 1})()

    def getHost(self):
        return self.getPeer()

    def loseConnection(self):
        pass

    def pauseProducing(self):
        pass

    def resumeProducing(self):
        pass


class Turns:
    """The reactor as the flush scheduler sees it: callLater(0) runs at run()."""

    def __init__(self):
        self.calls = []

    def seconds(self):
        return time.monotonic()

    def callLater(self, delay, fn, *args):
        self.calls.append((fn, args))

    def run(self):
        while self.calls:
            calls, self.calls = self.calls, []
            for fn, args in calls:
                fn(*args)


def engine(clock):
    """What doors run on: the checkout's embedded engine, or the core's Broker in a
    checkout from before the engine seam (bridge.engine)."""
    try:
        from mqksbridge.bridge.engine import EmbeddedEngine as Engine
    except ImportError:
        from mqksbridge.core import Broker as Engine
    return Engine(clock)


def mqks(n, manual, queues=1):
    """One publisher, a consumer on each of `queues` queues bound to its event (each on
    its own connection); rates are per event published."""
    from mqksbridge.bridge.mqks.door import MqksConnection, MqksDoor
    from mqksbridge.bridge.outbox import FlushScheduler
    from mqksbridge.core import FakeClock

    turns = Turns()
    door = MqksDoor(engine(FakeClock()), FlushScheduler(turns))
    consumers = [MqksConnection(door) for _ in range(queues)]
    publisher = MqksConnection(door)
    for k, conn in enumerate(consumers):
        conn.makeConnection(FakeTransport())
        conn.dataReceived(b"c%d consume q%d ev%s\n" % (k + 1, k, b" --manual-ack" if manual
                                                     else b""))
    consumer = consumers[0]
    publisher.makeConnection(FakeTransport())
    turns.run()
    chunks = [b"".join(b"m%d publish ev %s\n" % (i, BODY) for i in range(k, k + BATCH))
              for k in range(0, n, BATCH)]
    acks = [b"".join(b"a%d ack c1 m%d\n" % (i, i) for i in range(k, k + BATCH))
            for k in range(0, n, BATCH)] if manual else None
    start = time.process_time()
    for k, chunk in enumerate(chunks):
        publisher.dataReceived(chunk)
        turns.run()
        if acks:
            consumer.dataReceived(acks[k])
            turns.run()
    seconds = time.process_time() - start
    assert consumer.transport.written > n * 40, consumer.transport.written
    return n / seconds


class FakeRouter:
    """The ZeroMQ ROUTER as the Malamute door sees it."""

    def __init__(self):
        self.sent = 0

    def send(self, rid, frames):
        self.sent += 1
        return True

    def busy(self, rid):
        return False

    def attach_client(self, rid, client):
        pass

    def link(self, rid):
        """A peer's connection (ZmtpConnection's send, offer and send_run)."""
        router = self

        class Link:
            def send(self, frames):
                return router.send(rid, frames)

            def offer(self, frames):
                return router.send(rid, frames)

            def send_run(self, data, count):
                router.sent += count
                return True
        return Link()


def malamute(n, kind):
    from mqksbridge.bridge.malamute.door import MalamuteDoor
    from mqksbridge.core import FakeClock
    from mqksbridge.protocols.malamute import codec

    door = MalamuteDoor(engine(FakeClock()))
    router = door.transport = FakeRouter()
    worker, client = b"\x00\x00\x00\x00\x01", b"\x00\x00\x00\x00\x02"
    door.received_all(worker, [codec.encode(codec.ConnectionOpen("worker"))])
    door.received_all(client, [codec.encode(codec.ConnectionOpen("client"))])
    if kind == "service":
        door.received_all(worker, [codec.encode(codec.ServiceOffer("svc", ""))])
        message = codec.encode(codec.ServiceSend("svc", "req", "", 0, (BODY,)))
    elif kind in ("stream", "stream-mixed"):
        door.received_all(worker, [codec.encode(codec.StreamRead("news", ""))])
        door.received_all(client, [codec.encode(codec.StreamWrite("news"))])
        message = codec.encode(codec.StreamSend("subject", (BODY,)))
    else:
        message = codec.encode(codec.MailboxSend("worker", "mail", "", 0, (BODY,)))
    if kind == "stream-mixed":          # every message a new header (mlm_perftest's mix)
        other = codec.encode(codec.StreamSend("other", (BODY,)))
        batches = [[list(other if k % 2 else message) for k in range(BATCH)]
                   for _ in range(0, n, BATCH)]
    else:
        batches = [[list(message) for _ in range(BATCH)] for _ in range(0, n, BATCH)]
    before = router.sent
    start = time.process_time()
    for batch in batches:
        door.received_all(client, batch)
    seconds = time.process_time() - start
    assert router.sent - before == len(batches) * BATCH, router.sent - before
    return len(batches) * BATCH / seconds


def malamute_wire(n, workers, size=len(BODY), kind="service"):
    """Service requests (or stream or mailbox messages, `kind`) through the whole door as
    bytes: ZMTP decode, session, core, DELIVER encode and the outbox (bench.outside does
    the same over TCP)."""
    from mqksbridge.bridge.malamute.door import MalamuteDoor
    from mqksbridge.bridge.malamute.zmtp_router import ZmtpRouter
    from mqksbridge.bridge.outbox import FlushScheduler
    from mqksbridge.core import FakeClock
    from mqksbridge.protocols.malamute import codec
    from mqksbridge.protocols.zmtp.codec import GREETING, message, ready

    turns = Turns()
    door = MalamuteDoor(engine(FakeClock()))
    router = door.transport = ZmtpRouter(FlushScheduler(turns), door.received_all, door.lost)

    def peer(*commands):
        conn = router.buildProtocol(None)
        conn.makeConnection(FakeTransport())
        conn.dataReceived(GREETING + ready("DEALER"))
        conn.dataReceived(b"".join(message(codec.encode(c)) for c in commands))
        turns.run()
        return conn

    body = b"x" * size
    if kind == "stream":                 # bench.malamute_load's reader and writer
        crew = [peer(codec.ConnectionOpen(f"worker-{k}"), codec.StreamRead("bench", "temp."))
                for k in range(workers)]
        client = peer(codec.ConnectionOpen("client"), codec.StreamWrite("bench"))
        one = message(codec.encode(codec.StreamSend("temp.moscow", (body,))))
    elif kind == "mailbox":
        crew = [peer(codec.ConnectionOpen("worker-0"))]
        client = peer(codec.ConnectionOpen("client"))
        one = message(codec.encode(codec.MailboxSend("worker-0", "subj", "", 0, (body,))))
    else:
        crew = [peer(codec.ConnectionOpen(f"worker-{k}"), codec.ServiceOffer("svc", ".*"))
                for k in range(workers)]
        client = peer(codec.ConnectionOpen("client"))
        one = message(codec.encode(codec.ServiceSend("svc", "req", "", 0, (body,))))
    per_chunk = max(1, 65536 // len(one))
    chunks = [one * per_chunk for _ in range(0, n, per_chunk)]
    before = sum(w.transport.written for w in crew)
    start = time.process_time()
    for chunk in chunks:
        client.dataReceived(chunk)
        turns.run()
    seconds = time.process_time() - start
    count = len(chunks) * per_chunk
    assert sum(w.transport.written for w in crew) - before >= count * size
    return count / seconds


def malamute_hops(n):
    """A mailbox round trip's hops (bench.outside's malamute-rtt): one message per read and a
    turn each, through the whole door as bytes: its work per hop, reactor and syscalls aside."""
    from mqksbridge.bridge.malamute.door import MalamuteDoor
    from mqksbridge.bridge.malamute.zmtp_router import ZmtpRouter
    from mqksbridge.bridge.outbox import FlushScheduler
    from mqksbridge.core import FakeClock
    from mqksbridge.protocols.malamute import codec
    from mqksbridge.protocols.zmtp.codec import GREETING, message, ready

    turns = Turns()
    door = MalamuteDoor(engine(FakeClock()))
    router = door.transport = ZmtpRouter(FlushScheduler(turns), door.received_all, door.lost)
    peers = []
    for name in ("a", "b"):
        conn = router.buildProtocol(None)
        conn.makeConnection(FakeTransport())
        conn.dataReceived(GREETING + ready("DEALER"))
        conn.dataReceived(message(codec.encode(codec.ConnectionOpen(name))))
        peers.append(conn)
    turns.run()
    (a, b), body = peers, (b"x",)
    ping = message(codec.encode(codec.MailboxSend("b", "ping", "", 0, body)))
    pong = message(codec.encode(codec.MailboxSend("a", "pong", "", 0, body)))
    before = a.transport.written
    b.dataReceived(pong)                 # one delivery to a, to know its size
    turns.run()
    one, before = a.transport.written - before, a.transport.written
    start = time.process_time()
    for _ in range(n // 2):
        a.dataReceived(ping)
        turns.run()
        b.dataReceived(pong)
        turns.run()
    seconds = time.process_time() - start
    assert a.transport.written - before == n // 2 * one > 0
    return n // 2 * 2 / seconds


def twino(n, broadcast):
    """A producer pushing to (jobs, 1) and a member acking every message (push), or four
    members that do not ack (broadcast)."""
    import copy

    from twisted.internet import task

    from mqksbridge.bridge.config import DEFAULTS
    from mqksbridge.bridge.outbox import FlushScheduler
    from mqksbridge.bridge.twino.door import TwinoConnection, TwinoDoor
    from mqksbridge.core import FakeClock
    from mqksbridge.protocols.twino.codec import (PROTOCOL, ContentType, Frame, MessageType,
                                                  acknowledge, encode)

    turns = Turns()
    settings = copy.deepcopy(DEFAULTS["twino"])
    door = TwinoDoor(engine(FakeClock()), FlushScheduler(turns), task.Clock(), settings)

    def connection(name):
        conn = TwinoConnection(door)
        conn.makeConnection(FakeTransport())
        hello = Frame(MessageType.SERVER, True, message_id="h", content_type=ContentType.HELLO,
                      content=b"CONNECT /\r\nClient-Id: %s\r\n" % name.encode())
        conn.dataReceived(PROTOCOL + encode(hello))
        turns.run()
        return conn

    producer = connection("producer")
    create = Frame(MessageType.SERVER, target="jobs", content_type=ContentType.CREATE_QUEUE,
                   headers=[("Queue-Id", "1")] + ([("Queue-Status", "Broadcast")]
                                                  if broadcast else []),
                   content=b'{"RequestAcknowledge": %s}' % (b"false" if broadcast else b"true"))
    producer.dataReceived(encode(create))
    members = [connection(f"member{k}") for k in range(4 if broadcast else 1)]
    for member in members:
        member.dataReceived(encode(Frame(MessageType.SERVER, target="jobs",
                                         content_type=ContentType.JOIN)))
    turns.run()
    pushes = [Frame(MessageType.QUEUE_MESSAGE, message_id=f"m{i}", target="jobs",
                    content_type=1, content=BODY) for i in range(n)]
    chunks = [b"".join(map(encode, pushes[k:k + BATCH])) for k in range(0, n, BATCH)]
    acks = [b"".join(encode(acknowledge(p)) for p in pushes[k:k + BATCH])
            for k in range(0, n, BATCH)]
    start = time.process_time()
    for k, chunk in enumerate(chunks):
        producer.dataReceived(chunk)
        turns.run()
        if not broadcast:
            members[0].dataReceived(acks[k])
            turns.run()
    seconds = time.process_time() - start
    for member in members:
        assert member.transport.written > n * 40, member.transport.written
    return n / seconds


CASES = {
    "mqks-publish": lambda n: mqks(n, False),
    "mqks-manual-ack": lambda n: mqks(n, True),
    "mqks-fanout-x10": lambda n: mqks(n, False, 10),
    "malamute-service": lambda n: malamute(n, "service"),
    "malamute-service-wire-1": lambda n: malamute_wire(n, 1),
    "malamute-service-wire-4": lambda n: malamute_wire(n, 4),
    "malamute-service-wire-4k": lambda n: malamute_wire(n, 1, 4096),
    "malamute-stream-wire": lambda n: malamute_wire(n, 1, kind="stream"),
    "malamute-mailbox-wire": lambda n: malamute_wire(n, 1, kind="mailbox"),
    "malamute-mailbox-hops": malamute_hops,
    "malamute-stream": lambda n: malamute(n, "stream"),
    "malamute-stream-mixed": lambda n: malamute(n, "stream-mixed"),
    "malamute-mailbox": lambda n: malamute(n, "mailbox"),
    "twino-push-ack": lambda n: twino(n, False),
    "twino-broadcast-4": lambda n: twino(n, True),
}


def measure(tree, case, n):
    env = dict(os.environ, PYTHONPATH=os.path.join(tree, "src"))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", case, "--n",
                          str(n)], env=env, cwd=tree, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["rate"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", help="the other checkout (its root, holding src/)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps({"rate": CASES[args.one](args.n)}))
        return
    trees = {"new": ROOT, **({"base": args.base} if args.base else {})}
    for case in args.cases.split(","):
        best = {name: 0.0 for name in trees}
        for run in range(args.runs):
            order = list(trees.items())
            for name, tree in order[::-1] if run % 2 else order:    # ABBA: no order bias
                best[name] = max(best[name], measure(tree, case, args.n))
        line = "  ".join(f"{name} {rate / 1000:8.1f}k/s" for name, rate in best.items())
        ratio = f"  new/base {best['new'] / best['base']:.3f}" if "base" in best else ""
        print(f"{case:18} {line}{ratio}", flush=True)


if __name__ == "__main__":
    main()
