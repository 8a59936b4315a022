"""Malamute load roles, each run as its own OS process by bench.malamute_bench.

    python -m bench.malamute_load server ENDPOINT
    python -m bench.malamute_load reader ENDPOINT MODE N [--slow] [--zmq]
    python -m bench.malamute_load writer ENDPOINT MODE N [SIZE] [--zmq]
    python -m bench.malamute_load rtt ENDPOINT N [--zmq]
    python -m bench.malamute_load workers ENDPOINT SERVICE W N SIZE [--zmq]
    python -m bench.malamute_load clients ENDPOINT SERVICE M N SIZE [--zmq]
MODE is stream (every subject matches), perftest (mlm_perftest's mix: N `temp.moscow`
that match the reader's `temp.` and N `rain.moscow` that do not), mailbox or service.
Readers print `ready` once subscribed, writers wait for `go` on stdin; each prints one
JSON line at the end. `workers` and `clients` are the service run's two sides, W (M) DEALERs in one
process each (bench.malamute_service_bench). The peers are bench.zmtp_dealer's plain-socket DEALERs sending
pre-encoded batches, which keeps the generator cheaper than the broker; the wire is what
mlm_client sends. With --zmq, the peers are pyzmq DEALERs instead (libzmq's
I/O thread on the way, as a libmlm client has).
"""
import json
import os
import sys
import time

from bench.zmtp_dealer import ZmtpDealer
from mqksbridge.protocols.malamute import codec
from mqksbridge.protocols.zmtp.codec import message as zmtp_message


def _cpu():
    t = os.times()
    return t.user + t.system


def _dealer(endpoint, address, use_zmq=False):
    if use_zmq:
        import zmq
        return _ZmqDealer(zmq.Context(), endpoint, address)
    dealer = ZmtpDealer(endpoint)
    dealer.call(codec.ConnectionOpen(address))
    return dealer


def server(endpoint, profile=None):
    """The broker. With `profile` (a file name), SIGUSR1 starts cProfile and SIGUSR2
    stops it and writes the stats there, so a profile covers one run and nothing else."""
    from twisted.internet import reactor

    from mqksbridge.bridge import config
    from mqksbridge.bridge.service import build
    overrides = {name: {"listen": []} for name, section in config.DEFAULTS.items()
                 if "listen" in section}
    # the load roles send no heartbeats: a run slowed by a profiler must not expire them
    overrides["malamute"] = {"listen": [endpoint], "timeout": 3600.0}
    build(config.load(overrides=overrides), reactor)[0].startService()
    if profile:
        import cProfile
        import signal
        profiler = cProfile.Profile(time.process_time)     # CPU, not waits in epoll
        signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
        signal.signal(signal.SIGUSR2, lambda *_: (profiler.disable(),
                                                  profiler.dump_stats(profile),
                                                  print("profiled", flush=True)))
    import mqksbridge
    reactor.callWhenRunning(lambda: print("ready", os.path.dirname(mqksbridge.__file__),
                                          flush=True))
    reactor.run()


def reader(endpoint, mode, n, slow=False, use_zmq=False):
    """Counts deliveries; a slow reader takes about 10k messages a second."""
    dealer = _dealer(endpoint, "reader", use_zmq)
    if mode in ("stream", "perftest"):
        dealer.call(codec.StreamRead("bench", "temp."))
    elif mode == "service":
        dealer.call(codec.ServiceOffer("bench", ""))
    print("ready", flush=True)
    cpu0 = _cpu()
    count, first, last = 0, None, None
    while count < n:
        got = dealer.count(3 if slow else 10)
        if not got:
            break                       # the rest was dropped (a slow stream reader)
        last = time.monotonic_ns()
        if first is None:
            first = last
        count += got
        if slow:
            time.sleep(got / 10_000)
    result = {"count": count, "first_ns": first, "last_ns": last,
              "cpu_s": _cpu() - cpu0}
    print(json.dumps(result), flush=True)


def _commands(mode, size):
    """What one message of `mode` sends (perftest: mlm_perftest's matching and
    non-matching pair; the others a `size`-byte body)."""
    body = b"x" * size
    if mode == "stream":
        return [codec.StreamSend("temp.moscow", (body,))]
    if mode == "perftest":
        return [codec.StreamSend("temp.moscow", (b"10",)), codec.StreamSend("rain.moscow", (b"0",))]
    if mode == "mailbox":
        return [codec.MailboxSend("reader", "subj", "", 0, (body,))]
    return [codec.ServiceSend("bench", "req", "", 0, (body,))]


