"""What the admin endpoint costs the message path (docs/admin.md, "Cost").

    python -m bench.admin_overhead [--rounds 8] [--messages 200000] [--compare-tree DIR]
    python -m bench.admin_overhead --cross-door [--rounds 5] [--messages 500000] [--path mqks-twino]

One broker process (MQKS door and admin endpoint) runs the MQKS publish -> consume path
(bench.mqks_load: one publisher, one consumer, 40-byte messages) in interleaved rounds:
`quiet` rounds with nobody on the admin endpoint, `watched` rounds while a poller does what
an open dashboard and a Prometheus server do, every second: GET /api/overview, /api/queues,
/api/connections and /metrics. It reports deliveries/s per round, each watched round
against the quiet rounds around it, and the median of those ratios (target: >= 0.95).

With `--compare-tree DIR` (a checkout without this work, e.g. /work/main) a second broker
from DIR/src runs the same path in the same interleaving (`before` rounds, no admin
endpoint), so the doors' counters are measured against the code without them.
Results: bench/results/admin-overhead-latest.json.

With `--cross-door`, one broker with every door and the admin endpoint (bench.interop_bench's
server) runs the MQKS path and each cross-door path of bench.interop_bench, quiet and watched
rounds interleaved per path, and reports per path the median watched/quiet ratio of msgs/s
and of the broker's CPU per message (the load-independent figure: it includes what the
admin answers cost the broker's reactor). Results: bench/results/admin-overhead-cross-door.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from bench import interop_bench as interop
from bench.processes import HERE, PY, ROOT, free_port, last_json, spawn

ROUTES = ("/api/overview", "/api/queues", "/api/connections", "/metrics")


def server(mqks_port, admin_port):
    """A broker with only the MQKS door (and the admin endpoint, where the tree has one)."""
    from twisted.internet import reactor

    from mqksbridge.bridge import config
    from mqksbridge.bridge.service import build
    overrides = {name: {"listen": []} for name, section in config.DEFAULTS.items()
                 if isinstance(section, dict) and "listen" in section}
    overrides["mqks"] = {"listen": [f"tcp:{mqks_port}:interface=127.0.0.1"]}
    if "admin" in config.DEFAULTS:
        overrides["admin"] = {"listen": [f"tcp:{admin_port}:interface=127.0.0.1"]}
    top = build(config.load(overrides=overrides), reactor)[0]
    top.startService()
    reactor.addSystemEventTrigger("before", "shutdown", top.stopService)   # its threads too
    reactor.callWhenRunning(lambda: print("ready", flush=True))
    reactor.run()


def start_server(tree=None):
    mqks_port, admin_port = free_port(), free_port()
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.path.join(tree, "src")
    cpus = sorted(os.sched_getaffinity(0))
    pin = (lambda: os.sched_setaffinity(0, cpus[:1])) if len(cpus) > 1 else None
    proc = subprocess.Popen([PY, "-m", "bench.admin_overhead", "server", str(mqks_port),
                             str(admin_port)], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, preexec_fn=pin)
    assert proc.stdout.readline().strip() == "ready"
    return proc, mqks_port, admin_port


class Poller(threading.Thread):
    """The dashboard and a Prometheus scrape: every route once a second."""

    def __init__(self, admin_port):
        super().__init__(daemon=True)
        self.base = f"http://127.0.0.1:{admin_port}"
        self.running = threading.Event()
        self.requests = 0

    def run(self):
        while True:
            self.running.wait()
            started = time.monotonic()
            for route in ROUTES:
                with urllib.request.urlopen(self.base + route, timeout=10) as response:
                    response.read()
                self.requests += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


def round_(port, n, tag):
    event = f"ev-{tag}"
    consumer = spawn("bench.mqks_load", "consumer", str(port), f"c-{tag}", f"q-{tag}", event,
                     str(n), pin=True)
    assert consumer.stdout.readline().strip() == "ready"
    publisher = spawn("bench.mqks_load", "publisher", str(port), event, str(n), "0", "40",
                      pin=True)
    publisher.stdin.write("go\n")
    publisher.stdin.flush()
    pub, con = last_json(publisher), last_json(consumer)
    assert con["count"] == n, con
    return round(n / ((con["last_ns"] - pub["start_ns"]) / 1e9))


def cross_door(rounds, n, only=None):
    """Each path of CROSS_PATHS (or those `only` names, as `mqks-twino`) on one broker with
    every door: quiet and watched rounds interleaved (bench.interop_bench.run_path), ratios
    per round, medians per path."""
    paths = [p for p in CROSS_PATHS if not only or "-".join(p[:2]) in only]
    broker = interop.Broker(admin=True)
    poller = Poller(broker.admin)
    poller.start()
    report = {"messages_per_round": n, "rounds": rounds, "paths": {}}
    try:
        for path in paths:
            label = "->".join(path[:2]) + f" {path[2]}"
            interop.run_path(broker, path, 20_000)         # warm: imports, caches, names
            runs = {"quiet": [], "watched": []}
            for i in range(rounds):
                for kind in ("quiet", "watched") if i % 2 == 0 else ("watched", "quiet"):
                    if kind == "watched":
                        poller.running.set()
                        time.sleep(1.0)                     # the dashboard is open already
                    runs[kind].append(interop.run_path(broker, path, n))
                    poller.running.clear()
                print(f"{label:<24} round {i}: " + "  ".join(
                    f"{k} {runs[k][-1]['msgs_per_s']:>9,.0f}/s "
                    f"{runs[k][-1]['server_cpu_us_per_msg']:.2f} us/msg" for k in runs),
                    flush=True)
            rate = [w["msgs_per_s"] / q["msgs_per_s"]
                    for w, q in zip(runs["watched"], runs["quiet"])]
            cpu = [w["server_cpu_us_per_msg"] / q["server_cpu_us_per_msg"]
                   for w, q in zip(runs["watched"], runs["quiet"])]
            row = report["paths"][label] = {
                **{f"{k}_msgs_per_s": [round(r["msgs_per_s"]) for r in v]
                   for k, v in runs.items()},
                **{f"{k}_cpu_us_per_msg": [round(r["server_cpu_us_per_msg"], 3) for r in v]
                   for k, v in runs.items()},
                "watched_over_quiet_rate_median": round(statistics.median(rate), 3),
                "watched_over_quiet_cpu_median": round(statistics.median(cpu), 3),
            }
            print(f"{label:<24} watched/quiet: msgs/s {row['watched_over_quiet_rate_median']:.3f}"
                  f", broker CPU/msg {row['watched_over_quiet_cpu_median']:.3f}", flush=True)
    finally:
        broker.stop()
    report["admin_requests"] = poller.requests
    name = "admin-overhead-cross-door" + ("-" + "_".join(only) if only else "") + ".json"
    with open(os.path.join(HERE, "results", name), "w") as f:
        json.dump(report, f, indent=1)


# the MQKS path and bench.interop_bench's cross-door paths (publisher door, consumer door, kind)
CROSS_PATHS = (interop.MQKS_OWN,) + tuple(paths[0] for paths in interop.COMPARISONS.values())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=None, help="rounds of each kind")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--compare-tree", help="a checkout to run as the `before` broker")
    parser.add_argument("--cross-door", action="store_true",
                        help="every door's broker: the MQKS path and the cross-door paths")
    parser.add_argument("--path", action="append",
                        help="with --cross-door, only this path (e.g. mqks-twino; repeatable)")
    args = parser.parse_args()
    if args.cross_door:
        return cross_door(args.rounds or 5, args.messages or 500_000, args.path)
    args.rounds, args.messages = args.rounds or 8, args.messages or 200_000
    ours, mqks_port, admin_port = start_server()
    before = start_server(args.compare_tree) if args.compare_tree else None
    poller = Poller(admin_port)
    poller.start()
    kinds = ["quiet", "watched"] + (["before"] if before else [])
    results = {kind: [] for kind in kinds}
    try:
        round_(mqks_port, 20_000, "warm")               # imports, caches, the first queue
        if before:
            round_(before[1], 20_000, "warm")
        for i in range(args.rounds):
            order = kinds if i % 2 == 0 else kinds[::-1]
            for kind in order:
                if kind == "watched":
                    poller.running.set()
                    time.sleep(1.0)                     # the dashboard is open already
                rate = round_(before[1] if kind == "before" else mqks_port, args.messages,
                              f"{kind}{i}")
                poller.running.clear()
                results[kind].append(rate)
                print(f"round {i} {kind:<8} {rate:>9,} deliveries/s", flush=True)
    finally:
        for proc in (ours, before[0] if before else None):
            if proc is not None:
                proc.terminate()
                proc.wait(10)
    pairs = [w / q for w, q in zip(results["watched"], results["quiet"])]
    report = {
        "messages_per_round": args.messages, "rounds": args.rounds,
        "deliveries_per_s": results, "admin_requests": poller.requests,
        "watched_over_quiet_per_round": [round(r, 3) for r in pairs],
        "watched_over_quiet_median": round(statistics.median(pairs), 3),
        "quiet_median": statistics.median(results["quiet"]),
        "watched_median": statistics.median(results["watched"]),
    }
    print(f"watched/quiet: median {report['watched_over_quiet_median']:.3f} "
          f"(per round {', '.join(f'{r:.3f}' for r in pairs)}; "
          f"{poller.requests} admin requests)")
    if before:
        counted = [q / b for q, b in zip(results["quiet"], results["before"])]
        report["before_median"] = statistics.median(results["before"])
        report["quiet_over_before_per_round"] = [round(r, 3) for r in counted]
        report["quiet_over_before_median"] = round(statistics.median(counted), 3)
        print(f"quiet/before (counters vs the tree without them): median "
              f"{report['quiet_over_before_median']:.3f} "
              f"(per round {', '.join(f'{r:.3f}' for r in counted)})")
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "admin-overhead-latest.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["server"]:
        server(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
