"""Load generator roles, each run as its own OS process by bench.run.

    python -m bench.mqks_load consumer PORT CID QUEUE EVENT EXPECT [--manual-ack] [--latency] [--slow]
    python -m bench.mqks_load publisher PORT EVENT N RATE SIZE
A consumer prints `ready` after its consume is confirmed, then one JSON line. The
publisher waits for `go` on stdin, then prints one JSON line. Plain blocking sockets,
large writes and `bytes.count` keep the generator far cheaper than the server.
"""
import json
import os
import socket
import sys
import time


def _connect(port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _cpu():
    t = os.times()
    return t.user + t.system


def _wait_line(sock, expected):
    buf = b""
    while expected not in buf:
        data = sock.recv(65536)
        if not data:
            raise SystemExit("server closed the connection")
        buf += data
    return buf[buf.index(expected) + len(expected):]


def consumer(port, cid, queue, event, expect, manual=False, latency=False, slow=False):
    sock = _connect(port)
    flag = " --manual-ack" if manual else ""
    sock.sendall(f"{cid} consume --confirm {queue} {event}{flag}\n".encode())
    rest = _wait_line(sock, f"{cid} ok \n".encode())
    print("ready", flush=True)
    cpu0 = _cpu()
    count, first, lat, tail = 0, None, [], b""
    ack_prefix = f"a ack {cid} ".encode()
    parse = manual or latency
    chunk = rest
    while True:
        if chunk:
            now = time.monotonic_ns()
            if first is None:
                first = now
            if not parse:
                count += chunk.count(b"\n")
            else:
                lines = (tail + chunk).split(b"\n")
                tail = lines.pop()
                acks = []
                for line in lines:
                    parts = line.split(b" ", 4)
                    if latency:
                        lat.append(now - int(parts[4].split(b"-", 1)[0]))
                    if manual:
                        acks.append(ack_prefix + parts[2] + b"\n")
                count += len(lines)
                if acks:
                    sock.sendall(b"".join(acks))
        if count >= expect:
            break
        if slow:
            time.sleep(0.002)
        chunk = sock.recv(16384 if slow else 1 << 20)
        if not chunk:
            break
    last = time.monotonic_ns()
    result = {"count": count, "first_ns": first, "last_ns": last, "cpu_s": _cpu() - cpu0}
    if lat:
        lat.sort()
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000
        result.update(p50_us=pick(0.50), p90_us=pick(0.90), p99_us=pick(0.99), max_us=lat[-1] / 1000)
    print(json.dumps(result), flush=True)


def publisher(port, event, n, rate, size):
    sock = _connect(port)
    sys.stdin.readline()
    cpu0 = _cpu()
    start = time.monotonic_ns()
    pad = b"x" * max(0, size - 20)
    if rate == 0:
        batch = 2000
        for base in range(0, n, batch):
            sock.sendall(b"".join(b"m%d publish %s 0-%s\n" % (i, event.encode(), pad)
                                  for i in range(base, min(n, base + batch))))
    else:
        per_tick, tick = max(1, rate // 1000), 0.001 * max(1, rate // 1000) * 1000 / rate
        sent, next_at = 0, time.monotonic()
        while sent < n:
            k = min(per_tick, n - sent)
            sock.sendall(b"".join(b"m%d publish %s %d-%s\n" % (sent + j, event.encode(),
                                                               time.monotonic_ns(), pad)
                                  for j in range(k)))
            sent += k
            next_at += tick
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    sock.sendall(b"pdone ping done\n")
    _wait_line(sock, b"pdone ok done\n")
    print(json.dumps({"start_ns": start, "end_ns": time.monotonic_ns(), "cpu_s": _cpu() - cpu0}),
          flush=True)


def main(argv):
    role, port = argv[0], int(argv[1])
    if role == "consumer":
        cid, queue, event, expect = argv[2], argv[3], argv[4], int(argv[5])
        consumer(port, cid, queue, event, expect, "--manual-ack" in argv,
                 "--latency" in argv, "--slow" in argv)
    else:
        publisher(port, argv[2], int(argv[3]), int(argv[4]), int(argv[5]))


if __name__ == "__main__":
    main(sys.argv[1:])
