"""Malamute load roles, each run as its own OS process by bench.malamute_bench.

    python -m bench.malamute_load server ENDPOINT
    python -m bench.malamute_load reader ENDPOINT MODE N [--slow]
    python -m bench.malamute_load writer ENDPOINT MODE N [SIZE]
    python -m bench.malamute_load rtt ENDPOINT N
MODE is stream (every subject matches), perftest (mlm_perftest's mix: N `temp.moscow`
that match the reader's `temp.` and N `rain.moscow` that do not), mailbox or service.
Readers print `ready` once subscribed, writers wait for `go` on stdin; each prints one
JSON line at the end. The peers are bench.zmtp_dealer's plain-socket DEALERs sending
pre-encoded batches, which keeps the generator cheaper than the broker; the wire is what
mlm_client sends.
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


def _dealer(endpoint, address):
    dealer = ZmtpDealer(endpoint)
    dealer.call(codec.ConnectionOpen(address))
    return dealer


def server(endpoint):
    from twisted.internet import reactor

    from mqksbridge.bridge import config
    from mqksbridge.bridge.service import DOORS, build
    overrides = {door: {"listen": []} for door in [*DOORS, "admin"]}
    overrides["malamute"] = {"listen": [endpoint]}
    build(config.load(overrides=overrides), reactor)[0].startService()
    reactor.callWhenRunning(lambda: print("ready", flush=True))
    reactor.run()


def reader(endpoint, mode, n, slow=False):
    """Counts deliveries; a slow reader takes about 10k messages a second."""
    dealer = _dealer(endpoint, "reader")
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


def writer(endpoint, mode, n, size=20):
    dealer = _dealer(endpoint, "writer")
    if mode in ("stream", "perftest"):
        dealer.call(codec.StreamWrite("bench"))
    one = b"".join(zmtp_message(codec.encode(c)) for c in _commands(mode, size))
    batch = one * 1000
    sys.stdin.readline()
    cpu0 = _cpu()
    start = time.monotonic_ns()
    for base in range(0, n, 1000):
        dealer.send(batch if n - base >= 1000 else one * (n - base))
    dealer.call(codec.ConnectionClose())     # answered once everything before it was read
    print(json.dumps({"start_ns": start, "end_ns": time.monotonic_ns(),
                      "cpu_s": _cpu() - cpu0}), flush=True)


def rtt(endpoint, n):
    """A -> B -> A by mailbox, one at a time; B is a thread-free echo in this process."""
    a, b = _dealer(endpoint, "rtt-a"), _dealer(endpoint, "rtt-b")
    ping = zmtp_message(codec.encode(codec.MailboxSend("rtt-b", "ping", "", 0, (b"x",))))
    pong = zmtp_message(codec.encode(codec.MailboxSend("rtt-a", "pong", "", 0, (b"x",))))
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
        server(endpoint)
    elif role == "reader":
        reader(endpoint, argv[2], int(argv[3]), "--slow" in argv)
    elif role == "writer":
        writer(endpoint, argv[2], int(argv[3]), *map(int, argv[4:5]))
    else:
        rtt(endpoint, int(argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
