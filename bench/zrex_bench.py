"""zrex matching cost: per pattern and on the Malamute stream path, against older trees.

    python -m bench.zrex_bench [--rounds 7] [--rev old=6eb783c~1 --rev main=main]

Each version is this tree's `protocols/malamute/zrex.py` and `core/stream.py` ("new"), or the
same two files at a git revision, loaded side by side in this process (a revision git cannot
show is left out). The default "old" is the parent of 6eb783c, the last tree before matching
became linear (it translated single-character patterns to a Python regex, exponential on
`a*a*a*a*b`); "main" is the main branch.

Per pattern: the time of one `search` on typical subjects (ASCII str, as the core passes them;
about 20 bytes; some match, some do not), then on subjects with non-ASCII characters or a NUL
(which every version must first turn into bytes). Stream: one publish into a core stream with
10 readers whose matchers come from that version's zrex, each reader with its own typical
pattern (what the Malamute door builds for STREAM-READ), delivering to a no-op. Times are this
thread's CPU time (the machine is shared), versions are interleaved within each round (their
order rotating) and the best round is reported. Every version must give the same answers, or
the bench stops. Results go to bench/results/zrex-latest.json.
"""
import argparse
import gc
import json
import os
import subprocess
import time
import types

from mqksbridge.core.message import Message

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FILES = {"zrex": "protocols/malamute/zrex.py", "stream": "core/stream.py"}

SUBJECTS = {
    "typical": [
        "temperature.moscow.now", "temp.london.2024-06-01", "weather.moscow.wind",
        "rain.paris.hourly.avg", "a1234b.sensor.reading", "humidity.berlin.12345",
        "temp.moscow", "xtemp.tokyo.now.12"],
    "non-ASCII or NUL": [
        "température.moscow.now", "weather.zürich.wind", "temp.münchen.2024",
        "temp\x00moscow.now"],
}
PATTERNS = [
    "temp.*", "temp.*moscow", r"^weather\.", ".*", "temp.", r"(temp|x)\.", "^a[0-9]+b",
    r"\d+$", r"[wr]ain\.", r"\w+\.\d", "^temp", "moscow", "^temp.moscow$", "now$",
    "temp.*moscow.*now", "temp|weather|rain", r"^temp\.[a-z]+", r"\.moscow\.",
]
# Ten readers each: patterns the old tree gave a Python regex, then a mix with alternations
# (which the old tree matched with its backtracking matcher).
READERS = {
    "stream, 10 readers": [
        "temp.*", "temp.*moscow", r"^weather\.", "temp.", "^a[0-9]+b", r"\d+$", "moscow$",
        "temp.*moscow.*now", r"[wr]ain\.", r"\w+\.\d"],
    "stream, 10 with |": [
        "temp.*", "temp.*moscow", r"^weather\.", "temp.", r"(temp|rain)\.", "^a[0-9]+b",
        r"\d+$", "moscow$", "temp.*moscow.*now", "temp|weather"],
}


def load(name, rev):
    """The two modules of one version (rev None: this tree) as fresh module objects, or
    None when git cannot show that revision."""
    modules = {}
    for key, path in FILES.items():
        if rev is None:
            with open(os.path.join(ROOT, path)) as f:
                source = f.read()
        else:
            shown = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT,
                                   capture_output=True, text=True)
            if shown.returncode:
                print(f"left out {name} ({rev}): {shown.stderr.strip()}")
                return None
            source = shown.stdout
        module = types.ModuleType(f"zrex_bench_{name}_{key}")
        exec(compile(source, f"{rev or 'tree'}:{path}", "exec"), module.__dict__)
        modules[key] = module
    return modules


def cpu_ns(fn, *args):
    gc.collect()
    start = time.thread_time_ns()
    fn(*args)
    return time.thread_time_ns() - start


def search_loop(search, subjects, repeat):
    for _ in range(repeat):
        for subject in subjects:
            search(subject)


def publish_loop(stream, messages):
    publish = stream.publish
    for message in messages:
        publish(message)


