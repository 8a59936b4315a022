"""A consumer that never reads, against a flood: the storage window's acceptance run.

    python -m bench.spill_bench [--messages 1000000] [--size 100] [--durable]
                                [--profile DRAIN.txt]

Runs a real `twistd -n mqksbridge` twice in one session: the default configuration
(queue backlogs past `broker.queue_memory_window` paged out to disk) and the same with
`queue_memory_window = "max"` (every backlog in memory, the baseline). In each, one MQKS
consumer of queue `flood` never reads its socket while a publisher pushes `--messages`
confirmed messages of `--size` bytes at it; meanwhile a healthy consumer of queue
`healthy` gets a probe every 10 ms, and the time from publish to delivery of each is
measured. Reported per run: flood throughput (messages/s), the broker's RSS growth (peak
during the flood and drain, over the RSS before it), the healthy consumer's p50/p99 during
the flood, the drain rate once the flooded consumer reads (and the broker's CPU time per
message drained: the figure a loaded machine disturbs least), the healthy consumer's p99
during that drain (paged-in reads must not hold the broker up), and whether every message
came, in order. Results go to bench/results/spill-latest.json. `--profile` attaches py-spy
(`pip install py-spy`) to the paging broker for its drain only and writes its collapsed
stacks (flamegraph.pl / speedscope input) to the file given.
"""
import argparse
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from bench.procstat import cpu_seconds, rss_mb
from bench.processes import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def lines(sock, buffer=b""):
    """(complete lines, the rest) of what one recv brought."""
    data = sock.recv(1 << 20)
    if not data:
        raise ConnectionError("closed")
    parts = (buffer + data).split(b"\n")
    return parts[:-1], parts[-1]


def consume(sock, queue, event):
    """Consume `queue` (bound to `event`) as consumer id `queue` (ids are per broker)."""
    sock.sendall(b"%s consume --confirm %s %s\n" % (queue, queue, event))
    buffer = b""
    while True:
        got, buffer = lines(sock, buffer)
        if b"%s ok " % queue in got:
            return buffer
        if got:
            raise RuntimeError(f"consume {queue}: {got!r}")


class Broker:
    def __init__(self, workdir, spill, durable):
        self.workdir = workdir
        self.ports = {"mqks": free_port(), "admin": free_port()}
        config = os.path.join(workdir, "broker.toml")
        with open(config, "w") as f:
            if not spill:
                f.write('[broker]\nqueue_memory_window = "max"\n')
            if durable:
                f.write('[durability]\nqueues = ["flood"]\nfsync = "never"\n')
        args = [TWISTD, "-n", "--pidfile=", "mqksbridge", "--data",
                os.path.join(workdir, "var"), "--config", config,
                "--mqks", f"tcp:{self.ports['mqks']}:interface=127.0.0.1",
                "--admin", f"tcp:{self.ports['admin']}:interface=127.0.0.1",
                "--malamute", "none", "--twino", "none"]
        self.log = open(os.path.join(workdir, "twistd.log"), "wb")
        self.process = subprocess.Popen(args, cwd=workdir, stdout=self.log,
                                        stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.ports["mqks"]), 1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("twistd did not start")

    def stop(self):
        self.process.kill()
        self.process.wait(10)
        self.log.close()


class Probe:
    """Publishes a timestamped probe to `healthy` every 10 ms and reads them back, in a
    process of its own: the flood's client threads must not hold up its clock (the GIL)."""

    def __init__(self, port):
        context = multiprocessing.get_context("fork")
        self.stop = context.Event()
        self.phase = context.Value("i", 0)    # what a probe's latency counts for: PHASES
        self.results = context.Queue()
        self.process = context.Process(target=self.run, args=(port,), daemon=True)
        self.latencies = []

    def start(self):
        self.process.start()

    def join(self, timeout):
        self.latencies = self.results.get(timeout=timeout)
        self.process.join(timeout)

    def run(self, port):
        reader, writer = connect(port), connect(port)
        buffer = consume(reader, b"healthy", b"ev.healthy")
        reader.settimeout(0.01)
        latencies = []
        n = 0
        while not self.stop.is_set():
            n += 1
            writer.sendall(b"p%d publish ev.healthy %.9f\n" % (n, time.perf_counter()))
            deadline = time.monotonic() + 0.01
            while time.monotonic() < deadline:
                try:
                    got, buffer = lines(reader, buffer)
                except socket.timeout:
                    continue
                now = time.perf_counter()
                phase = self.phase.value
                for line in got:
                    fields = line.split(b" ")       # CID ok MID event=E TIME
                    if len(fields) >= 5 and phase:
                        latencies.append((phase, now - float(fields[4])))
        self.results.put(latencies)


FLOOD, DRAIN = 1, 2      # Probe.phase: the flood, the flooded consumer's drain


