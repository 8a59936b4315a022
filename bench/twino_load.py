"""Twino load roles, each run as its own OS process by bench.twino_bench.

    python -m bench.twino_load consumer PORT CHANNEL EXPECT [--ack] [--latency]
    python -m bench.twino_load producer PORT CHANNEL QUEUE N SIZE RATE
    python -m bench.twino_load puller PORT CHANNEL QUEUE N COUNT
A consumer prints `ready` once joined, then one JSON line. The producer and the puller wait
for `go` on stdin. Handshake with the project's blocking client, then raw sockets and the
codec, with pre-encoded batches so the generator stays cheaper than the broker.
"""
import json
import os
import sys
import time

from mqksbridge.bridge.clients import twino
from mqksbridge.protocols.twino.codec import (
    PING_BYTES, Frame, FrameDecoder, MessageType, acknowledge, encode, new_id,
)


def _cpu():
    t = os.times()
    return t.user + t.system


def _result(count, first, lat, cpu0, **extra):
    result = {"count": count, "first_ns": first, "last_ns": time.monotonic_ns(),
              "cpu_s": _cpu() - cpu0, **extra}
    if lat:
        lat.sort()
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000
        result.update(p50_us=pick(0.50), p90_us=pick(0.90), p99_us=pick(0.99),
                      max_us=lat[-1] / 1000)
    print(json.dumps(result), flush=True)


def _count(buf):
    """Whole queue messages in `buf` (small deliveries: 1-byte length form) and the rest."""
    pos, end, n = 0, len(buf), 0
    while end - pos >= 8:
        b1, n_ids = buf[pos + 1], buf[pos + 2] + buf[pos + 3] + buf[pos + 4]
        size = buf[pos + 7]
        if buf[pos] & 0x3F in (0x09, 0x0A):
            pos += 8
            continue
        q = pos + 8 + n_ids
        if size >= 253:
            raise SystemExit("the counting consumer expects small messages")
        if b1 & 0x20:
            if end - q < 2:
                break
            q += 2 + int.from_bytes(buf[q:q + 2], "little")
        if q + size > end:
            break
        pos = q + size
        n += 1
    return n, buf[pos:]


def consumer(port, channel, expect, ack=False, latency=False):
    client = twino.connect(port=port, timeout=60)
    assert client.join(channel) == 0
    sock, me = client.sock, client.client_id
    sock.settimeout(None)
    print("ready", flush=True)
    decoder = FrameDecoder(apply_ttl=False)
    cpu0 = _cpu()
    count, first, lat, rest = 0, None, [], b""
    while count < expect:
        data = sock.recv(1 << 20)
        if not data:
            break
        now = time.monotonic_ns()
        first = first or now
        if not (ack or latency):             # only count: walk the length fields
            n, rest = _count(rest + data)
            count += n
            continue
        frames = [f for f in decoder.feed(data) if f.type == MessageType.QUEUE_MESSAGE]
        count += len(frames)
        if latency:
            lat.extend(now - int(f.content.split(b"-", 1)[0]) for f in frames)
        if ack and frames:
            sock.sendall(b"".join(encode(acknowledge(f, me)) for f in frames))
    _result(count, first, lat, cpu0)


def producer(port, channel, queue, n, size, rate):
    client = twino.connect(port=port, timeout=60)
    sock, me = client.sock, client.client_id
    pad = b"x" * max(0, size - 20)

    def frames(k):
        return b"".join(encode(Frame(MessageType.QUEUE_MESSAGE, message_id=new_id(), source=me,
                                     target=channel, content_type=queue,
                                     content=b"%d-%s" % (time.monotonic_ns(), pad)))
                        for _ in range(k))
    if rate == 0:                            # encoded before the clock starts
        batches = [frames(min(1000, n - base)) for base in range(0, n, 1000)]
        sys.stdin.readline()
        cpu0 = _cpu()
        start = time.monotonic_ns()
        for batch in batches:
            sock.sendall(batch)
    else:
        sys.stdin.readline()
        cpu0 = _cpu()
        start = time.monotonic_ns()
        per_tick = max(1, rate // 1000)
        tick, sent, next_at = per_tick / rate, 0, time.monotonic()
        while sent < n:
            k = min(per_tick, n - sent)
            sock.sendall(frames(k))
            sent += k
            next_at += tick
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    sock.sendall(PING_BYTES)
    client.ping(60)
    print(json.dumps({"start_ns": start, "end_ns": time.monotonic_ns(), "cpu_s": _cpu() - cpu0}),
          flush=True)


def puller(port, channel, queue, n, count):
    client = twino.connect(port=port, timeout=60)
    assert client.join(channel) == 0
    sys.stdin.readline()
    cpu0 = _cpu()
    start = time.monotonic_ns()
    got, lat = 0, []
    while got < n:
        t0 = time.monotonic_ns()
        items = client.pull(channel, queue, count, timeout=60)
        lat.append(time.monotonic_ns() - t0)
        if not items:
            break
        got += len(items)
    _result(got, start, lat, cpu0, start_ns=start, pulls=len(lat))


def main(argv):
    role, port = argv[0], int(argv[1])
    if role == "consumer":
        consumer(port, argv[2], int(argv[3]), "--ack" in argv, "--latency" in argv)
    elif role == "producer":
        producer(port, argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]))
    else:
        puller(port, argv[2], int(argv[3]), int(argv[4]), int(argv[5]))


if __name__ == "__main__":
    main(sys.argv[1:])
