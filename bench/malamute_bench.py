"""Malamute door benchmark: throughput per kind, round trip, idle RSS, a 1M burst.

stream: every message matches the reader (delivered = sent); stream-perftest: mlm_perftest's
mix, half the messages match; burst: 1M stream messages to a reader taking about 10k/s,
so the broker must drop what the reader cannot take.

    python -m bench.malamute_bench [--quick] [--runs stream,mailbox,...]

Server, writer and reader are separate processes (bench.malamute_load). The server's
CPU and RSS come from /proc; the generator's CPU is the children's rusage, reported so
we can see whether it, not the broker, was the limit. Results go to
bench/results/malamute-latest.json. Reference (malamute 1.2.0, same kind of box):
stream ~50k delivered/s, mailbox ~38k/s, service ~130k/s, RTT ~500 us, idle 7.2 MB,
1.17 GB after a 1M stream burst.
"""
import argparse
import json
import os
import resource
import socket
import time

from bench.processes import HERE, last_json, spawn
from bench.procstat import cpu_seconds, rss_mb


# name: (mode, messages, quick messages, slow reader)
RUNS = {
    "stream": ("stream", 300_000, 50_000, False),
    "stream-perftest": ("perftest", 200_000, 30_000, False),
    "mailbox": ("mailbox", 300_000, 50_000, False),
    "service": ("service", 300_000, 50_000, False),
    "burst-1M-slow-reader": ("stream", 1_000_000, 200_000, True),
}


def free_endpoint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def run(name, endpoint, server_pid, quick, n=None, use_zmq=False):
    """One run of RUNS[name] (with `n`, that many messages instead; with `use_zmq`,
    pyzmq reader and writer)."""
    mode, n_full, n_quick, slow = RUNS[name]
    n = n or (n_quick if quick else n_full)
    zmq_flag = ["--zmq"] if use_zmq else []
    reader = spawn("bench.malamute_load", "reader", endpoint, mode, str(n),
                   *(["--slow"] if slow else []), *zmq_flag)
    assert reader.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    writer = spawn("bench.malamute_load", "writer", endpoint, mode, str(n), *zmq_flag)
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0, peak = cpu_seconds(server_pid), rss_mb(server_pid)
    writer.stdin.write("go\n")
    writer.stdin.flush()
    while reader.poll() is None or writer.poll() is None:
        peak = max(peak, rss_mb(server_pid))
        time.sleep(0.05)
    w, r = last_json(writer), last_json(reader)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    gen_cpu = sum(getattr(children, f) - getattr(children0, f) for f in ("ru_utime", "ru_stime"))
    seconds = (r["last_ns"] - w["start_ns"]) / 1e9
    server_cpu = cpu_seconds(server_pid) - cpu0
    return {
        "run": name, "mode": mode, "messages": n, "delivered": r["count"],
        "dropped_for_slow_reader": n - r["count"],
        "seconds": round(seconds, 3),
        "delivered_per_s": round(r["count"] / seconds),
        "sent_per_s": round(n * (2 if mode == "perftest" else 1) / ((w["end_ns"] - w["start_ns"]) / 1e9)),
        "server_cpu_s": round(server_cpu, 2),
        "generator_cpu_s": round(gen_cpu, 2),
        "server_peak_rss_mb": round(peak, 1),
        "server_rss_after_mb": round(rss_mb(server_pid), 1),
    }


def round_trip(endpoint, quick):
    proc = spawn("bench.malamute_load", "rtt", endpoint, str(1000 if quick else 5000))
    result = last_json(proc)
    return {"run": "mailbox-rtt", **{k: round(v, 1) for k, v in result.items()}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", default=",".join(RUNS))
    args = parser.parse_args()
    endpoint = free_endpoint()
    server = spawn("bench.malamute_load", "server", endpoint)
    results = []
    try:
        assert server.stdout.readline().split()[0] == "ready"
        time.sleep(0.5)
        results.append({"run": "idle", "server_rss_mb": round(rss_mb(server.pid), 1)})
        print(results[-1], flush=True)
        results.append(round_trip(endpoint, args.quick))       # on a quiet broker
        print(results[-1], flush=True)
        for name in args.runs.split(","):
            results.append(run(name, endpoint, server.pid, args.quick))
            print(results[-1], flush=True)
    finally:
        server.terminate()
        server.wait(10)
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "malamute-latest.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