def percentile(values, fraction):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def flood(broker, messages, size, sample):
    """Publish `messages` confirmed messages in windows; returns messages/s."""
    sock = connect(broker.ports["mqks"])
    body = b"x" * (size - 12)
    window = 1000
    start = time.perf_counter()
    buffer = b""
    for first in range(0, messages, window):
        batch = range(first, min(messages, first + window))
        sock.sendall(b"".join(b"%d publish --confirm ev.flood %012d%s\n" % (i, i, body)
                              for i in batch))
        waiting = len(batch)
        while waiting:
            got, buffer = lines(sock, buffer)
            waiting -= sum(1 for line in got if line.endswith(b" ok "))
        sample()
    return messages / (time.perf_counter() - start)


def drain(broker, stalled, messages, sample):
    """The flooded consumer reads at last: every message, in order? Returns (ok, rate)."""
    expected, buffer, start = 0, b"", time.perf_counter()
    ok = True
    stalled.settimeout(120)
    while expected < messages:
        got, buffer = lines(stalled, buffer)
        for line in got:
            fields = line.split(b" ", 4)     # CID ok MID event=E DATA
            if len(fields) < 5 or fields[1] != b"ok":
                continue
            if int(fields[4][:12]) != expected:
                ok = False
            expected += 1
        if expected % 50_000 < 500:
            sample()
    return ok, messages / (time.perf_counter() - start)


def profiler(pid, path):
    """py-spy recording the broker `pid` until stopped (SIGINT: it writes `path` then)."""
    py_spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return subprocess.Popen([py_spy, "record", "--pid", str(pid), "--format", "raw",
                             "--rate", "200", "--output", path, "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(spill, messages, size, durable, profile=None):
    workdir = tempfile.mkdtemp(prefix="spill-bench-")
    broker = Broker(workdir, spill, durable)
    try:
        port, pid = broker.ports["mqks"], broker.process.pid
        stalled = connect(port)
        consume(stalled, b"flood", b"ev.flood")
        probe = Probe(port)
        probe.start()
        time.sleep(1.0)
        base = rss_mb(pid)
        peak = [base]

        def sample():
            peak[0] = max(peak[0], rss_mb(pid))

        probe.phase.value = FLOOD
        rate = flood(broker, messages, size, sample)
        probe.phase.value = 0
        flood_peak = peak[0]
        recorder = profiler(pid, profile) if profile else None
        cpu = cpu_seconds(pid)
        probe.phase.value = DRAIN
        in_order, drain_rate = drain(broker, stalled, messages, sample)
        probe.phase.value = 0
        drain_cpu = cpu_seconds(pid) - cpu
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.wait(60)
        probe.stop.set()
        probe.join(30)
        lat = [latency for phase, latency in probe.latencies if phase == FLOOD]
        lat_drain = [latency for phase, latency in probe.latencies if phase == DRAIN]
        return {"spill": spill, "durable": durable, "messages": messages, "size": size,
                "publish_per_s": round(rate), "drain_per_s": round(drain_rate),
                "drain_cpu_us_per_msg": round(drain_cpu / messages * 1e6, 2),
                "rss_before_mb": round(base, 1), "rss_growth_flood_mb": round(flood_peak - base, 1),
                "rss_growth_peak_mb": round(peak[0] - base, 1),
                "healthy_p50_ms": round(percentile(lat, 0.5) * 1000, 2) if lat else None,
                "healthy_p99_ms": round(percentile(lat, 0.99) * 1000, 2) if lat else None,
                "healthy_probes": len(lat),
                "healthy_drain_p99_ms": (round(percentile(lat_drain, 0.99) * 1000, 2)
                                         if lat_drain else None),
                "healthy_drain_probes": len(lat_drain), "in_order_and_complete": in_order}
    except Exception:
        with open(os.path.join(workdir, "twistd.log"), errors="replace") as f:
            sys.stderr.write(f.read()[-4000:])
        raise
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--durable", action="store_true", help="queue flood is durable")
    parser.add_argument("--profile", metavar="PATH",
                        help="py-spy the paging broker's drain into PATH (collapsed stacks)")
    options = parser.parse_args()
    results = [run(spill, options.messages, options.size, options.durable,
                   options.profile if spill else None)
               for spill in (True, False)]
    for result in results:
        print(json.dumps(result))
    spilled, resident = results
    summary = {"runs": results,
               "publish_ratio_spill_over_memory": round(
                   spilled["publish_per_s"] / resident["publish_per_s"], 2),
               "drain_ratio_spill_over_memory": round(
                   spilled["drain_per_s"] / resident["drain_per_s"], 2),
               "drain_cpu_ratio_memory_over_spill": round(
                   resident["drain_cpu_us_per_msg"] / spilled["drain_cpu_us_per_msg"], 2)}
    name = "spill-durable-latest.json" if options.durable else "spill-latest.json"
    with open(os.path.join(HERE, "results", name), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}))


if __name__ == "__main__":
    main()
