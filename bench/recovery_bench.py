"""Recovery of a large journal: seconds from starting a real `twistd -n mqksbridge` on a
data directory holding N messages until its MQKS door accepts a connection (the
target: 1M messages in at most 10 s).

    python -m bench.recovery_bench [--n 1000000] [--rounds 3] [--other NAME=TWISTD ...]
                                   [--scratch DIR] [--journal DATA_DIR]

The journal is written once, by the broker's own writer: a `fill` process builds the
broker with queue `q` durable and puts N messages (40-byte bodies, senders and subjects
as an MQKS client sends them) through the core queue, 10 000 per reactor turn, so group
commit writes them as it would for publishers; every 10th is taken at once by an
auto-ack pull (written settled, `=`). Each run starts a broker on a fresh copy of that
data directory; the time runs from the spawn to the first accepted connection on the
MQKS door, and the broker's log must say it recovered every queued message. An `empty`
start (no journal) in the same round shows what starting costs without recovery.
`--other NAME=PATH` adds a run per round with another checkout's twistd (say main's
`.venv/bin/twistd`), the runs of a round interleaved and their order alternating.
Results: bench/results/recovery-latest.json.

    python -m bench.recovery_bench fill DATA_DIR N       (a role)
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench.processes import HERE, PY, ROOT, free_port

BODY = 40
TURN = 10_000
RESULTS = os.path.join(HERE, "results", "recovery-latest.json")
CONFIG = '[durability]\nqueues = ["q"]\nfsync = "never"\n'
TWISTD = os.path.join(os.path.dirname(PY), "twistd")
_RECOVERED = re.compile(r"queue 'q' recovered with (\d+) messages")


# -- the journal ------------------------------------------------------------------------------
def fill(data_dir, n):
    """N messages on durable queue `q`, written by the broker's journal (module docstring)."""
    from twisted.internet import reactor

    from mqksbridge.bridge import config
    from mqksbridge.bridge.service import build
    from mqksbridge.core import Message
    from mqksbridge.core.client import Client
    from mqksbridge.core.consumer import Consumer
    overrides = {name: {"listen": []} for name, section in config.DEFAULTS.items()
                 if isinstance(section, dict) and "listen" in section}
    overrides["data_dir"] = data_dir
    overrides["durability"] = {"queues": ["q"], "fsync": "never"}
    top, broker = build(config.load(overrides=overrides), reactor)[:2]
    top.startService()
    queue = broker.queue("q")
    taker = Consumer("bench", Client("bench", "mqks"), lambda consumer, entry: None)
    body = b"y" * BODY
    sent = [0]

    def turn():
        first = sent[0]
        now = reactor.seconds()
        for i in range(first, min(n, first + TURN)):
            queue.put_message(Message("%016x" % i, "order.new1", (body,),
                                      sender="127.0.0.1:50000.ab", origin="mqks",
                                      created_at=now))
            if i % 10 == 0:
                queue.pull(taker, 1, lifo=True)       # the one just put: acked
        sent[0] = min(n, first + TURN)
        if sent[0] < n:
            reactor.callLater(0, turn)
        else:
            top.stopService().addBoth(lambda _: reactor.stop())
    reactor.callWhenRunning(turn)
    reactor.run()
    print(json.dumps({"messages": n, "queued": n - (n + 9) // 10,
                      "bytes": journal_bytes(data_dir)}), flush=True)


def journal_bytes(data_dir):
    total = 0
    for folder, _, names in os.walk(os.path.join(data_dir, "journal")):
        total += sum(os.path.getsize(os.path.join(folder, f)) for f in names)
    return total


