"""MQKS benchmark: our broker against the naive same-session baseline.

    python -m bench.run [--quick] [--only mqksbridge|baseline] [--scenarios simple,fanout,...]

Every process is separate: the server, one publisher, one process per consumer. The
server's CPU comes from /proc; the generator reports its own CPU so we can see it is
not the bottleneck. Results go to bench/results/mqks-latest.json (and a PNG chart when
matplotlib is installed).
"""
import argparse
import json
import os
import resource
import socket
import time

from bench.processes import HERE, ROOT, free_port, spawn
from bench.procstat import cpu_seconds, rss_mb


SCENARIOS = {
    # name: (queues, consumers per queue, messages, rate, size, consumer flags)
    "simple": (1, 1, 300_000, 0, 40, []),
    "fanout": (10, 1, 40_000, 0, 40, []),
    "manual-ack": (1, 1, 200_000, 0, 40, ["--manual-ack"]),
    "latency-2000": (1, 1, 20_000, 2000, 40, ["--latency"]),
    "backlog-1M": (1, 1, 1_000_000, 0, 40, ["--slow"]),
}
QUICK = {"simple": 50_000, "fanout": 5_000, "manual-ack": 30_000, "latency-2000": 4_000,
         "backlog-1M": 100_000}


class DepthProbe:
    """Reads a queue's backlog from our broker over MQKS `_eval` while a run goes on."""

    def __init__(self, port, queue):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.request = f"d _eval state.messages_by_queues['{queue}']\n".encode()

    def depth(self):
        self.sock.sendall(self.request)
        reply = b""
        while not reply.endswith(b"\n"):
            reply += self.sock.recv(4096)
        parts = reply.split()
        return int(parts[2]) if parts[1] == b"ok" else None


def run_scenario(kind, name, port, server_pid, spec, n_override=None):
    queues, per_queue, n, rate, size, flags = spec
    n = n_override or n
    event = f"ev-{name}"
    consumers = []
    for q in range(queues):
        for k in range(per_queue):
            expect = n // per_queue
            p = spawn("bench.mqks_load", "consumer", str(port), f"c-{name}-{q}-{k}",
                      f"q-{name}-{q}", event, str(expect), *flags)
            assert p.stdout.readline().strip() == "ready"
            consumers.append(p)
    publisher = spawn("bench.mqks_load", "publisher", str(port), event, str(n), str(rate), str(size))
    cpu0 = cpu_seconds(server_pid)
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_rss = rss_mb(server_pid)
    publisher.stdin.write("go\n")
    publisher.stdin.flush()
    samples = []
    depth = DepthProbe(port, f"q-{name}-0") if kind == "mqksbridge" else None
    t0 = time.monotonic()
    while any(p.poll() is None for p in consumers + [publisher]):
        rss = rss_mb(server_pid)
        peak_rss = max(peak_rss, rss)
        samples.append((round(time.monotonic() - t0, 2), round(rss, 1),
                        depth.depth() if depth else None))
        time.sleep(0.05)
    server_cpu = cpu_seconds(server_pid) - cpu0
    pub = json.loads(publisher.stdout.read().strip().splitlines()[-1])
    cons = [json.loads(p.stdout.read().strip().splitlines()[-1]) for p in consumers]
    for p in consumers + [publisher]:
        p.wait()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    loadgen_cpu = (children.ru_utime - children0.ru_utime) + (children.ru_stime - children0.ru_stime)
    deliveries = sum(c["count"] for c in cons)
    elapsed = (max(c["last_ns"] for c in cons) - pub["start_ns"]) / 1e9
    result = {
        "server": kind, "scenario": name, "messages": n, "deliveries": deliveries,
        "seconds": round(elapsed, 3),
        "deliveries_per_s": round(deliveries / elapsed),
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_us_per_delivery": round(server_cpu / max(1, deliveries) * 1e6, 2),
        "loadgen_cpu_s": round(loadgen_cpu, 2),
        "server_peak_rss_mb": round(peak_rss, 1),
        "rss_samples": samples[::max(1, len(samples) // 200)],
    }
    if "p50_us" in cons[0]:
        result.update({k: round(cons[0][k], 1) for k in ("p50_us", "p90_us", "p99_us", "max_us")})
    return result


def bench_server(kind, names, quick):
    port = free_port()
    server = spawn("bench.server", kind, str(port))
    try:
        assert server.stdout.readline().strip() == "ready"
        results = []
        for name in names:
            r = run_scenario(kind, name, port, server.pid, SCENARIOS[name],
                             QUICK[name] if quick else None)
            print(format_row(r), flush=True)
            results.append(r)
        return results
    finally:
        server.terminate()
        server.wait(10)


def format_row(r):
    lat = f" p50 {r['p50_us']}us p99 {r['p99_us']}us" if "p50_us" in r else ""
    return (f"{r['server']:>10} {r['scenario']:<13} {r['deliveries_per_s']:>9,} deliveries/s"
            f"  server {r['server_cpu_us_per_delivery']:>5} CPU-us/delivery"
            f"  loadgen {r['loadgen_cpu_s']:>5} CPU-s  peak RSS {r['server_peak_rss_mb']} MB{lat}")


def chart(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = [r["scenario"] for r in results if r["server"] == "mqksbridge"
             and not r["scenario"].startswith("latency")]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for i, kind in enumerate(("baseline", "mqksbridge")):
        values = [next((r["deliveries_per_s"] for r in results
                        if r["server"] == kind and r["scenario"] == n), 0) for n in names]
        ax.bar([x + i * width for x in range(len(names))], values, width, label=kind)
    ax.set_xticks([x + width / 2 for x in range(len(names))], names)
    ax.set_ylabel("deliveries / s")
    ax.set_title("MQKS door throughput (same session)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def backlog_chart(results, path):
    """RSS and queue depth over time while a slow consumer drains a big backlog."""
    run = next((r for r in results if r["server"] == "mqksbridge"
                and r["scenario"].startswith("backlog") and r["rss_samples"]), None)
    if run is None:
        return None
    import matplotlib.pyplot as plt
    t = [s[0] for s in run["rss_samples"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t, [s[1] for s in run["rss_samples"]], color="tab:red", label="server RSS (MB)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("RSS (MB)")
    depth = ax.twinx()
    depth.plot(t, [s[2] or 0 for s in run["rss_samples"]], color="tab:blue", label="queue depth")
    depth.set_ylabel("messages queued")
    ax.set_title(f"{run['messages']:,} messages to a slow consumer")
    fig.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["mqksbridge", "baseline"])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    names = args.scenarios.split(",")
    results = []
    for kind in ("baseline", "mqksbridge"):
        if args.only in (None, kind):
            results += bench_server(kind, names, args.quick)
    ours = {r["scenario"]: r for r in results if r["server"] == "mqksbridge"}
    base = {r["scenario"]: r for r in results if r["server"] == "baseline"}
    for name in names:
        if name in ours and name in base:
            ratio = ours[name]["deliveries_per_s"] / max(1, base[name]["deliveries_per_s"])
            print(f"ratio {name:<13} mqksbridge/baseline = {ratio:.2f}x")
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "mqks-latest.json"), "w") as f:
        json.dump(results, f, indent=1)
    png = chart(results, os.path.join(out, "mqks-throughput.png"))
    if png:
        print("chart:", os.path.relpath(png, ROOT))
        png = backlog_chart(results, os.path.join(out, "mqks-backlog.png"))
        if png:
            print("chart:", os.path.relpath(png, ROOT))


if __name__ == "__main__":
    main()
