"""The TextQueue door against the MQKS door, in the same run and the same broker.

    python -m bench.textqueue_door [--records N] [--outbox-records M] [--repeat R]

One broker process (MQKS door and the TextQueue door, pinned to one CPU), load roles in
their own processes on the other CPU: bench.mqks_load's consumer and publisher, and a
TextQueue worker (`worker` below). Each comparison runs its TextQueue path and its MQKS
path alternately R times (default 3); medians, and `ratio` = TextQueue rate / MQKS rate.

| comparison | TextQueue path | MQKS path |
|---|---|---|
| inbox | N one-line records (`-message NNNNNNN ...`, 40 bytes: what `printf >>` writes) in a file renamed into the inbox, to queue `jobs` with an MQKS consumer: N / (last delivery - rename); `flipped`: until the file's last record is `=` | N MQKS publishes of the same bodies to a queue with the same consumer: N / (last delivery - first publish) |
| outbox append | M messages published (MQKS) to a queue whose outbox file has credit M: M / (last record appended - first publish) | the same M to a manual-ack MQKS consumer that acks nothing: M / (last delivery - first publish) |
| outbox marks | a worker flips those M records to `=` with one pwrite each: M / (acked - first pwrite) | the MQKS consumer acks all M: M / (acked - first ack) |
| outbox steady | M messages through a file with the default credit (1000) and a worker that tails it and flips each record as it comes: M / (all acked - first publish) | M through a manual-ack MQKS consumer that acks each delivery: M / (last delivery - first publish) |

The broker's RSS is sampled every 20 ms: before each inbox run and its peak during it, and
`inbox_rss_mb_growth` the most it grew in a run (the file is streamed a chunk per turn,
never loaded whole; the queue's consumer keeps up, or flow control holds the file; later
rounds start from the RSS the MQKS and outbox runs left). Counters come from MQKS `_eval
state.counters`.
Results go to bench/results/textqueue-door-latest.json.
"""
import argparse
import ast
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

from bench.processes import ROOT, free_port, last_json, spawn
from bench.procstat import cpu_seconds, rss_mb

BODY = b"message %07d with a typical short bo"        # 40 bytes with the "-" and LF


# -- roles ---------------------------------------------------------------------------------

def server(port, directory, outbox_credit):
    from twisted.internet import reactor

    from mqksbridge.bridge import config
    from mqksbridge.bridge.service import build
    overrides = {name: {"listen": []} for name, section in config.DEFAULTS.items()
                 if isinstance(section, dict) and "listen" in section}
    overrides["mqks"] = {"listen": [f"tcp:{port}:interface=127.0.0.1"]}
    overrides["textqueue"] = {
        "inbox": [os.path.join(directory, "inbox")],
        "outbox": {"out": os.path.join(directory, "outbox", "out.tq"),
                   "steady": os.path.join(directory, "outbox", "steady.tq")},
        "credit": outbox_credit, "rotate_size": 1 << 40}
    top = build(config.load(overrides=overrides), reactor)[0]
    top.startService()
    door = top.doors["textqueue"]       # the steady file keeps the default credit
    door.file(overrides["textqueue"]["outbox"]["steady"]).credit = config.DEFAULTS[
        "textqueue"]["credit"]
    reactor.callWhenRunning(lambda: print("ready", flush=True))
    reactor.run()


def worker(path, n, tail):
    """Flip records of an outbox file to `=`, one pwrite each: all `n` at once (`tail`
    false: they are there already), or each as it arrives (a worker tailing the file)."""
    from mqksbridge.protocols.textqueue import scan
    fd = os.open(path, os.O_RDWR)
    sys.stdin.readline()
    start = time.monotonic_ns()
    done, pos, carry = 0, 0, b""
    while done < n:
        data = os.pread(fd, 1 << 20, pos)
        if not data:
            if not tail:
                raise SystemExit(f"only {done} of {n} records in {path}")
            time.sleep(0.0005)
            continue
        base = pos - len(carry)
        buffer = carry + data
        pos += len(data)
        found = scan(buffer, base)
        starts = [o for o, c in zip(found.offsets, found.controls) if c == 0x2D]
        tail_record = found.incomplete
        if tail_record is not None and tail_record.terminated and tail_record.data[:1] == b"-" \
                and tail_record.data.endswith(b"   \n"):            # its \error= line: whole
            starts.append(tail_record.offset)
            carry = b""
        else:
            carry = tail_record.data if tail_record is not None else b""
        for offset in starts:
            os.pwrite(fd, b"=", offset)
        done += len(starts)
    print(json.dumps({"start_ns": start, "end_ns": time.monotonic_ns(), "marked": done}),
          flush=True)