# -- one start --------------------------------------------------------------------------------
def start(twistd, data_dir, config_path, timeout=300.0):
    """(seconds, cpu seconds, recovered): wall time from spawning `twistd` on `data_dir`
    until its MQKS door accepts, the CPU time it used until then, and the number of
    messages its log says queue `q` recovered (None: no journal)."""
    port = free_port()
    args = [twistd, "-n", "--pidfile=", "mqksbridge", "--data", data_dir,
            "--config", config_path, "--mqks", f"tcp:{port}:interface=127.0.0.1",
            "--malamute", "none", "--twino", "none", "--admin", "none"]
    log_path = data_dir + ".log"
    with open(log_path, "wb") as log:
        began = time.perf_counter()
        process = subprocess.Popen(args, cwd=os.path.dirname(data_dir), stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.perf_counter() - began > timeout:
                    raise RuntimeError("broker did not listen:\n" + open(log_path).read())
                time.sleep(0.01)
        seconds = time.perf_counter() - began
        cpu = cpu_seconds(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    with open(log_path, errors="replace") as f:
        found = _RECOVERED.search(f.read())
    return seconds, cpu, int(found.group(1)) if found else None


def cpu_seconds(pid):
    """CPU time (user + system) a process has used so far: on a loaded machine the
    wall time of a start varies with what else runs, its CPU time much less."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load():
    return round(os.getloadavg()[0], 2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--other", action="append", default=[],
                        help="NAME=PATH of another checkout's twistd, run in every round")
    parser.add_argument("--scratch", default=None)
    parser.add_argument("--journal", default=None,
                        help="a data directory `fill` wrote before (N messages): skip filling")
    args = parser.parse_args()
    trees = [("this", TWISTD)] + [tuple(o.split("=", 1)) for o in args.other]
    scratch = tempfile.mkdtemp(prefix="recovery-bench-", dir=args.scratch)
    report = {"n": args.n, "body": BODY, "load_before": load()}
    try:
        source = args.journal or os.path.join(scratch, "source")
        if args.journal:
            report["journal"] = {"messages": args.n, "queued": args.n - (args.n + 9) // 10,
                                 "bytes": journal_bytes(source)}
        else:
            filled = subprocess.run([PY, "-m", "bench.recovery_bench", "fill", source,
                                     str(args.n)], cwd=ROOT, check=True, capture_output=True,
                                    text=True)
            report["journal"] = json.loads(filled.stdout.strip().splitlines()[-1])
        report["journal"]["bytes_per_message"] = round(report["journal"]["bytes"] / args.n, 1)
        report["journal"]["budget_bytes_per_message"] = 1.5 * BODY + 100
        print("journal:", report["journal"], flush=True)
        config_path = os.path.join(scratch, "broker.toml")
        with open(config_path, "w") as f:
            f.write(CONFIG)
        runs = {name: [] for name, _ in trees}
        runs["empty"] = []
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for name, twistd in order:
                data_dir = os.path.join(scratch, f"{name}-{r}")
                shutil.copytree(source, data_dir)
                seconds, cpu, recovered = start(twistd, data_dir, config_path)
                if recovered != report["journal"]["queued"]:
                    raise SystemExit(f"{name} recovered {recovered} messages, "
                                     f"not {report['journal']['queued']}")
                runs[name].append({"seconds": round(seconds, 2), "cpu_s": round(cpu, 2),
                                   "load": load()})
                print(f"round {r} {name:6s} {seconds:6.2f} s  cpu {cpu:6.2f} s  load {load()}",
                      flush=True)
                shutil.rmtree(data_dir)
            empty = os.path.join(scratch, f"empty-{r}")
            os.makedirs(empty)
            seconds, cpu, _ = start(TWISTD, empty, config_path)
            runs["empty"].append({"seconds": round(seconds, 2), "cpu_s": round(cpu, 2),
                                  "load": load()})
            print(f"round {r} empty  {seconds:6.2f} s  cpu {cpu:6.2f} s  load {load()}",
                  flush=True)
            shutil.rmtree(empty)
        summary = {}
        for name, results in runs.items():
            seconds = [x["seconds"] for x in results]
            cpu = [x["cpu_s"] for x in results]
            summary[name] = {"median_s": statistics.median(seconds), "min_s": min(seconds),
                             "max_s": max(seconds), "median_cpu_s": statistics.median(cpu),
                             "runs": results}
            if name not in ("this", "empty"):
                for key, field in (("ratio_to_this", "seconds"), ("cpu_ratio_to_this", "cpu_s")):
                    ratios = [o[field] / t[field] for o, t in zip(results, runs["this"])]
                    summary[name][key] = {"median": round(statistics.median(ratios), 2),
                                          "min": round(min(ratios), 2),
                                          "max": round(max(ratios), 2)}
        report["starts"] = summary
        report["load_after"] = load()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(report, f, indent=1)
    for name, found in report["starts"].items():
        line = (f"{name:6s} median {found['median_s']:6.2f} s (min {found['min_s']}, "
                f"max {found['max_s']}), cpu {found['median_cpu_s']:6.2f} s")
        if "ratio_to_this" in found:
            line += (f"  x{found['ratio_to_this']['median']} of this branch's time, "
                     f"x{found['cpu_ratio_to_this']['median']} of its cpu")
        print(line)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fill":
        fill(sys.argv[2], int(sys.argv[3]))
    else:
        main()
