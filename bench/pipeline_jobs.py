"""The pipeline's jobs as a user runs them: the command, wall clock, Spark start included,
against a bare Spark start and a plain single-process decode of the same journal.

    python -m bench.pipeline_jobs [--records 1000000] [--rounds 2] [--master local[2]]
                                  [--journal DIR] [--baseline OTHER/.venv/bin]

One journal segment of `--records` records of realistic traffic is written with the
project's own writer (tests/pipeline/traffic.py, the journal encoder). Each round runs,
each in its own process, in turn (so all see the same load on a shared machine):

- bare: a Spark session from `spark_session` (the jobs' settings) and a trivial count;
- plain: one Python process that decodes every record (`journal.decode`: every variable
  unquoted, frames and headers too) and checks every checksum (`journal.checksum_state`);
- export: `mqksbridge-pipeline export DIR --out OUT --master M --quiet`;
- report: `mqksbridge-pipeline report DIR --out OUT --master M --quiet`.

`--journal DIR` keeps the journal in DIR (written there when DIR holds none) so that
later runs read the same file instead of writing it again. `--baseline BIN` runs
export and report a second time in each round with the `mqksbridge-pipeline` of
another installation (the `bin` directory of a virtualenv of the code being
replaced), right after this tree's: the two are compared in the same session, under
the same load (`export@base`, `report@base` in the results).

The figure of merit is (job - bare) / plain: what a job costs beyond starting Spark,
against what one plain Python process needs. Best round of each counts; the CPU
seconds of each step's process tree (JVM and Python workers included) and the load
average are recorded too: on a shared machine wall time moves with the load (the CPU
of the Python workers PySpark's daemon forks is sampled from /proc while a step runs:
the daemon reaps them unwaited, so no parent's children time holds it). Results go to
bench/results/pipeline-jobs-latest.json.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLI = os.path.join(os.path.dirname(sys.executable), "mqksbridge-pipeline")
TICKS = os.sysconf("SC_CLK_TCK")

BARE = """
import sys
from mqksbridge.pipeline.session import spark_session, stop
spark = spark_session(sys.argv[1])
assert spark.range(1000).count() == 1000
stop(spark)
"""

PLAIN = """
import sys
from mqksbridge.protocols.textqueue import journal, scan
data = open(sys.argv[1], "rb").read()
result = scan(data)
header = journal.decode_header(result.raws[0])
tail = journal.whole_tail(result.incomplete)
states = {}
n = 0
for raw in result.raws[1:] + ([tail.raw] if tail is not None else []):
    journal.decode(raw, header.created_ms)
    state = journal.checksum_state(raw)
    states[state] = states.get(state, 0) + 1
    n += 1
assert states == {"ok": n}, states
print(n)
"""


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _daemon_workers(root, seen, daemons):
    """Record in `seen` (pid -> CPU seconds) the processes below `root` that PySpark's
    daemon forked (the workers: a daemon's children, with its command line): it ignores
    SIGCHLD, so they are reaped unwaited and their CPU never reaches any parent's
    children time. `daemons` caches pid -> has the daemon's command line."""
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if pid not in daemons:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    daemons[pid] = b"pyspark.daemon" in f.read()
        except OSError:
            continue                     # ended meanwhile
        parents[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / TICKS

    def below_root(pid):
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    for pid, parent in parents.items():
        if daemons.get(pid) and daemons.get(parent) and below_root(parent):   # forked
            seen[pid] = max(seen.get(pid, 0.0), cpu[pid])


def timed(argv, cwd=None, poll=0.5):
    """(wall seconds, CPU seconds of the whole process tree, last line of output). The
    JVM and the PySpark daemon are waited for by their parents, so they count in the
    children's time; the daemon's workers are not (see `_daemon_workers`), so their
    CPU is sampled every `poll` seconds while the step runs and added."""
    cpu = _children_cpu()
    workers, daemons = {}, {}
    started = time.perf_counter()
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=cwd)
    out = []
    readers = [threading.Thread(target=lambda s=s: out.append((s, s.read())), daemon=True)
               for s in (job.stdout, job.stderr)]
    for reader in readers:
        reader.start()
    while job.poll() is None:
        _daemon_workers(job.pid, workers, daemons)
        time.sleep(poll)
    elapsed = time.perf_counter() - started
    for reader in readers:
        reader.join()
    texts = {s: text for s, text in out}
    stdout, stderr = texts[job.stdout], texts[job.stderr]
    if job.returncode:
        raise RuntimeError(f"{argv} failed:\n{stdout}\n{stderr[-3000:]}")
    return elapsed, _children_cpu() - cpu + sum(workers.values()), stdout.strip().splitlines()[-1:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--only", default="bare,plain,export,report",
                        help="comma-separated steps to run")
    parser.add_argument("--journal", help="directory the journal is kept in (and read from "
                        "when it is there already)")
    parser.add_argument("--baseline", help="the bin directory of another installation: its "
                        "export and report run too, beside this tree's")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "pipeline-jobs-latest.json"))
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="pipeline-jobs-", dir=args.dir)
    try:
        journals = args.journal or os.path.join(work, "journal")
        segment = os.path.join(journals, "orders", "00000001.tq")
        if os.path.exists(segment):
            size = os.path.getsize(segment)
        else:
            from tests.pipeline import traffic
            os.makedirs(os.path.dirname(segment), exist_ok=True)
            size = traffic.stream_file(segment, "orders", args.records, seed=1)
        steps = {
            "bare": [sys.executable, "-c", BARE, args.master],
            "plain": [sys.executable, "-c", PLAIN, segment],
            "export": [CLI, "export", journals, "--out", os.path.join(work, "export"),
                       "--overwrite", "--master", args.master, "--quiet"],
            "report": [CLI, "report", journals, "--out", os.path.join(work, "report"),
                       "--master", args.master, "--quiet"],
        }
        wanted = args.only.split(",")
        if args.baseline:
            other = os.path.join(args.baseline, "mqksbridge-pipeline")
            for job in ("export", "report"):
                if job in steps:
                    steps[f"{job}@base"] = [other] + steps[job][1:]
                    steps[f"{job}@base"][steps[job].index("--out") + 1] += "-base"
                    if job in wanted:
                        wanted.insert(wanted.index(job) + 1, f"{job}@base")
        rounds = {name: [] for name in wanted}
        cpu = {name: [] for name in wanted}
        loads = [os.getloadavg()[0]]
        for k in range(args.rounds):
            for name in wanted:
                elapsed, seconds, last = timed(steps[name], cwd=ROOT)
                rounds[name].append(elapsed)
                cpu[name].append(seconds)
                print(f"round {k + 1} {name:11s} {elapsed:6.1f} s  {seconds:6.1f} CPU s  "
                      f"{' '.join(last)[:80]}", flush=True)
            loads.append(os.getloadavg()[0])
        best = {name: min(times) for name, times in rounds.items()}
        result = {"records": args.records, "bytes": size, "master": args.master,
                  "rounds": rounds, "cpu_s": cpu, "best_s": best,
                  "best_cpu_s": {name: min(times) for name, times in cpu.items()},
                  "load_average": loads}
        if {"bare", "plain"} <= best.keys():
            for job in ("export", "report", "export@base", "report@base"):
                if job in best:
                    result[f"{job}_minus_bare_over_plain"] = (best[job] - best["bare"]) / best["plain"]
        print(json.dumps(result, indent=1))
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
