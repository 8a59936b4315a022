"""Malamute service requests: broker CPU per request, requests/s, where the time goes.

    python -m bench.malamute_service_bench [--base CHECKOUT] [--rounds 3] [--n 200000]
                                           [--profile] [--paths service,stream,mailbox,rtt]

A real broker subprocess (bench.malamute_load server, pinned to its own CPU) and real
ZMTP over loopback TCP: W workers offering the service (1, 4) and M clients (1, 8)
sending it requests of 20 B and 4 KiB, pipelined as mlm_client_sendfor does (no reply
awaited; bench.malamute_load workers/clients). The figure of merit is the broker's
process CPU time divided by the requests it passed on: on a shared 2-core machine it
moves far less than wall time does. Requests/s is the wall-clock rate from the clients'
first send to the workers' last request.

With --base, each round starts one broker per checkout (PYTHONPATH=CHECKOUT/src; the
broker prints where it imported mqksbridge from, which is checked) and runs every case
on both, alternating which goes first; the report gives medians and new/base ratios.
`stream` and `mailbox` are bench.malamute_bench's runs (CPU-us per message there), `rtt`
its one-at-a-time mailbox round trip (p50/p99).

--profile runs each case once more under cProfile in the broker (new checkout only) and
groups its time per request: socket read, ZMTP decode, ZPROTO decode, queue hand-off,
encode, write, reactor and other (builtins count for the group of their caller).
Results go to bench/results/malamute-service-latest.json.
"""
import argparse
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench import malamute_bench
from bench.processes import HERE, PY, ROOT, _cpus, last_json, spawn
from bench.procstat import cpu_ns

CASES = [(w, m, size) for size in (20, 4096) for w in (1, 4) for m in (1, 8)]


class Broker:
    """One broker process running `tree`'s mqksbridge."""

    def __init__(self, tree, profile=None):
        self.endpoint = malamute_bench.free_endpoint()
        cpus = _cpus("server")
        env = dict(os.environ, PYTHONPATH=os.path.join(tree, "src"))
        self.proc = subprocess.Popen(
            [PY, "-m", "bench.malamute_load", "server", self.endpoint,
             *([profile] if profile else [])], cwd=ROOT, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
            preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)))
        line = self.proc.stdout.readline().split()
        want = os.path.realpath(os.path.join(tree, "src", "mqksbridge"))
        if line[:1] != ["ready"] or os.path.realpath(line[1]) != want:
            raise SystemExit(f"broker for {tree} said {line!r}")
        self.pid = self.proc.pid
        self.runs = 0
        time.sleep(0.3)

    def service(self, w, m, size, n):
        self.runs += 1
        return service(self.endpoint, self.pid, f"bench-{self.runs}", w, m, size, n)

    def path(self, name, n):
        return path(self.endpoint, self.pid, name, n)

    def rtt(self, n, use_zmq):
        return rtt(self.endpoint, n, use_zmq)

    def signal(self, sig, expect):
        os.kill(self.pid, sig)
        if expect:
            assert self.proc.stdout.readline().strip() == expect

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def service(endpoint, pid, name, w, m, size, n, use_zmq=False):
    """One service case against the broker at `endpoint` (process `pid`), service `name`:
    broker CPU-us per request, requests/s, per-worker counts (pyzmq peers with `use_zmq`)."""
    zmq_flag = ["--zmq"] if use_zmq else []
    workers = spawn("bench.malamute_load", "workers", endpoint, name, str(w), str(n),
                    str(size), *zmq_flag, pin=True)
    clients = spawn("bench.malamute_load", "clients", endpoint, name, str(m), str(n),
                    str(size), *zmq_flag, pin=True)
    assert workers.stdout.readline().strip() == "ready"
    assert clients.stdout.readline().strip() == "ready"
    cpu0 = cpu_ns(pid)
    clients.stdin.write("go\n")
    clients.stdin.flush()
    got, sent = last_json(workers), last_json(clients)
    cpu = (cpu_ns(pid) - cpu0) / 1e9
    if got["count"] != n:
        raise SystemExit(f"{n} requests sent, {got['count']} arrived: {got}")
    return {"cpu_us": cpu / n * 1e6, "per_s": n / ((got["last_ns"] - sent["start_ns"]) / 1e9),
            "per_worker": got["per_worker"]}