def writer(endpoint, mode, n, size=20, use_zmq=False):
    dealer = _dealer(endpoint, "writer", use_zmq)
    if mode in ("stream", "perftest"):
        dealer.call(codec.StreamWrite("bench"))
    if use_zmq:
        messages = [codec.encode(c) for c in _commands(mode, size)]
    else:
        one = b"".join(zmtp_message(codec.encode(c)) for c in _commands(mode, size))
        batch = one * 1000
    sys.stdin.readline()
    cpu0 = _cpu()
    start = time.monotonic_ns()
    if use_zmq:
        for _ in range(n):
            for frames in messages:
                dealer.send(frames)
    else:
        for base in range(0, n, 1000):
            dealer.send(batch if n - base >= 1000 else one * (n - base))
    dealer.call(codec.ConnectionClose())     # answered once everything before it was read
    print(json.dumps({"start_ns": start, "end_ns": time.monotonic_ns(),
                      "cpu_s": _cpu() - cpu0}), flush=True)


def zmq_workers(endpoint, service, w, n):
    """`workers` as pyzmq DEALERs, counting whole messages."""
    import zmq
    dealers = [_dealer(endpoint, f"worker-{k}", True) for k in range(w)]
    poller = zmq.Poller()
    for dealer in dealers:
        dealer.call(codec.ServiceOffer(service, ".*"))
        poller.register(dealer.sock, zmq.POLLIN)
    index = {dealer.sock: k for k, dealer in enumerate(dealers)}
    print("ready", flush=True)
    cpu0 = _cpu()
    got, first, last = [0] * w, None, None
    while sum(got) < n:
        events = poller.poll(30_000)
        if not events:
            break                       # lost requests: reported as a short count
        for sock, _ in events:
            k = index[sock]
            got[k] += dealers[k].count(0)
        last = time.monotonic_ns()
        if first is None:
            first = last
    print(json.dumps({"count": sum(got), "per_worker": got, "first_ns": first,
                      "last_ns": last, "cpu_s": _cpu() - cpu0}), flush=True)


def workers(endpoint, service, w, n, size):
    """W workers offering `service` (any subject), until N requests of `size` bytes arrived
    among them; prints each worker's count (round robin shares them out evenly). Every
    request is the same DELIVER, so bytes are counted, not parsed: the workers stay far
    cheaper than the broker they measure."""
    import selectors
    dealers = [_dealer(endpoint, f"worker-{k}") for k in range(w)]
    for dealer in dealers:
        dealer.call(codec.ServiceOffer(service, ".*"))
        assert not dealer.pending and not dealer.zmtp._buf
    one = len(zmtp_message(codec.encode_service_deliver("client-0", service, "req", "",
                                                        (b"x" * size,))))
    select = selectors.DefaultSelector()
    for k, dealer in enumerate(dealers):
        dealer.sock.setblocking(False)
        select.register(dealer.sock, selectors.EVENT_READ, k)
    buffer = memoryview(bytearray(1 << 20))
    print("ready", flush=True)
    cpu0 = _cpu()
    got, total, first, last = [0] * w, 0, None, None
    while total < n * one:
        events = select.select(30)
        if not events:
            break                       # lost requests: reported as a short count
        for key, _ in events:
            k = key.data
            try:
                size_read = dealers[k].sock.recv_into(buffer)
            except BlockingIOError:
                continue
            got[k] += size_read
            total += size_read
        last = time.monotonic_ns()
        if first is None:
            first = last
    print(json.dumps({"count": total // one, "per_worker": [g // one for g in got],
                      "first_ns": first, "last_ns": last, "cpu_s": _cpu() - cpu0}), flush=True)