def build_stream(modules, patterns, delivered):
    def deliver(name, message):
        delivered.append(message)
    stream = modules["stream"].Stream("weather", {})
    for i, pattern in enumerate(patterns):
        stream.add_reader(f"client-{i}", pattern, modules["zrex"].compile(pattern), deliver)
    return stream


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2000, help="passes over the subjects")
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rev", action="append", metavar="NAME=REV",
                        help="a version to compare (default: old=6eb783c~1, main=main)")
    args = parser.parse_args()
    revs = dict(r.split("=", 1) for r in (args.rev or ["old=6eb783c~1", "main=main"]))
    versions = {name: load(name, rev) for name, rev in revs.items()}
    versions = {name: modules for name, modules in versions.items() if modules is not None}
    versions["new"] = load("new", None)
    names = list(versions)
    others = [name for name in names if name != "new"]

    compiled = {name: [v["zrex"].compile(p) for p in PATTERNS] for name, v in versions.items()}
    for i, pattern in enumerate(PATTERNS):
        for subjects in SUBJECTS.values():
            answers = {name: [compiled[name][i].search(s) for s in subjects] for name in names}
            if len({tuple(a) for a in answers.values()}) != 1:
                raise SystemExit(f"versions disagree on {pattern!r}: {answers}")
    typical = SUBJECTS["typical"]
    messages = [Message(str(i), typical[i % len(typical)], (b"x",))
                for i in range(args.messages)]
    delivered = {(run, name): [] for run in READERS for name in names}
    streams = {(run, name): build_stream(versions[name], patterns, delivered[run, name])
               for run, patterns in READERS.items() for name in names}

    per_search = {kind: {p: {name: float("inf") for name in names} for p in PATTERNS}
                  for kind in SUBJECTS}
    floor = float("inf")
    per_publish = {run: {name: float("inf") for name in names} for run in READERS}
    for round_ in range(args.rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        calls = args.repeat * len(typical)
        floor = min(floor, cpu_ns(search_loop, bool, typical, args.repeat) / calls)
        for kind, subjects in SUBJECTS.items():
            repeat = args.repeat * len(typical) // len(subjects)
            for i, pattern in enumerate(PATTERNS):
                row = per_search[kind][pattern]
                for name in order:
                    ns = cpu_ns(search_loop, compiled[name][i].search, subjects, repeat)
                    row[name] = min(row[name], ns / (repeat * len(subjects)))
        for run in READERS:
            for name in order:
                delivered[run, name].clear()
                ns = cpu_ns(publish_loop, streams[run, name], messages) / len(messages)
                per_publish[run][name] = min(per_publish[run][name], ns)
    counts = {run: {name: len(delivered[run, name]) for name in names} for run in READERS}
    for run, count in counts.items():
        if len(set(count.values())) != 1:
            raise SystemExit(f"{run}: streams delivered different counts: {count}")

    engines = {p: getattr(c, "engine", "?") for p, c in zip(PATTERNS, compiled["new"])}
    columns = "".join(f"{n + ' ns':>10}" for n in names) + \
        "".join(f"{'new/' + n:>10}" for n in others)

    def cells(row):
        return "".join(f"{row[n]:10.0f}" for n in names) + \
            "".join(f"{row['new'] / row[n]:10.2f}" for n in others)

    print(f"revisions: {revs}; best of {args.rounds} rounds; "
          f"a call to bool costs {floor:.0f} ns in the same loop")
    for kind, subjects in SUBJECTS.items():
        print(f"\nper search, {kind} subjects ({len(subjects)}):")
        print(f"{'pattern':22} {'engine':13}" + columns)
        for pattern in PATTERNS:
            print(f"{pattern:22} {engines[pattern]:13}" + cells(per_search[kind][pattern]))
    print(f"\nper publish ({len(messages)} messages, typical subjects):")
    for run, row in per_publish.items():
        print(f"{run:36}" + cells(row)
              + f"   ({counts[run]['new'] / len(messages):.2f} deliveries per publish)")

    result = {"revisions": revs, "rounds": args.rounds, "subjects": SUBJECTS,
              "call_floor_ns": floor, "engines": engines, "per_search_ns": per_search,
              "readers": READERS, "per_publish_ns": per_publish,
              "deliveries_per_publish": {run: c["new"] / len(messages)
                                         for run, c in counts.items()}}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "zrex-latest.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