def path(endpoint, pid, name, n, use_zmq=False):
    """bench.malamute_bench's stream or mailbox run: broker CPU-us per message."""
    cpu0 = cpu_ns(pid)
    result = malamute_bench.run(name, endpoint, pid, False, n, use_zmq)
    cpu = (cpu_ns(pid) - cpu0) / 1e9
    if result["delivered"] != n:
        raise SystemExit(f"{name}: {n} sent, {result['delivered']} delivered")
    return {"cpu_us": cpu / n * 1e6, "per_s": result["delivered_per_s"]}


def rtt(endpoint, n, use_zmq):
    """Mailbox round trip A -> B -> A, one at a time (not pinned: A and B must not
    queue behind each other on one CPU)."""
    result = last_json(spawn("bench.malamute_load", "rtt", endpoint, str(n),
                             *(["--zmq"] if use_zmq else [])))
    return {"p50_us": result["p50_us"], "p99_us": result["p99_us"]}


# -- the profile, grouped ----------------------------------------------------------------

GROUPS = [   # (path fragment, function names or None for all) -> group, first match wins
    ("protocols/zmtp/codec.py", {"message", "frame", "pair"}, "encode"),
    ("protocols/zmtp/", None, "ZMTP decode"),
    ("malamute/zmtp_router.py", {"dataReceived", "_events"}, "ZMTP decode"),
    ("malamute/zmtp_router.py", None, "write"),
    ("protocols/malamute/codec.py", {"encode", "encode_service_deliver",
                                     "encode_mailbox_deliver", "encode_stream_deliver"},
     "encode"),
    ("protocols/malamute/", None, "ZPROTO decode"),
    ("malamute/door.py", {"received_all", "received", "_active", "_command", "_apply"},
     "ZPROTO decode"),
    ("convert/malamute.py", {"service_frames", "mailbox_frames", "stream_frames"}, "encode"),
    ("malamute/peer.py", {"_frames"}, "encode"),
    ("malamute/peer.py", {"_send"}, "write"),
    ("bridge/outbox.py", None, "write"),
    ("core/", None, "queue hand-off"),
    ("malamute/", None, "queue hand-off"),
    ("convert/", None, "queue hand-off"),
    ("bridge/traffic.py", None, "queue hand-off"),
    ("twisted/internet/tcp.py", {"doRead", "_dataReceived"}, "socket read"),
    ("twisted/internet/", {"write", "doWrite", "writeSomeData", "_postLoseConnection",
                           "writeSequence"}, "write"),
]
ORDER = ["socket read", "ZMTP decode", "ZPROTO decode", "queue hand-off", "encode", "write",
         "reactor and other"]


def group_of(func):
    path, _, name = func
    for fragment, names, group in GROUPS:
        if fragment in path and (names is None or name in names):
            return group
    return None


def grouped(stats_file, n):
    """Microseconds per request (under the profiler) by group. A builtin's time (a C call:
    `recv`, `bytes.join`, `deque.append`...) goes to the groups of its callers, in the
    shares its callers recorded."""
    stats = pstats.Stats(stats_file).stats
    out = dict.fromkeys(ORDER, 0.0)

    def place(func, seconds, depth=0):
        group = group_of(func)
        if group is not None:
            out[group] += seconds
        elif func[0] == "~" and depth < 4 and stats.get(func, (0,) * 5)[4]:
            callers = stats[func][4]
            total = sum(c[2] for c in callers.values()) or 1.0
            if func[2].startswith("<method 'recv"):
                out["socket read"] += seconds
                return
            if func[2].startswith("<method 'send"):
                out["write"] += seconds
                return
            for caller, c in callers.items():
                place(caller, seconds * c[2] / total, depth + 1)
        else:
            out["reactor and other"] += seconds

    for func, (cc, nc, tt, ct, callers) in stats.items():
        place(func, tt)
    return {k: v / n * 1e6 for k, v in out.items()}


