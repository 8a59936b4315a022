"""Malamute load roles, each run as its own OS process by bench.malamute_bench.

    python -m bench.malamute_load server ENDPOINT
    python -m bench.malamute_load reader ENDPOINT MODE N [--slow]
    python -m bench.malamute_load writer ENDPOINT MODE N
    python -m bench.malamute_load rtt ENDPOINT N
MODE is stream (every subject matches), perftest (mlm_perftest's mix: N `temp.moscow`
that match the reader's `temp.` and N `rain.moscow` that do not), mailbox or service.
Readers print `ready` once subscribed, writers wait for `go` on stdin; each prints one
JSON line at the end. Raw DEALER sockets with pre-encoded frames keep the generator
cheaper than the broker; the wire is what mlm_client sends (HWM 0, as mlm_perftest).
"""
import json
import os
import sys
import time

import zmq

from protocols.malamute import codec


def _cpu():
    t = os.times()
    return t.user + t.system


def _dealer(endpoint, address, hwm=0):
    """hwm 0 as mlm_perftest; a slow reader keeps libzmq's 1000, as an mlm_client whose
    application stops reading soon stops taking frames off the socket."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.LINGER, 5000)
    sock.connect(endpoint)
    _call(sock, codec.ConnectionOpen(address))
    return sock


def _call(sock, command):
    sock.send_multipart(codec.encode(command))
    reply = codec.decode(sock.recv_multipart())
    if not isinstance(reply, codec.Ok):
        raise SystemExit(f"{command!r} answered {reply!r}")


def server(endpoint):
    from twisted.internet import reactor

    from bridge import config
    from bridge.service import DOORS, build
    overrides = {door: {"listen": []} for door in DOORS}
    overrides["malamute"] = {"listen": [endpoint]}
    build(config.load(overrides=overrides), reactor)[0].startService()
    reactor.callWhenRunning(lambda: print("ready", flush=True))
    reactor.run()


def reader(endpoint, mode, n, slow=False):
    sock = _dealer(endpoint, "reader", 1000 if slow else 0)
    if mode in ("stream", "perftest"):
        _call(sock, codec.StreamRead("bench", "temp."))
    elif mode == "service":
        _call(sock, codec.ServiceOffer("bench", ""))
    print("ready", flush=True)
    cpu0 = _cpu()
    recv, more, RCVMORE, NOBLOCK = sock.recv, sock.get, int(zmq.RCVMORE), int(zmq.NOBLOCK)
    count, first, last = 0, None, None
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while count < n:
        try:
            recv(NOBLOCK)
        except zmq.Again:               # caught up: note the time, then wait for more
            last = time.monotonic_ns()
            if not poller.poll(3000 if slow else 10000):
                break                   # the rest was dropped (a slow stream reader)
            continue
        while more(RCVMORE):
            recv()
        if first is None:
            first = time.monotonic_ns()
        count += 1
        if slow and count % 100 == 0:
            time.sleep(0.01)
    if count == n:
        last = time.monotonic_ns()
    result = {"count": count, "first_ns": first, "last_ns": last,
              "cpu_s": _cpu() - cpu0}
    print(json.dumps(result), flush=True)


def _frames(mode, n):
    """Pre-encoded multipart messages for one batch (header, content)."""
    if mode == "stream":
        return [codec.encode(codec.StreamSend("temp.moscow", (b"10",)))] * n
    if mode == "perftest":
        return [codec.encode(codec.StreamSend("temp.moscow", (b"10",))),
                codec.encode(codec.StreamSend("rain.moscow", (b"0",)))] * n
    if mode == "mailbox":
        return [codec.encode(codec.MailboxSend("reader", "subj", "", 0, (b"hello",)))] * n
    return [codec.encode(codec.ServiceSend("bench", "req", "", 0, (b"hello",)))] * n


def writer(endpoint, mode, n):
    sock = _dealer(endpoint, "writer")
    if mode in ("stream", "perftest"):
        _call(sock, codec.StreamWrite("bench"))
    batch = _frames(mode, 1000)
    send, MORE = sock.send, int(zmq.SNDMORE)
    sys.stdin.readline()
    cpu0 = _cpu()
    start = time.monotonic_ns()
    left = n
    while left:
        for header, content in batch[:left * (2 if mode == "perftest" else 1)]:
            send(header, MORE)
            send(content)
        left -= min(left, 1000)
    _call(sock, codec.ConnectionClose())
    print(json.dumps({"start_ns": start, "end_ns": time.monotonic_ns(),
                      "cpu_s": _cpu() - cpu0}), flush=True)


def rtt(endpoint, n):
    """A -> B -> A by mailbox, one at a time; B is a thread-free echo in this process."""
    a, b = _dealer(endpoint, "rtt-a"), _dealer(endpoint, "rtt-b")
    ping = codec.encode(codec.MailboxSend("rtt-b", "ping", "", 0, (b"x",)))
    pong = codec.encode(codec.MailboxSend("rtt-a", "pong", "", 0, (b"x",)))
    cpu0 = _cpu()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        a.send_multipart(ping)
        b.recv_multipart()
        b.send_multipart(pong)
        a.recv_multipart()
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
        writer(endpoint, argv[2], int(argv[3]))
    else:
        rtt(endpoint, int(argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
