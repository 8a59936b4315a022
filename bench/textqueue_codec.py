"""TextQueue codec benchmark: records/s of each reader, the journal encoder and decoder,
and journal bytes per message against the budget of 1.5 x body + 100.

    python -m bench.textqueue_codec [--records 1000000] [--rounds 3]

One segment of typical journal records (20-byte text body, 16-char id, 10-char subject,
25-char sender, origin mqks, no headers) is built in memory. Readers take it the way the
pipeline and recovery will: in 8 MiB windows cut at record starts, nothing kept past its
window. Rates are records per second of this process's CPU time (the machine is shared;
wall time would count other processes' turns), the measurements are interleaved round by
round and the best round is reported. The reference package (textqueue 1.1), when
installed, reads a tenth of the records from a file, for scale. Results go to
bench/results/textqueue-codec-latest.json.
"""
import argparse
import gc
import json
import os
import tempfile
import time

from mqksbridge.protocols.textqueue import Parser, journal, record_start, scan
from mqksbridge.protocols.textqueue.journal import Envelope

HERE = os.path.dirname(os.path.abspath(__file__))
BASE_MS = 1_718_306_771_923
BUDGET = 1.5 * 20 + 100
WINDOW = 8 << 20


def typical(n):
    """n typical messages, created 1 ms apart from the segment's creation on."""
    return [Envelope(f"{i:016x}", f"order.n{i % 1000:03d}", (b"hello world, %08d" % i,), None,
                     f"127.0.0.1:{40000 + i % 20000}.{i % 7}-client", "mqks",
                     created_at=(BASE_MS + i) / 1000) for i in range(n)]


def timed(fn):
    gc.collect()
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def windows(data):
    """(offset, bytes) of 8 MiB windows cut at record starts."""
    begin = 0
    while begin < len(data):
        end = record_start(data, begin + WINDOW) if begin + WINDOW < len(data) else None
        end = len(data) if end is None else end
        yield begin, data[begin:end]
        begin = end


def scanned(data):
    """Every record's raw bytes, window by window (each window's tail is whole)."""
    for begin, window in windows(data):
        result = scan(window, begin)
        yield from result.raws
        if result.incomplete is not None:
            yield result.incomplete.data.rstrip(b"\n")


def records(data):
    """Every record as a Record object, window by window."""
    for begin, window in windows(data):
        result = scan(window, begin)
        yield from result.records()
        if result.incomplete is not None:
            yield result.incomplete.record()


def parse_incremental(data, chunk=1 << 16):
    parser = Parser()
    count = 0
    for pos in range(0, len(data), chunk):
        count += len(parser.feed(data[pos:pos + chunk]))
    return count + (parser.incomplete() is not None)


def reference_rate(data, n):
    try:
        import textqueue
    except ImportError:
        return None
    with tempfile.NamedTemporaryFile(suffix=".tq", delete=False) as f:
        f.write(data)
    try:
        queue = textqueue.TextQueue()
        queue.add_input(f.name)
        start = time.perf_counter()
        count = 0
        while queue.get_next_in_file(0, True, True, True) is not None:
            count += 1
        elapsed = time.perf_counter() - start
        queue.close()
    finally:
        os.unlink(f.name)
    assert count == n + 1
    return count / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.records
    envs = typical(n)
    header = journal.encode_header("orders", 1, BASE_MS)
    encode = journal.encode_message
    data = header + b"".join(encode(e, base_ms=BASE_MS) for e in envs)
    best = {}

    def measure(name, fn, expect):
        elapsed, result = timed(fn)
        assert result == expect, (name, result, expect)
        best[name] = max(best.get(name, 0.0), n / elapsed)      # records per second

    raws = list(scanned(data))[1:]
    lines = data.count(b"\n")
    for _ in range(args.rounds):
        # The floor: a C split of the same windows into lines, no record logic at all.
        measure("floor: bytes.split of each window into lines",
                lambda: sum(len(w.split(b"\n")) - 1 for _, w in windows(data)), lines)
        measure("journal encode_message", lambda: sum(1 for e in envs if encode(e, base_ms=BASE_MS)), n)
        measure("scan (bulk reader, 8 MiB windows)", lambda: sum(1 for _ in scanned(data)), n + 1)
        measure("Parser (incremental, 64 KiB chunks)", lambda: parse_incremental(data), n + 1)
        measure("scan + Record objects + body + variables",
                lambda: sum(1 for r in records(data) if r.variables and r.body), n + 1)
        measure("journal decode (every field)",
                lambda: sum(1 for r in raws if journal.decode(r, BASE_MS)), n)
        measure("journal decode_fields (id, subject, created_at)",
                lambda: sum(1 for r in raws if journal.decode_fields(r, ("id", "subject", "created_at"), BASE_MS)), n)
        measure("journal verify (checksum)", lambda: sum(map(journal.verify, raws)), n)

    # Messages arrive 1 ms apart, so `t` grows from 1 to 7 digits along the file.
    per_message = (len(data) - len(header)) / n
    first_10s = sum(len(encode(e, base_ms=BASE_MS)) for e in envs[:10_000]) / min(n, 10_000)
    ref = reference_rate(header + b"".join(encode(e, base_ms=BASE_MS) for e in envs[:n // 10]), n // 10)
    report = {
        "records": n,
        "clock": "process CPU time",
        "file_bytes": len(data),
        "rates_per_s": {k: round(v) for k, v in best.items()},
        "ns_per_record": {k: round(1e9 / v) for k, v in best.items()},
        "journal_bytes_per_message": per_message,
        "journal_bytes_per_message_first_10s_of_a_segment": first_10s,
        "budget_bytes_per_message": BUDGET,
        "reference_textqueue_1_1_records_per_s": None if ref is None else round(ref),
    }
    for name, rate in best.items():
        print(f"{name:50s} {rate / 1e6:7.3f} M records/s  {1e9 / rate:7.0f} ns/record")
    if ref is not None:
        print(f"{'reference textqueue 1.1 (get_next_in_file)':50s} {ref / 1e6:7.3f} M records/s  "
              f"{1e9 / ref:7.0f} ns/record")
    print(f"journal bytes per typical message: {per_message:.1f} over the file, {first_10s:.1f} in a"
          f" segment's first 10 s (budget {BUDGET:.0f})")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "textqueue-codec-latest.json"), "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