def profile(tree, cases, n, keep=None):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = keep or tmp
        for w, m, size in cases:
            path = os.path.join(tmp, f"{w}-{m}-{size}.prof")
            broker = Broker(tree, profile=path)
            try:
                broker.signal(signal.SIGUSR1, None)
                result = broker.service(w, m, size, n)
                broker.signal(signal.SIGUSR2, "profiled")
            finally:
                broker.stop()
            groups = grouped(path, n)
            rows.append({"case": f"W{w} M{m} {size}B", "profiled_cpu_us": result["cpu_us"],
                         **{k: round(v, 2) for k, v in groups.items()}})
            total = sum(groups.values())
            print(f"profile W{w} M{m} {size:>4}B: " + "  ".join(
                f"{k} {v:.2f} ({v / total:.0%})" for k, v in groups.items())
                + f"  = {total:.2f} us/request in the profiler "
                f"({result['cpu_us']:.2f} us process CPU)", flush=True)
    return rows


# -- A/B ------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", help="another checkout (its root, holding src/)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=200_000, help="requests per case")
    parser.add_argument("--cases", help="W-M-SIZE,... (default: all eight)")
    parser.add_argument("--paths", default="service,stream,mailbox,rtt")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-only", action="store_true")
    parser.add_argument("--keep-profile", help="a directory to keep the .prof files in")
    args = parser.parse_args()
    cases = CASES if not args.cases else [tuple(map(int, c.split("-")))
                                          for c in args.cases.split(",")]
    trees = {"new": ROOT, **({"base": os.path.abspath(args.base)} if args.base else {})}
    paths = args.paths.split(",")
    runs = {}                                   # (tree, what) -> [result]
    if not args.profile_only:
        for r in range(args.rounds):
            order = list(trees.items())
            for name, tree in (order[::-1] if r % 2 else order):
                broker = Broker(tree)
                try:
                    if "rtt" in paths:
                        runs.setdefault((name, "rtt plain sockets"), []).append(
                            broker.rtt(5000, False))
                        runs.setdefault((name, "rtt pyzmq"), []).append(broker.rtt(5000, True))
                    if "service" in paths:
                        for w, m, size in cases:
                            result = broker.service(w, m, size, args.n)
                            runs.setdefault((name, f"service W{w} M{m} {size}B"), []).append(result)
                    for p in ("stream", "mailbox"):
                        if p in paths:
                            runs.setdefault((name, p), []).append(broker.path(p, args.n))
                finally:
                    broker.stop()
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    report = []
    whats = list(dict.fromkeys(what for _, what in runs))
    for what in whats:
        row = {"what": what}
        for name in trees:
            results = runs[(name, what)]
            for key in results[0]:
                if key != "per_worker":
                    row[f"{name}_{key}"] = round(statistics.median(x[key] for x in results), 2)
            if "per_worker" in results[0]:
                row[f"{name}_per_worker"] = results[-1]["per_worker"]
        if "base" in trees:
            for key in ("cpu_us", "per_s", "p50_us", "p99_us"):
                if f"new_{key}" in row:
                    row[f"{key}_new/base"] = round(row[f"new_{key}"] / row[f"base_{key}"], 3)
        report.append(row)
        print(json.dumps(row), flush=True)
    if args.profile or args.profile_only:
        report.append({"profile": profile(ROOT, cases, args.n, args.keep_profile)})
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "malamute-service-latest.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