# -- the runs --------------------------------------------------------------------------------

class Mqks:
    """A blocking MQKS line client for setup and `_eval`."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def request(self, line):
        req_id = line.split(" ", 1)[0].encode()
        self.sock.sendall(line.encode() + b"\n")
        while True:
            while b"\n" in self.buf:
                got, self.buf = self.buf.split(b"\n", 1)
                if got.startswith(req_id + b" "):
                    return got.decode()
            self.buf += self.sock.recv(1 << 16)

    def counters(self):
        reply = self.request("e _eval state.counters")
        return ast.literal_eval(reply.split(" ok ", 1)[1])


class Sampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, 0.0, True

    def run(self):
        while self.running:
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.02)

    def stop(self):
        self.running = False
        self.join()
        return self.peak


def wait_counter(admin, name, value, timeout=600):
    deadline = time.monotonic() + timeout
    while True:
        got = admin.counters().get(f"textqueue.{name}", 0)
        if got >= value:
            return time.monotonic_ns()
        if time.monotonic() > deadline:
            raise SystemExit(f"textqueue.{name} stayed at {got} of {value}")
        time.sleep(0.01)


def consumer(port, cid, queue, event, n, *flags):
    proc = spawn("bench.mqks_load", "consumer", str(port), cid, queue, event, str(n), *flags,
                 pin=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def publisher(port, event, n):
    proc = spawn("bench.mqks_load", "publisher", str(port), event, str(n), "0", "40", pin=True)
    return proc


def make_file(path, n):
    with open(path, "wb") as f:
        for base in range(0, n, 10_000):
            f.write(b"".join(b"-" + BODY % i + b"\n" for i in range(base, min(n, base + 10_000))))


def inbox_run(port, pid, directory, staged, n, k):
    queue = f"jobs{k}"
    proc = consumer(port, f"c{k}", queue, "none", n)
    path = os.path.join(directory, "inbox", f"{queue}.tq")
    shutil.copy(staged, path + ".part")
    rss_before = rss_mb(pid)
    sampler = Sampler(pid)
    sampler.start()
    cpu0 = cpu_seconds(pid)
    start = time.monotonic_ns()
    os.rename(path + ".part", path)
    got = last_json(proc)
    last = os.path.getsize(path) - len(b"-" + BODY % 0 + b"\n")
    fd = os.open(path, os.O_RDONLY)
    while os.pread(fd, 1, last) != b"=":
        time.sleep(0.002)
    flipped = time.monotonic_ns()
    os.close(fd)
    cpu = cpu_seconds(pid) - cpu0
    peak = sampler.stop()
    os.unlink(path)
    return {"rate": n / ((got["last_ns"] - start) / 1e9),
            "flipped_rate": n / ((flipped - start) / 1e9),
            "broker_cpu_us_per_record": cpu * 1e6 / n,
            "rss_mb_before": round(rss_before, 1), "rss_mb_peak": round(peak, 1),
            "file_mb": round(os.path.getsize(staged) / 2**20, 1)}


def mqks_run(port, pid, n, k, manual=False):
    queue, event = f"m{k}", f"ev{k}"
    flags = ("--manual-ack",) if manual else ()
    proc = consumer(port, f"mc{k}", queue, event, n, *flags)
    pub = publisher(port, event, n)
    cpu0 = cpu_seconds(pid)
    pub.stdin.write("go\n")
    pub.stdin.flush()
    sent = last_json(pub)
    got = last_json(proc)
    cpu = cpu_seconds(pid) - cpu0
    return {"rate": n / ((got["last_ns"] - sent["start_ns"]) / 1e9),
            "broker_cpu_us_per_record": cpu * 1e6 / n}


def outbox_run(port, pid, admin, directory, m):
    """Append (credit M), then marks, on the `out` file; then the steady run."""
    before = admin.counters()
    base_appended = before.get("textqueue.appended", 0)
    base_acked = before.get("textqueue.acked", 0)
    admin.request("b1 rebind --confirm out --add oev")
    pub = publisher(port, "oev", m)
    cpu0 = cpu_seconds(pid)
    pub.stdin.write("go\n")
    pub.stdin.flush()
    sent = last_json(pub)
    appended = wait_counter(admin, "appended", base_appended + m)
    cpu_append = cpu_seconds(pid) - cpu0
    path = os.path.join(directory, "outbox", "out.tq")
    work = spawn("bench.textqueue_door", "worker", path, str(m), "all", pin=True)
    cpu0 = cpu_seconds(pid)
    work.stdin.write("go\n")
    work.stdin.flush()
    marked = last_json(work)
    acked = wait_counter(admin, "acked", base_acked + m)
    cpu_marks = cpu_seconds(pid) - cpu0
    admin.request("b2 rebind --confirm out --remove oev")
    result = {"append_rate": m / ((appended - sent["start_ns"]) / 1e9),
              "append_broker_cpu_us": cpu_append * 1e6 / m,
              "marks_rate": m / ((acked - marked["start_ns"]) / 1e9),
              "marks_broker_cpu_us": cpu_marks * 1e6 / m}
    # steady: default credit, a worker tailing the file
    steady = os.path.join(directory, "outbox", "steady.tq")
    base_acked = admin.counters().get("textqueue.acked", 0)
    work = spawn("bench.textqueue_door", "worker", steady, str(m), "tail", pin=True)
    admin.request("b3 rebind --confirm steady --add sev")
    work.stdin.write("go\n")
    work.stdin.flush()
    pub = publisher(port, "sev", m)
    pub.stdin.write("go\n")
    pub.stdin.flush()
    sent = last_json(pub)
    acked = wait_counter(admin, "acked", base_acked + m)
    last_json(work)
    admin.request("b4 rebind --confirm steady --remove sev")
    result["steady_rate"] = m / ((acked - sent["start_ns"]) / 1e9)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--outbox-records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    n, m = args.records, args.outbox_records
    directory = tempfile.mkdtemp(prefix="tqbench-", dir=os.path.join(ROOT, "bench"))
    port = free_port()
    broker = spawn("bench.textqueue_door", "server", str(port), directory, str(m), pin=True)
    try:
        assert broker.stdout.readline().strip() == "ready"
        staged = os.path.join(directory, "staged.tq")
        make_file(staged, n)
        admin = Mqks(port)
        rounds = {"inbox": [], "mqks_publish": [], "outbox": [], "mqks_manual": []}
        for k in range(args.repeat):
            rounds["inbox"].append(inbox_run(port, broker.pid, directory, staged, n, k))
            rounds["mqks_publish"].append(mqks_run(port, broker.pid, n, k))
            rounds["outbox"].append(outbox_run(port, broker.pid, admin, directory, m))
            rounds["mqks_manual"].append(mqks_run(port, broker.pid, m, f"a{k}", manual=True))
            print(json.dumps({key: value[-1] for key, value in rounds.items()}), flush=True)
    finally:
        broker.kill()
        broker.wait()
        shutil.rmtree(directory, ignore_errors=True)

    def median(kind, key):
        return statistics.median(r[key] for r in rounds[kind])
    inbox, mqks = median("inbox", "rate"), median("mqks_publish", "rate")
    manual = median("mqks_manual", "rate")
    result = {
        "records": n, "outbox_records": m, "repeat": args.repeat,
        "inbox_records_per_s": round(inbox),
        "inbox_flipped_records_per_s": round(median("inbox", "flipped_rate")),
        "mqks_publish_consume_per_s": round(mqks),
        "inbox_ratio_vs_mqks": round(inbox / mqks, 2),
        "inbox_broker_cpu_us_per_record": round(median("inbox", "broker_cpu_us_per_record"), 2),
        "mqks_broker_cpu_us_per_record": round(median("mqks_publish",
                                                      "broker_cpu_us_per_record"), 2),
        "inbox_rss_mb_before_and_peak": [(r["rss_mb_before"], r["rss_mb_peak"])
                                         for r in rounds["inbox"]],
        "inbox_rss_mb_growth": round(max(r["rss_mb_peak"] - r["rss_mb_before"]
                                         for r in rounds["inbox"]), 1),
        "inbox_file_mb": rounds["inbox"][0]["file_mb"],
        "outbox_appended_per_s": round(median("outbox", "append_rate")),
        "outbox_marks_acked_per_s": round(median("outbox", "marks_rate")),
        "outbox_steady_per_s": round(median("outbox", "steady_rate")),
        "mqks_manual_ack_consume_per_s": round(manual),
        "outbox_append_ratio_vs_mqks": round(median("outbox", "append_rate") / manual, 2),
        "outbox_steady_ratio_vs_mqks": round(median("outbox", "steady_rate") / manual, 2),
        "rounds": rounds,
    }
    out = os.path.join(ROOT, "bench", "results", "textqueue-door-latest.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))


if __name__ == "__main__":
    if sys.argv[1:2] == ["server"]:
        server(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "tail")
    else:
        main()
