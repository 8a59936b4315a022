"""Durable queues: confirmed publish -> consume through the MQKS door, against the
in-memory path measured in the same session (what durability costs per message).

    python -m bench.durability_bench [--n 200000] [--rounds 3] [--publishers 4]
                                     [--base-ref REF] [--against TREE] [--modes LIST]
                                     [--recovery 1000000] [--scratch DIR] [--profile DIR]

Each round runs, interleaved, the same scenario on a fresh broker process: `memory` (no
durable queue), `always` and `never` (the queue durable under that fsync policy) and,
with --base-ref, `base` (the in-memory scenario on a checkout of REF: the tree without
durability) and, with --against TREE (another source tree, e.g. a checkout of main),
every scenario once more on that tree as `MODE@against`, compared round by round with
its twin (an A/B of the broker's code under one bench). The scenario: `--publishers` processes publish N/P `--confirm` events each,
pipelined (a window of 1000 in flight), to a queue with one auto-ack consumer; the rate
is N over the time from the first publish to the last delivery and last confirmation.
The broker runs pinned to CPU 0, the load on the other CPU (bench.processes). For the
durable runs the broker reports its batches and fdatasyncs, so fsyncs/s during the run
is shown beside the disk's own fdatasync rate, measured the same way in the same
session in the same directory: one 100-byte append + fdatasync per loop, and 100 records
per fdatasync. Then the journal of the `always` runs is measured against the size budget
(1.5 x body + 100 bytes per message) and a 1M-message journal is recovered in-process
(bench/recovery_bench.py times a real broker's start on one written by its own writer).
The broker's CPU seconds (all its threads, from "ready" to the end) are shown beside each
rate; --profile DIR writes each broker's cProfile stats there (the rates then mean
nothing). Results: bench/results/durability-latest.json.

    python -m bench.durability_bench server MODE PORT DATA_DIR     (a role)
    python -m bench.durability_bench publisher PORT EVENT N PREFIX (a role)
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench.processes import HERE, PY, ROOT, _cpus, free_port, last_json, spawn

WINDOW = 1000
AGAINST = "@against"       # a scenario run on the --against tree
BODY = 40
RESULTS = os.path.join(HERE, "results", "durability-latest.json")


# -- roles ----------------------------------------------------------------------------------
def server(mode, port, data_dir, profile=None):
    """The broker; with `profile`, its reactor thread's cProfile stats go to that file."""
    from twisted.internet import reactor

    from mqksbridge.bridge import config
    from mqksbridge.bridge.service import build
    overrides = {name: {"listen": []} for name, section in config.DEFAULTS.items()
                 if isinstance(section, dict) and "listen" in section}
    overrides["mqks"] = {"listen": [f"tcp:{port}:interface=127.0.0.1"]}
    overrides["data_dir"] = data_dir
    if mode in ("always", "never", "interval"):
        overrides["durability"] = {"queues": ["q"], "fsync": mode}
    top = build(config.load(overrides=overrides), reactor)[0]
    top.startService()
    writer = getattr(getattr(top, "durability", None), "writer", None)

    def report():
        stats = {} if writer is None else {"batches": writer.batches, "fsyncs": writer.fsyncs,
                                           "bytes": writer.bytes}
        stats["cpu_s"] = time.process_time() - ready[0]
        print(json.dumps(stats), flush=True)
        return top.stopService()
    reactor.addSystemEventTrigger("before", "shutdown", report)     # SIGTERM stops it
    ready = [0.0]                   # CPU seconds at start: the run's are counted from there

    def started():
        ready[0] = time.process_time()
        print("ready", flush=True)
    reactor.callWhenRunning(started)
    if not profile:
        reactor.run()
        return
    import cProfile
    profiler = cProfile.Profile()
    profiler.runcall(reactor.run)
    profiler.dump_stats(profile)


def publisher(port, event, n, prefix):
    """N confirmed publishes, WINDOW in flight; one JSON line at the end."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sys.stdin.readline()
    start = time.monotonic_ns()
    body = b"x" * BODY
    sent = confirmed = 0
    buf = b""
    while confirmed < n:
        while sent < n and sent - confirmed < WINDOW:
            k = min(WINDOW // 2, n - sent)
            sock.sendall(b"".join(b"%s%d publish --confirm %s %s\n" % (prefix, sent + i, event,
                                                                          body)
                                  for i in range(k)))
            sent += k
        data = sock.recv(1 << 20)
        if not data:
            raise SystemExit("server closed the connection")
        buf += data
        confirmed += buf.count(b"\n")
        buf = buf[buf.rfind(b"\n") + 1:]
    print(json.dumps({"start_ns": start, "end_ns": time.monotonic_ns()}), flush=True)


# -- the disk's own rate --------------------------------------------------------------------
def disk_rate(directory, records_per_sync, seconds=2.0):
    """Records per second appended with one fdatasync per `records_per_sync` records of
    100 bytes, and fdatasyncs per second."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    record = b"r" * 99 + b"\n"
    chunk = record * records_per_sync
    syncs = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, chunk)
            os.fdatasync(fd)
            syncs += 1
    finally:
        os.close(fd)
        os.unlink(path)
    elapsed = time.perf_counter() - start
    return {"records_per_s": round(syncs * records_per_sync / elapsed),
            "fsyncs_per_s": round(syncs / elapsed)}