def clients(endpoint, service, m, n, size, use_zmq=False):
    """M clients sending N requests of `size` bytes in all to `service`, pipelined as
    mlm_client_sendfor does (no reply awaited), in batches of 500 taking turns; then
    each closes, which is answered once everything it sent was read."""
    dealers = [_dealer(endpoint, f"client-{k}", use_zmq) for k in range(m)]
    one = codec.encode(codec.ServiceSend(service, "req", "", 0, (b"x" * size,)))
    if use_zmq:
        dealers = [_Batched(dealer, one) for dealer in dealers]
    else:
        one = zmtp_message(one)
    batch = one * 500
    print("ready", flush=True)
    sys.stdin.readline()
    cpu0 = _cpu()
    start = time.monotonic_ns()
    left = [n // m + (k < n % m) for k in range(m)]
    while any(left):
        for k, dealer in enumerate(dealers):
            if left[k]:
                dealer.send(batch if left[k] >= 500 else one * left[k])
                left[k] -= min(500, left[k])
    for dealer in dealers:
        dealer.call(codec.ConnectionClose())
    print(json.dumps({"start_ns": start, "end_ns": time.monotonic_ns(),
                      "cpu_s": _cpu() - cpu0}), flush=True)


class _Batched:
    """A pyzmq dealer taking `clients`' batches: `frames * k` sends k messages."""

    def __init__(self, dealer, frames):
        self.dealer, self.frames = dealer, frames

    def send(self, batch):
        for _ in range(len(batch) // len(self.frames)):
            self.dealer.send(self.frames)

    def call(self, command):
        self.dealer.call(command)


class _ZmqDealer:
    """A pyzmq DEALER with ZmtpDealer's send/recv: libzmq's I/O thread on the way, as a
    libmlm client has (the clients the Malamute figures in docs/ were measured with)."""

    def __init__(self, context, endpoint, address):
        import zmq
        self.sock = context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.SNDHWM, 0)          # a writer's flood waits, never drops
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.connect(endpoint)
        self.call(codec.ConnectionOpen(address))

    def send(self, frames):
        self.sock.send_multipart(frames, copy=False)

    def recv(self):
        return self.sock.recv_multipart()

    def call(self, command):
        """Send one Malamute command and insist on OK."""
        self.send(codec.encode(command))
        reply = codec.decode(self.recv())
        if not isinstance(reply, codec.Ok):
            raise SystemExit(f"{command!r} answered {reply!r}")

    def count(self, timeout=None):
        """How many messages are waiting, after one arrives (0 at a timeout)."""
        if not self.sock.poll(None if timeout is None else timeout * 1000):
            return 0
        import zmq
        got = 0
        while True:
            try:
                self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return got
            got += 1


def rtt(endpoint, n, use_zmq=False):
    """A -> B -> A by mailbox, one at a time; B is a thread-free echo in this process.
    With `use_zmq` both are pyzmq DEALERs, else bench.zmtp_dealer's plain sockets."""
    ping = codec.encode(codec.MailboxSend("rtt-b", "ping", "", 0, (b"x",)))
    pong = codec.encode(codec.MailboxSend("rtt-a", "pong", "", 0, (b"x",)))
    a, b = _dealer(endpoint, "rtt-a", use_zmq), _dealer(endpoint, "rtt-b", use_zmq)
    if not use_zmq:
        ping, pong = zmtp_message(ping), zmtp_message(pong)
    for _ in range(100):                 # warm up: both mailboxes known, paths taken
        a.send(ping)
        b.recv()
        b.send(pong)
        a.recv()
    cpu0 = _cpu()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        a.send(ping)
        b.recv()
        b.send(pong)
        a.recv()
        samples.append(time.perf_counter_ns() - t0)
    samples.sort()
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))] / 1000
    print(json.dumps({"count": n, "mean_us": sum(samples) / n / 1000, "p50_us": pick(0.5),
                      "p99_us": pick(0.99), "cpu_s": _cpu() - cpu0}), flush=True)


def main(argv):
    role, endpoint = argv[0], argv[1]
    if role == "server":
        server(endpoint, *argv[2:3])
    elif role == "workers" and "--zmq" in argv:
        zmq_workers(endpoint, argv[2], int(argv[3]), int(argv[4]))
    elif role == "workers":
        workers(endpoint, argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif role == "clients":
        clients(endpoint, argv[2], int(argv[3]), int(argv[4]), int(argv[5]), "--zmq" in argv)
    elif role == "reader":
        reader(endpoint, argv[2], int(argv[3]), "--slow" in argv, "--zmq" in argv)
    elif role == "writer":
        sizes = [int(a) for a in argv[4:5] if a != "--zmq"]
        writer(endpoint, argv[2], int(argv[3]), *sizes, use_zmq="--zmq" in argv)
    else:
        rtt(endpoint, int(argv[2]), "--zmq" in argv)


if __name__ == "__main__":
    main(sys.argv[1:])
