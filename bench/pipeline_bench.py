"""Data pipeline benchmark: the `textqueue` data source against the plain single-process
parser on the same journals, and `report` end to end.

    python -m bench.pipeline_bench [--sizes 1000000,10000000] [--rounds 2] [--dir /tmp]

Journals are written with the journal encoder (tests/pipeline/traffic.py: four origins,
binary and multi-frame bodies, headers, every settle), streamed to disk as one segment
per 1M records, read back, and deleted at the end. For each size:

- plain: one Python process, the incremental Parser fed 1 MiB chunks, then
  journal.decode_fields for the report's columns, record by record (what a script
  without the pipeline would do); also `scan` + `columns.decode_columns` in one process
  (the data source's own decoding, without Spark);
- the data source's reader in one process without Spark (`TextQueueReader.read` over
  its own partitions, what the Spark tasks run): the load-independent measure of the
  decoding, for the same column sets;
- Spark: `read(...).count()` on local[1] and local[2] with three declared column sets:
  offset+status (reading and splitting only), the report's columns, every column (the
  last only up to --all-columns-max records; sizes above it get one round);
- `report` end to end (all tables, the HTML page) on local[2] for the largest size.

Files are read from the page cache after the first pass (the machine has the RAM).
Rounds alternate the readers and the best round counts. The machine is shared, so
the numbers move with the load of other jobs: compare rows of one run, not runs.
Results go to bench/results/pipeline-latest.json.
"""
import argparse
import gc
import json
import os
import shutil
import tempfile
import time

from mqksbridge.pipeline import report
from mqksbridge.pipeline.schema import COLUMNS
from mqksbridge.pipeline.session import read, spark_session, stop
from mqksbridge.protocols.textqueue import Damage, Parser, journal, scan
from mqksbridge.protocols.textqueue.columns import decode_columns
from tests.pipeline import traffic

HERE = os.path.dirname(os.path.abspath(__file__))
PER_FILE = 1_000_000
FIELDS = ["subject", "origin", "status", "retry", "created_at", "settled"]
COLUMN_FIELDS = ["subject", "origin", "status", "retry", "created_ms", "settled_ms",
                 "settle_reason", "settle_door", "size"]
SETS = {"offset+status": ["offset", "status"], "report columns": report.COLUMNS,
        "all columns": list(COLUMNS)}


def write_journals(folder, n):
    os.makedirs(folder, exist_ok=True)
    size = 0
    for k in range(0, n, PER_FILE):
        count = min(PER_FILE, n - k)
        size += traffic.stream_file(os.path.join(folder, f"{k // PER_FILE:08d}.tq"),
                                    traffic.QUEUES[k // PER_FILE % len(traffic.QUEUES)], count,
                                    seed=k // PER_FILE + 1)
    return size


def plain_parser(folder):
    """Records/s of the incremental parser + decode_fields, one process."""
    n = 0
    started = time.perf_counter()
    for name in sorted(os.listdir(folder)):
        parser = Parser()
        header = None
        with open(os.path.join(folder, name), "rb") as f:
            while chunk := f.read(1 << 20):
                for record in parser.feed(chunk):
                    if isinstance(record, Damage):
                        continue
                    if header is None:
                        header = journal.decode_header(record)
                        continue
                    journal.decode_fields(record, FIELDS, header.created_ms)
                    n += 1
        tail = parser.incomplete()
        if tail is not None and tail.terminated and journal.verify(tail.record()):
            n += 1
    return n, time.perf_counter() - started


def plain_columns(folder):
    """Records/s of scan + decode_columns (the data source's decoding), one process."""
    n = 0
    started = time.perf_counter()
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        result = scan(data)
        header = journal.decode_header(result.raws[0])
        raws = result.raws[1:]
        for start in range(0, len(raws), 50_000):
            decode_columns(raws[start:start + 50_000], COLUMN_FIELDS, header.created_ms)
        n += len(raws) + (result.incomplete is not None)
        del data, result, raws
    return n, time.perf_counter() - started


def reader_count(folder, columns):
    """Records/s of the data source's reader in this process (no Spark)."""
    from mqksbridge.pipeline import schema
    from mqksbridge.pipeline.source import TextQueueDataSource
    started = time.perf_counter()
    reader = TextQueueDataSource({"path": folder}).reader(schema.spark_schema(columns))
    n = sum(b.num_rows for task in reader.partitions() for b in reader.read(task))
    return n, time.perf_counter() - started


def spark_count(spark, folder, columns):
    started = time.perf_counter()
    n = read(spark, [folder], columns).count()
    return n, time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--plain-max", type=int, default=10_000_000,
                        help="largest size the (slow) plain parser reads")
    parser.add_argument("--all-columns-max", type=int, default=1_000_000,
                        help="largest size read with every column declared (slow)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = tempfile.mkdtemp(prefix="pipeline-bench-", dir=args.dir)
    results = {"sizes": {}, "cpu_count": os.cpu_count(), "load_before": os.getloadavg()}
    try:
        folders = {}
        for n in sizes:
            started = time.perf_counter()
            folders[n] = os.path.join(work, f"n{n}")
            size = write_journals(folders[n], n)
            results["sizes"][n] = {"file_bytes": size, "bytes_per_record": size / n,
                                   "write_seconds": round(time.perf_counter() - started, 1)}
            print(f"{n:>10,} records: {size / 1e9:.2f} GB written in "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
        best = {}

        def note(n, key, count, seconds):
            assert count == n, (key, count, n)
            rate = count / seconds
            if rate > best.get((n, key), 0):
                best[(n, key)] = rate
            print(f"{n:>10,} {key:45s} {rate / 1e6:6.3f} M records/s ({seconds:.1f} s)", flush=True)

        for master in ("local[1]", "local[2]"):
            spark = spark_session(master, {"spark.ui.enabled": "false"})
            try:
                for n in sizes:
                    spark_count(spark, folders[n], ["offset"])             # warm: cache, workers
                for round_ in range(args.rounds):
                    for n in sizes:
                        if round_ and n > args.all_columns_max:
                            continue                    # big files: one round
                        if master == "local[1]" and n <= args.plain_max:
                            gc.collect()
                            note(n, "plain: Parser + decode_fields", *plain_parser(folders[n]))
                            gc.collect()
                            note(n, "plain: scan + decode_columns", *plain_columns(folders[n]))
                        if master == "local[1]":
                            for label, columns in SETS.items():
                                if label == "all columns" and n > args.all_columns_max:
                                    continue
                                gc.collect()
                                note(n, f"reader, one process: {label}", *reader_count(folders[n], columns))
                        for label, columns in SETS.items():
                            if label == "all columns" and n > args.all_columns_max:
                                continue
                            note(n, f"spark {master}: {label}", *spark_count(spark, folders[n], columns))
                if master == "local[2]":
                    n = max(sizes)
                    out = os.path.join(work, "report")
                    started = time.perf_counter()
                    frames, facts = report.run(spark, [folders[n]], out, show_progress=False)
                    seconds = time.perf_counter() - started
                    results["report_seconds"] = {str(n): round(seconds, 1)}
                    print(f"{n:>10,} report end to end on local[2]: {seconds:.1f} s "
                          f"({n / seconds / 1e6:.3f} M records/s), {facts['messages']} messages",
                          flush=True)
            finally:
                stop(spark)
        for (n, key), rate in best.items():
            results["sizes"][n].setdefault("records_per_s", {})[key] = round(rate)
        results["load_after"] = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "pipeline-latest.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
