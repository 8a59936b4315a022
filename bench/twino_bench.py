"""Twino door benchmark: separate processes for the broker, the producer and each consumer.

    python -m bench.twino_bench [--quick] [--scenarios push-noack,push-ack,...]
Reports deliveries/s, p50/p99 latency (the latency scenario: push at a fixed rate; pull:
per pull request), the broker's CPU per delivery and the generator's own CPU. Results go to
bench/results/twino-latest.json.
"""
import argparse
import json
import os
import resource
import time

from bench.procstat import cpu_seconds, rss_mb
from bench.processes import HERE, free_port, spawn
from mqksbridge.bridge.clients import twino

# name: (status, request ack, consumers, messages, rate, consumer flags)
SCENARIOS = {
    "push-noack": ("push", False, 1, 300_000, 0, []),
    "push-ack": ("push", True, 1, 200_000, 0, ["--ack"]),
    "round-robin-4": ("round-robin", False, 4, 200_000, 0, []),
    "broadcast-20": ("broadcast", False, 20, 20_000, 0, []),
    "pull-100": ("pull", False, 0, 100_000, 0, []),
    "latency-2000": ("push", False, 1, 20_000, 2000, ["--latency"]),
}
QUICK = {"push-noack": 50_000, "push-ack": 30_000, "round-robin-4": 40_000,
         "broadcast-20": 3_000, "pull-100": 20_000, "latency-2000": 4_000}


def make_queue(port, channel, status, ack):
    with twino.connect(port=port) as admin:
        answer = admin.operation(610, channel, [("Channel-Name", channel), ("Queue-Id", "1"),
                                                ("Queue-Status", status)],
                                 json.dumps({"RequestAcknowledge": ack}).encode())
        assert answer.content_type == 0, answer


def run_scenario(name, port, server_pid, n):
    status, ack, members, _, rate, flags = SCENARIOS[name]
    channel = f"bench-{name}"
    make_queue(port, channel, status, ack)
    consumers = []
    per_consumer = n if status in ("push", "broadcast") else n // max(1, members)
    for _ in range(members):
        p = spawn("bench.twino_load", "consumer", str(port), channel, str(per_consumer), *flags)
        assert p.stdout.readline().strip() == "ready"
        consumers.append(p)
    producer = spawn("bench.twino_load", "producer", str(port), channel, "1", str(n), "40",
                     str(rate))
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if status == "pull":                      # fill first, then time the pulls alone
        producer.stdin.write("go\n")
        producer.stdin.flush()
        producer.wait()
        producer.stdout.read()
        puller = spawn("bench.twino_load", "puller", str(port), channel, "1", str(n), "100")
        consumers = [puller]
        starter = puller
    else:
        starter = producer
    cpu0 = cpu_seconds(server_pid)
    peak = rss_mb(server_pid)
    starter.stdin.write("go\n")
    starter.stdin.flush()
    procs = consumers + ([producer] if starter is producer else [])
    while any(p.poll() is None for p in procs):
        peak = max(peak, rss_mb(server_pid))
        time.sleep(0.05)
    server_cpu = cpu_seconds(server_pid) - cpu0
    results = [json.loads(p.stdout.read().strip().splitlines()[-1]) for p in consumers]
    start = (json.loads(producer.stdout.read().strip().splitlines()[-1])["start_ns"]
             if starter is producer else results[0]["start_ns"])
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    loadgen = (children.ru_utime - children0.ru_utime) + (children.ru_stime - children0.ru_stime)
    deliveries = sum(r["count"] for r in results)
    elapsed = (max(r["last_ns"] for r in results) - start) / 1e9
    row = {"scenario": name, "messages": n, "deliveries": deliveries,
           "seconds": round(elapsed, 3), "deliveries_per_s": round(deliveries / elapsed),
           "server_cpu_s": round(server_cpu, 2),
           "server_cpu_us_per_delivery": round(server_cpu / max(1, deliveries) * 1e6, 2),
           "loadgen_cpu_s": round(loadgen, 2), "server_peak_rss_mb": round(peak, 1)}
    if "p50_us" in results[0]:
        row.update({k: round(results[0][k], 1) for k in ("p50_us", "p99_us", "max_us")})
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    port = free_port()
    server = spawn("bench.server", "mqksbridge", str(port), "twino")
    rows = []
    try:
        assert server.stdout.readline().strip() == "ready"
        for name in args.scenarios.split(","):
            n = QUICK[name] if args.quick else SCENARIOS[name][3]
            row = run_scenario(name, port, server.pid, n)
            lat = f"  p50 {row['p50_us']}us p99 {row['p99_us']}us" if "p50_us" in row else ""
            print(f"{name:<14} {row['deliveries_per_s']:>9,} deliveries/s  server "
                  f"{row['server_cpu_us_per_delivery']:>5} CPU-us/delivery  loadgen "
                  f"{row['loadgen_cpu_s']:>5} CPU-s{lat}", flush=True)
            rows.append(row)
    finally:
        server.terminate()
        server.wait(10)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "twino-latest.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
