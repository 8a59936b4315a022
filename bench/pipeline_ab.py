"""The `textqueue` data source of two code trees, read for read on the same journal.

    python -m bench.pipeline_ab --baseline OTHER/src [--records 1000000] [--rounds 3]

For comparing a change to the data source with the code it replaces in one run: a
journal is written once (tests/pipeline/traffic.py, as bench/pipeline_bench.py does),
then each tree runs in its own process with its own Spark session (PYTHONPATH puts
the tree first, for the driver and its Python workers alike) and the two take turns,
read after read, for each master and column set. Session start-up and a warm-up read
are not timed. Besides the wall-clock rate, each read's CPU seconds are counted over
the child's whole process tree (driver, JVM, Python workers and planners: see
bench/procstat.py), which a loaded machine moves far less. A tree's `src/` is what `git archive <commit> | tar -x` gives
(`src/mqksbridge` links to the packages). The machine is shared: the ratio of two
reads next to each other is the number, the best round of each counts.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETS = ["offset+status", "report columns", "all columns"]


def _columns(label):
    from mqksbridge.pipeline import report
    from mqksbridge.pipeline.schema import COLUMNS
    return {"offset+status": ["offset", "status"], "report columns": report.COLUMNS,
            "all columns": list(COLUMNS)}[label]


def child(master):
    """Serve reads: a line `LABEL\\tPATH` in, a line of JSON {n, seconds} out."""
    from mqksbridge.pipeline.session import read, spark_session
    spark = spark_session(master, {"spark.ui.enabled": "false"})
    where = spark.sparkContext.parallelize([0], 1).map(
        lambda _: __import__("mqksbridge.pipeline.batches").pipeline.batches.__file__).collect()[0]
    print(json.dumps({"ready": where}), flush=True)
    from bench.procstat import tree_cpu_seconds
    for line in sys.stdin:
        label, path = line.rstrip("\n").split("\t")
        cpu = tree_cpu_seconds(os.getpid())
        started = time.perf_counter()
        n = read(spark, [path], _columns(label)).count()
        seconds = time.perf_counter() - started
        print(json.dumps({"n": n, "seconds": seconds, "cpu": tree_cpu_seconds(os.getpid()) - cpu}),
              flush=True)
    spark.stop()


class Tree:
    def __init__(self, name, src, master):
        self.name = name
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, HERE) if p)}
        env.pop("PYSPARK_PYTHON", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.pipeline_ab", "--child", master], cwd=HERE, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.where = json.loads(self.process.stdout.readline())["ready"]

    def read(self, label, path):
        self.process.stdin.write(f"{label}\t{path}\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        return answer["n"], answer["seconds"], answer["cpu"]

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="src/ of the tree to compare with")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    from tests.pipeline import traffic
    work = tempfile.mkdtemp(prefix="pipeline-ab-", dir=args.dir)
    results = {"records": args.records, "load_before": os.getloadavg(), "rates": {}}
    try:
        path = os.path.join(work, "00000000.tq")
        traffic.stream_file(path, traffic.QUEUES[0], args.records, seed=1)
        print(f"{args.records:,} records, {os.path.getsize(path) / 1e6:.0f} MB", flush=True)
        for master in args.masters.split(","):
            trees = [Tree("baseline", args.baseline, master), Tree("this", "", master)]
            try:
                for tree in trees:
                    print(f"{master} {tree.name}: {tree.where}", flush=True)
                    tree.read("offset+status", path)                    # warm
                best, cpu = {}, {}
                for round_ in range(args.rounds):
                    for label in args.sets.split(","):
                        for tree in (trees if round_ % 2 == 0 else trees[::-1]):
                            n, seconds, cpu_seconds = tree.read(label, path)
                            assert n == args.records, (tree.name, label, n)
                            rate = n / seconds
                            key = (label, tree.name)
                            best[key] = max(best.get(key, 0), rate)
                            cpu[key] = min(cpu.get(key, float("inf")), cpu_seconds / n * 1e6)
                            print(f"{master} {label:15s} {tree.name:8s} {rate / 1e6:6.3f} M records/s, "
                                  f"{cpu_seconds / n * 1e6:5.2f} CPU s per M records "
                                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
                for label in args.sets.split(","):
                    a, b = best[(label, "baseline")], best[(label, "this")]
                    ca, cb = cpu[(label, "baseline")], cpu[(label, "this")]
                    print(f"{master} {label:15s} best: baseline {a / 1e6:.3f}, this {b / 1e6:.3f} "
                          f"M records/s, ratio {b / a:.2f}x; CPU s per M records: baseline {ca:.2f}, "
                          f"this {cb:.2f}, ratio {ca / cb:.2f}x", flush=True)
                    results["rates"][f"{master} {label}"] = {
                        "baseline": round(a), "this": round(b), "ratio": round(b / a, 2),
                        "cpu_s_per_M_baseline": round(ca, 2), "cpu_s_per_M_this": round(cb, 2),
                        "cpu_ratio": round(ca / cb, 2)}
            finally:
                for tree in trees:
                    tree.close()
        results["load_after"] = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(HERE, "bench", "results"), exist_ok=True)
    with open(os.path.join(HERE, "bench", "results", "pipeline-ab-latest.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