# -- one scenario ---------------------------------------------------------------------------
def run_once(mode, n, publishers, data_dir, env=None, profile=None):
    port = free_port()
    cpus = _cpus("server")
    server_proc = subprocess.Popen(
        [PY, "-m", "bench.durability_bench", "server",
         "memory" if mode == "base" else mode, str(port), data_dir,
         *([profile] if profile else [])],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env,
        preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)))
    try:
        assert server_proc.stdout.readline().strip() == "ready"
        consumer = spawn("bench.mqks_load", "consumer", str(port), "c1", "q", "ev", str(n),
                         pin=True)
        assert consumer.stdout.readline().strip() == "ready"
        per = n // publishers
        pubs = [spawn("bench.durability_bench", "publisher", str(port), "ev", str(per),
                      f"p{k}.", pin=True) for k in range(publishers)]
        time.sleep(0.3)                     # every publisher connected before "go"
        for p in pubs:
            p.stdin.write("go\n")
            p.stdin.flush()
        done = [last_json(p) for p in pubs]
        got = last_json(consumer)
        server_proc.send_signal(signal.SIGTERM)
        stats = json.loads(server_proc.stdout.readline() or "{}")
        server_proc.wait(30)
    finally:
        if server_proc.poll() is None:
            server_proc.kill()
    start = min(d["start_ns"] for d in done)
    end = max(max(d["end_ns"] for d in done), got["last_ns"])
    elapsed = (end - start) / 1e9
    assert got["count"] >= per * publishers, got
    result = {"rate": round(per * publishers / elapsed), "elapsed_s": round(elapsed, 3),
              "server_cpu_s": round(stats.get("cpu_s", 0), 2)}
    if stats.get("batches"):
        result.update(fsyncs_per_s=round(stats["fsyncs"] / elapsed),
                      records_per_fsync=round(per * publishers / max(stats["fsyncs"], 1), 1),
                      batches=stats["batches"])
    return result


def journal_size(data_dir, n):
    total = 0
    for folder, _, names in os.walk(os.path.join(data_dir, "journal")):
        total += sum(os.path.getsize(os.path.join(folder, f)) for f in names)
    return total


