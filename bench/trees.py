"""Any bench of this directory, this tree against another, in the same session.

    python -m bench.trees --baseline TREE [--rounds 3] "BENCH[:ARGS]" ...

e.g. `python -m bench.trees --baseline ../base "twino_bench:--quick --scenarios push-ack"`.
Each round runs every BENCH once in each tree (`TREE/.venv/bin/python -m bench.BENCH ARGS`,
in that tree, with its own code), the trees alternating which goes first; after each run
the bench's result file (`bench/results/<name>-latest.json`) is read back. Every number
whose path (the JSON keys, and a list item's `scenario`/`name`/`case`/`mode` when it has
one) both trees report is compared: the median over the rounds of each tree and the ratio
this / baseline (for a rate more is better; for CPU-us, seconds and latencies less is).
Results: bench/results/trees-latest.json and trees-latest.md.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LABELS = ("scenario", "name", "case", "mode", "path", "comparison")
RESULTS = {"run": "mqks-latest.json", "twino_bench": "twino-latest.json",
           "malamute_bench": "malamute-latest.json", "interop_bench": "interop-latest.json",
           "malamute_service_bench": "malamute-service-latest.json",
           "textqueue_door": "textqueue-door-latest.json",
           "durability_bench": "durability-latest.json",
           "recovery_bench": "recovery-latest.json"}


def flatten(value, path=()):
    """(path, number) for every number in a bench's result."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, path + (str(key),))
    elif isinstance(value, list):
        for n, item in enumerate(value):
            label = next((str(item[k]) for k in LABELS
                          if isinstance(item, dict) and k in item), str(n))
            yield from flatten(item, path + (label,))


def run_one(tree, bench, args):
    python = os.path.join(tree, ".venv", "bin", "python")
    started = time.monotonic()
    done = subprocess.run([python, "-m", f"bench.{bench}", *args], cwd=tree,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{bench} in {tree} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(os.path.join(tree, "bench", "results", RESULTS[bench])) as f:
        numbers = dict(flatten(json.load(f)))
    return numbers, time.monotonic() - started


def compare(samples):
    """{path: (median this, median baseline, ratio)} over the paths both trees report."""
    rows = {}
    for path in samples["this"][0]:
        if all(path in s for tree in samples.values() for s in tree):
            this = statistics.median(s[path] for s in samples["this"])
            base = statistics.median(s[path] for s in samples["baseline"])
            rows["/".join(path)] = (this, base, this / base if base else None)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="another checkout with a .venv")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("benches", nargs="+", help="BENCH or 'BENCH:ARGS' (shell words)")
    args = parser.parse_args()
    trees = {"this": ROOT, "baseline": os.path.abspath(args.baseline)}
    report, lines = {}, []
    for spec in args.benches:
        bench, _, extra = spec.partition(":")
        bench_args = shlex.split(extra)
        samples = {"this": [], "baseline": []}
        loads = [os.getloadavg()[0]]
        for round_ in range(args.rounds):
            order = ["this", "baseline"] if round_ % 2 == 0 else ["baseline", "this"]
            for name in order:
                numbers, seconds = run_one(trees[name], bench, bench_args)
                samples[name].append(numbers)
                print(f"{bench} round {round_ + 1} {name}: {seconds:.0f} s", flush=True)
            loads.append(os.getloadavg()[0])
        rows = compare(samples)
        report[spec] = {"load": loads, "rows": {k: list(v) for k, v in rows.items()}}
        lines += [f"## {spec}", "",
                  f"{args.rounds} rounds, load average {min(loads):.2f}-{max(loads):.2f}",
                  "", "| figure | this | baseline | this/baseline |", "|---|---|---|---|"]
        lines += [f"| {k} | {t:g} | {b:g} | {'' if r is None else f'{r:.2f}'} |"
                  for k, (t, b, r) in rows.items()]
        lines.append("")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "trees-latest.json"), "w") as f:
        json.dump({"baseline": trees["baseline"], "benches": report}, f, indent=1)
    with open(os.path.join(HERE, "results", "trees-latest.md"), "w") as f:
        f.write("\n".join(lines))
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