# -- recovery of a large journal ----------------------------------------------------------
def recovery(n, directory):
    """Write an n-message journal (the broker's own encoder, 40-byte bodies, every 10th
    record acked) and time a broker's recovery of it."""
    from twisted.internet import task

    from mqksbridge.bridge import config
    from mqksbridge.bridge.clock import ReactorClock
    from mqksbridge.bridge.journal import Durability, layout
    from mqksbridge.core import Broker, Message
    from mqksbridge.protocols.textqueue import journal
    folder = os.path.join(directory, layout.JOURNAL, layout.queue_directory("q"))
    os.makedirs(folder)
    base = int(time.time() * 1000)
    per_segment = 500_000
    body = b"y" * BODY
    bodies = 0
    for number, first in enumerate(range(0, n, per_segment), 1):
        parts = [journal.encode_header("q", number, base)]
        for i in range(first, min(n, first + per_segment)):
            message = Message("%016x" % i, "order.new1", (body,), sender="127.0.0.1:50000.ab",
                              origin="mqks", created_at=(base + i // 1000) / 1000)
            parts.append(journal.encode_message(message, base_ms=base,
                                                status="=" if i % 10 == 0 else "-"))
            bodies += BODY
        with open(os.path.join(folder, layout.segment_name(number)), "wb") as f:
            f.write(b"".join(parts))
    size = journal_size(directory, n)
    clock = task.Clock()
    clock.advance(time.time())
    broker = Broker(ReactorClock(clock))
    settings = config.load(overrides={"durability": {"queues": ["q"]}})["durability"]
    durability = Durability(settings, directory, broker, clock, clock)
    start = time.perf_counter()
    counts = durability.recover()
    elapsed = time.perf_counter() - start
    return {"messages": n, "recovered": counts.get("q", 0), "seconds": round(elapsed, 2),
            "journal_bytes_per_message": round(size / n, 1),
            "budget_bytes_per_message": round(1.5 * bodies / n + 100, 1)}


def base_tree(ref):
    """A detached checkout of `ref` (the tree without durability) and its environment."""
    path = tempfile.mkdtemp(prefix="mqks-base-")
    subprocess.run(["git", "worktree", "add", "--detach", "-q", path, ref], cwd=ROOT,
                   check=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(path, "src"))
    return path, env


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--base-ref", default=None)
    parser.add_argument("--recovery", type=int, default=1_000_000)
    parser.add_argument("--modes", default="memory,always,never",
                        help="the scenarios of each round, comma-separated")
    parser.add_argument("--against", default=None,
                        help="another source tree (e.g. a checkout of main): every scenario "
                             "runs on it too, interleaved, and each is compared with its twin")
    parser.add_argument("--profile", default=None,
                        help="a directory: each broker's cProfile stats go there as "
                             "MODE-ROUND.prof (the rates are then not comparable)")
    parser.add_argument("--scratch", default=None,
                        help="where the journals go (default: the system's temporary "
                             "directory; give a directory on the disk you mean to measure)")
    args = parser.parse_args()
    # outside the repository, removed at the end whatever happens (finally below)
    scratch = tempfile.mkdtemp(prefix="durability-bench-", dir=args.scratch)
    modes = args.modes.split(",")
    envs = {}                               # mode -> environment of another tree
    base = None
    if args.base_ref:
        base = base_tree(args.base_ref)
        modes.append("base")
        envs["base"] = base[1]
    if args.against:                        # every scenario once more on that tree
        other = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(args.against), "src"))
        for mode in list(modes):
            modes.append(mode + AGAINST)
            envs[mode + AGAINST] = other
    runs = {m: [] for m in modes}
    report = {"n": args.n, "publishers": args.publishers, "window": WINDOW, "body": BODY}
    try:
        report["disk"] = {"one_record_per_fdatasync": disk_rate(scratch, 1),
                          "hundred_records_per_fdatasync": disk_rate(scratch, 100)}
        print("disk:", report["disk"], flush=True)
        for r in range(args.rounds):
            order = modes if r % 2 == 0 else modes[::-1]
            for mode in order:
                data_dir = os.path.join(scratch, f"{mode}-{r}")
                os.makedirs(data_dir)
                profile = None if args.profile is None else os.path.join(
                    os.path.abspath(args.profile), f"{mode}-{r}.prof")
                result = run_once(mode.removesuffix(AGAINST), args.n, args.publishers,
                                  data_dir, env=envs.get(mode), profile=profile)
                if mode.startswith("always"):
                    result["journal_bytes_per_message"] = round(
                        journal_size(data_dir, args.n) / args.n, 1)
                runs[mode].append(result)
                print(f"round {r} {mode:16s} {result}", flush=True)
                shutil.rmtree(data_dir)
        summary = {}
        for mode, results in runs.items():
            rates = [x["rate"] for x in results]
            summary[mode] = {"median": statistics.median(rates), "min": min(rates),
                             "max": max(rates), "runs": results,
                             # the broker's own cost: steadier than rates on a loaded machine
                             "cpu_us_per_message": round(statistics.median(
                                 x["server_cpu_s"] for x in results) / args.n * 1e6, 2)}
            memory = "memory" + AGAINST if mode.endswith(AGAINST) else "memory"
            if mode != memory and memory in runs:
                summary[mode]["ratio_to_memory"] = ratios(results, runs[memory])
            if mode + AGAINST in runs:      # this tree against the other, round by round
                summary[mode]["ratio_to_against"] = ratios(results, runs[mode + AGAINST])
        report["modes"] = summary
        if args.recovery:
            folder = os.path.join(scratch, "recovery")
            report["recovery"] = recovery(args.recovery, folder)
            print("recovery:", report["recovery"], flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if base is not None:
            subprocess.run(["git", "worktree", "remove", "--force", base[0]], cwd=ROOT)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(report, f, indent=1)
    for mode, found in report["modes"].items():
        line = f"{mode:16s} median {found['median']:>8} msg/s  (min {found['min']}, max " \
               f"{found['max']})  broker CPU {found['cpu_us_per_message']} us/msg"
        if "ratio_to_memory" in found:
            line += f"  x{found['ratio_to_memory']['median']} of memory " \
                    f"({found['ratio_to_memory']['min']}-{found['ratio_to_memory']['max']})"
        if "ratio_to_against" in found:
            line += f"  x{found['ratio_to_against']['median']} of {args.against} " \
                    f"({found['ratio_to_against']['min']}-{found['ratio_to_against']['max']})"
        print(line)


def ratios(results, baseline):
    """Median, min and max of the rate ratios of the same rounds."""
    found = [x["rate"] / b["rate"] for x, b in zip(results, baseline)]
    return {"median": round(statistics.median(found), 3), "min": round(min(found), 3),
            "max": round(max(found), 3)}


if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else None
    if role == "server":
        server(sys.argv[2], int(sys.argv[3]), sys.argv[4], *sys.argv[5:6])
    elif role == "publisher":
        publisher(int(sys.argv[2]), sys.argv[3].encode(), int(sys.argv[4]),
                  sys.argv[5].encode())
    else:
        main()
