"""The report's tables in one scan: each Spark task aggregates its rows in its Python
worker (pyarrow group-bys) into small partial tables, and the driver merges them.
Without a `--where` the tasks are the reader's own (pipeline/tasks.py: the rows never
become JVM rows); a `--where` predicate is Spark SQL, so then Spark reads and filters
and hands the rows to the same aggregation (`mapInArrow`).

`report.tables` defines the tables in Spark SQL: a cached DataFrame and a Spark job
per table, with shuffles and exact percentiles that hold every value. This is the
same result from one job, with no cache and no shuffle (tests/pipeline/test_report.py
holds the two equal, table by table). Each task sends four partials:

- cells: messages counted per queue, subject, origin, consumer, status, settle reason
  and retry, with their bytes, first and last created time and last settled time.
  traffic, queues, flow, retries and dead_letters are sums, minima and maxima of cells;
- waits: acked messages counted per queue, origin, consumer and wait (ms), a
  histogram, from which the percentiles are exact, as Spark's `percentile` computes
  them (linear interpolation between the closest ranks);
- published, settled: messages per queue and time bucket at the unit the task's own
  time span calls for (`report.bucket_unit`). Those units nest (UTC), and a task's span
  is within the whole span, so the driver coarsens them to the unit of the whole span.

The driver makes pandas frames of them as Spark's `toPandas` does (a column of
integers with a null becomes float, timestamps naive UTC).
"""
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from mqksbridge.pipeline.replay import columns_for
from mqksbridge.pipeline.report import COLUMNS, PERCENTILES, bucket_unit
from mqksbridge.pipeline.session import read
from mqksbridge.pipeline.tasks import NO_COMMENTS, reader, run

SCHEMA = "kind string, data binary"
_OUT = pa.schema([("kind", pa.string()), ("data", pa.binary())])
_TIME = pa.timestamp("us", tz="UTC")
_WORDS = pa.dictionary(pa.int32(), pa.string())     # a few distinct values, many rows
_KEYS = ["queue", "subject", "origin", "consumer", "status", "settle_reason", "retry"]
_PARTIALS = {
    "cells": pa.schema([(k, pa.int32() if k == "retry" else pa.string()) for k in _KEYS] + [
        ("n", pa.int64()), ("bytes", pa.int64()), ("first", _TIME), ("last", _TIME),
        ("last_settled", _TIME)]),
    "waits": pa.schema([("queue", _WORDS), ("origin", _WORDS), ("consumer", _WORDS),
                        ("wait", pa.float64()), ("n", pa.int64())]),
    "published": pa.schema([("queue", pa.string()), ("bucket", pa.int64()), ("n", pa.int64())]),
    "settled": pa.schema([("queue", pa.string()), ("bucket", pa.int64()), ("n", pa.int64())]),
}
UNIT_US = {"second": 1_000_000, "minute": 60_000_000, "hour": 3_600_000_000,
           "day": 86_400_000_000}


def _is(column, value):
    """column == value, null as false (Spark's `when` takes a null condition as false)."""
    return pc.fill_null(pc.equal(column, value), False)


def _micros(column):
    return pc.cast(column, pa.int64())


def _group(table, keys, aggregates):
    """Rows of `table` grouped by `keys`: the keys, then one column per aggregate
    (column, function, name); `column` None counts rows."""
    out = table.group_by(keys, use_threads=False).aggregate(
        [([], f) if c is None else (c, f) for c, f, _ in aggregates])
    return pa.table({**{k: out[k] for k in keys},
                     **{name: out[f if c is None else f"{c}_{f}"] for c, f, name in aggregates}})


def partials(batches):
    """Arrow batches of `report.COLUMNS` (the messages: comment records left out) in;
    (kind, the partial table as Arrow IPC bytes) out, one per partial."""
    batches = list(batches)
    if not batches:
        return
    t = pa.Table.from_batches(batches)
    t = t.filter(pc.not_equal(t["status"], "comment"))
    if not t.num_rows:
        return
    cells = _group(t, _KEYS, [(None, "count_all", "n"), ("size", "sum", "bytes"),
                              ("created", "min", "first"), ("created", "max", "last"),
                              ("settled", "max", "last_settled")]).cast(_PARTIALS["cells"])
    acked = t.filter(_is(t["settle_reason"], "acked"))
    acked = acked.append_column("wait", _wait_ms(acked))
    acked = acked.filter(pc.is_valid(acked["wait"]))
    waits = _group(acked, ["queue", "origin", "consumer", "wait"],
                   [(None, "count_all", "n")]).cast(_PARTIALS["waits"])
    first = pc.min(_micros(t["created"])).as_py()
    latest = [v for v in (pc.max(_micros(t[c])).as_py() for c in ("created", "settled"))
              if v is not None]
    span = (max(latest) - first) / 1e6 if first is not None and latest else 0
    unit = UNIT_US[bucket_unit(span)]
    out = {"cells": cells, "waits": waits}
    for kind, column in (("published", "created"), ("settled", "settled")):
        rows = t if kind == "published" else t.filter(pc.is_valid(t["settled"]))
        bucket = _floor(_micros(rows[column]), unit)
        out[kind] = _group(pa.table({"queue": rows["queue"], "bucket": bucket}),
                           ["queue", "bucket"], [(None, "count_all", "n")]).cast(_PARTIALS[kind])
    for kind, table in out.items():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        yield kind, sink.getvalue().to_pybytes()


def _arrow_partials(batches):
    """`partials` as a `mapInArrow` function: one row per partial."""
    for kind, data in partials(batches):
        yield pa.RecordBatch.from_arrays([pa.array([kind]), pa.array([data])], schema=_OUT)


def _floor(micros, unit):
    """Floor of int64 microseconds to a multiple of `unit` (Spark's date_trunc in UTC)."""
    return pc.multiply(pc.divide(pc.subtract(micros, pc.if_else(pc.less(micros, 0), unit - 1, 0)),
                                 unit), unit)


def _wait_ms(rows):
    """Spark's round(settled * 1000 - created * 1000) of times cast to double seconds."""
    def ms(column):
        return pc.multiply(pc.divide(pc.cast(_micros(rows[column]), pa.float64()), 1e6), 1000.0)
    return pc.round(pc.subtract(ms("settled"), ms("created")), 0, "half_towards_infinity")


def _read(rows, kind):
    """The partials of one kind from every task, as one table."""
    parts = [pa.ipc.open_stream(data).read_all() for k, data in rows if k == kind]
    return pa.concat_tables(parts) if parts else _PARTIALS[kind].empty_table()


def _sum(table, keys, name="n"):
    return _group(table, keys, [("n", "sum", name)])


def tables(spark, paths, where=None, as_of=None):
    """`report.tables` of the messages in `paths` (selected by `where`, Spark SQL),
    computed in one scan: (pandas frames, facts)."""
    if where:
        df = read(spark, paths, columns_for(where, COLUMNS), pushFilters=True)
        df = df.where(F.col("status") != "comment").where(where).select(*COLUMNS)
        rows = df.mapInArrow(_arrow_partials, SCHEMA).collect()
    else:
        rows = run(spark, reader(spark, paths, COLUMNS, [NO_COMMENTS]), partials)
    return merge(rows, as_of)


def merge(rows, as_of=None):
    """The tables and facts of the partials' rows (kind, data) from every task."""
    cells = _read(rows, "cells")
    cells = _group(cells, _KEYS, [("n", "sum", "n"), ("bytes", "sum", "bytes"),
                                  ("first", "min", "first"), ("last", "max", "last"),
                                  ("last_settled", "max", "last_settled")])
    messages = pc.sum(cells["n"]).as_py() or 0
    first = pc.min(cells["first"]).cast(pa.int64()).as_py()
    latest = [v for v in (pc.max(cells["last"]).cast(pa.int64()).as_py(),
                          pc.max(cells["last_settled"]).cast(pa.int64()).as_py()) if v is not None]
    last = max(latest) if latest else None
    stamp = TimestampType()
    limits = {"first": None if first is None else stamp.fromInternal(first),
              "last": None if last is None else stamp.fromInternal(last)}
    as_of = as_of or limits["last"]
    as_of_us = stamp.toInternal(as_of) if as_of is not None else int(time.time() * 1e6)
    span = (limits["last"] - limits["first"]).total_seconds() if messages else 0
    unit = bucket_unit(span)
    waits = _read(rows, "waits")
    waits = waits.cast(pa.schema([f.with_type(pa.string()) if f.type == _WORDS else f
                                  for f in waits.schema]))
    out = {"traffic": _traffic(cells), "queues": _queues(cells, waits, as_of_us),
           "flow": _flow(cells), "retries": _retries(cells),
           "time_in_queue": _time_in_queue(cells, waits), "dead_letters": _dead_letters(cells),
           "throughput": _throughput(_read(rows, "published"), _read(rows, "settled"),
                                     UNIT_US[unit])}
    facts = {"as_of": as_of, "first": limits["first"], "last": limits["last"],
             "messages": messages, "unit": unit}
    return {name: _pandas(table) for name, table in out.items()}, facts


def _counts_if(cells, **tests):
    """Columns of messages counted where a cell column equals a value (name=(column, value))."""
    return {name: pc.if_else(_is(cells[column], value), cells["n"], 0)
            for name, (column, value) in tests.items()}


def _traffic(cells):
    keys = _KEYS[:-1]
    retries = pc.multiply(pc.cast(cells["retry"], pa.int64()), cells["n"])
    table = cells.select(keys + ["n", "bytes"]).append_column("retries", retries)
    return _group(table, keys, [("n", "sum", "messages"), ("bytes", "sum", "bytes"),
                                ("retries", "sum", "retries")])


def _queues(cells, waits, as_of_us):
    counted = {"queued": ("status", "queued"), "done": ("status", "done"),
               "error": ("status", "error"), "dead_letters": ("settle_reason", "dead-lettered"),
               "expired": ("settle_reason", "expired"), "removed": ("settle_reason", "removed"),
               "acked": ("settle_reason", "acked")}
    columns = {"queue": cells["queue"], "messages": cells["n"], "bytes": cells["bytes"],
               **_counts_if(cells, **counted),
               "retried": pc.if_else(pc.fill_null(pc.greater(cells["retry"], 0), False),
                                     cells["n"], 0),
               "oldest_queued": pc.if_else(_is(cells["status"], "queued"), cells["first"],
                                            pa.scalar(None, _TIME))}
    order = ["messages", "bytes", "queued", "done", "error", "dead_letters", "expired",
             "removed", "retried", "oldest_queued", "acked"]
    table = _group(pa.table(columns), ["queue"],
                   [(c, "min" if c == "oldest_queued" else "sum", c) for c in order])
    stats = _wait_stats(waits, ["queue"], table)
    oldest = pc.divide(pc.cast(pc.cast(table["oldest_queued"], pa.int64()), pa.float64()), 1e6)
    backlog = pc.subtract(pa.scalar(as_of_us / 1e6), oldest)
    return pa.table({**{c: table[c] for c in ["queue"] + order[:-1]}, **stats,
                     "acked": table["acked"], "backlog_age_s": backlog})


def _wait_stats(waits, keys, groups):
    """Percentile and maximum columns of the wait histograms, one value per row of
    `groups` (null where a group has no wait). numpy sorts the histogram rows by key
    and wait; each group's distinct waits and counts are then runs of it."""
    names = [f"wait_p{round(p * 100)}_ms" for p in PERCENTILES] + ["wait_max_ms"]
    by_key = {}
    if waits.num_rows:
        encoded = [pc.dictionary_encode(waits[k].combine_chunks()) for k in keys]
        codes = [pc.fill_null(e.indices, -1).to_numpy() for e in encoded]
        values = waits["wait"].to_numpy()
        order = np.lexsort((values, *reversed(codes)))
        codes = np.stack([c[order] for c in codes])
        values, counts = values[order], waits["n"].to_numpy()[order]
        new_key = np.ones(len(values), bool)
        new_key[1:] = (codes[:, 1:] != codes[:, :-1]).any(axis=0)
        new_value = new_key.copy()
        new_value[1:] |= values[1:] != values[:-1]
        runs = np.flatnonzero(new_value)
        values, counts = values[runs], np.add.reduceat(counts, runs)
        starts = np.flatnonzero(new_key[runs])
        heads = [[None if c < 0 else e.dictionary[c].as_py() for c in row[runs][starts]]
                 for e, row in zip(encoded, codes)]
        for key, lo, hi in zip(zip(*heads), starts, [*starts[1:], len(runs)]):
            by_key[key] = _percentiles(values[lo:hi], counts[lo:hi])
    stats = [by_key.get(key, (None,) * len(names))
             for key in zip(*(groups[k].to_pylist() for k in keys))]
    return {name: pa.array([s[i] for s in stats], pa.float64()) for i, name in enumerate(names)}


def _percentiles(values, counts):
    """Spark's exact `percentile` of a histogram (sorted distinct values and their
    counts) at PERCENTILES, then the maximum."""
    accumulated = np.cumsum(counts)
    out = []
    for p in PERCENTILES:
        position = float(accumulated[-1] - 1) * p
        lower, higher = np.floor(position), np.ceil(position)
        low = values[np.searchsorted(accumulated, lower + 1)]
        high = values[np.searchsorted(accumulated, higher + 1)]
        if higher == lower or high == low:
            out.append(float(low))
        else:
            out.append(float(low + (position - lower) * (high - low)))
    return (*out, float(values[-1]))


def _fate(cells):
    """What became of a message: its consumer's door, else waiting, else its settle
    reason, else unknown."""
    reason = pc.if_else(pc.is_valid(cells["settle_reason"]), cells["settle_reason"], "unknown")
    return pc.coalesce(cells["consumer"], pc.if_else(_is(cells["status"], "queued"), "waiting",
                                                     reason))


def _flow(cells):
    table = pa.table({"origin": pc.coalesce(cells["origin"], ""), "consumer": _fate(cells),
                      "n": cells["n"], "bytes": cells["bytes"]})
    return _group(table, ["origin", "consumer"], [("n", "sum", "messages"), ("bytes", "sum", "bytes")])


def _retries(cells):
    return _sum(cells, ["queue", "status", "retry"], "messages")


def _time_in_queue(cells, waits):
    keys = ["queue", "origin", "consumer"]
    groups = _sum(cells.filter(_is(cells["settle_reason"], "acked")), keys)
    return pa.table({**{k: groups[k] for k in keys}, **_wait_stats(waits, keys, groups),
                     "acked": groups["n"]})


def _dead_letters(cells):
    keys = ["queue", "subject", "origin", "consumer"]
    dead = cells.filter(_is(cells["settle_reason"], "dead-lettered"))
    return _group(dead, keys, [("n", "sum", "messages"), ("retry", "max", "max_retry"),
                               ("first", "min", "first_created"),
                               ("last_settled", "max", "last_settled")])


def _throughput(published, settled, unit):
    """Messages published and settled per queue and bucket: a full outer join on both
    (a row without a queue or bucket joins nothing, as in SQL), zeros for the missing."""
    def side(table):
        table = _sum(pa.table({"queue": table["queue"], "bucket": _floor(table["bucket"], unit),
                               "n": table["n"]}), ["queue", "bucket"])
        keyed = pc.and_(pc.is_valid(table["queue"]), pc.is_valid(table["bucket"]))
        return table.filter(keyed), table.filter(pc.invert(keyed))
    (p, p_alone), (s, s_alone) = side(published), side(settled)
    names = ["queue", "bucket", "published", "settled"]
    joined = p.rename_columns(names[:3]).join(s.rename_columns(names[:2] + names[3:]),
                                              names[:2], join_type="full outer", use_threads=False)
    rows = pa.concat_tables([
        joined.select(names),
        p_alone.append_column("settled", pa.nulls(p_alone.num_rows, pa.int64())).rename_columns(names),
        s_alone.add_column(2, "published", pa.nulls(s_alone.num_rows, pa.int64())).rename_columns(names),
    ])
    return pa.table({"queue": rows["queue"], "bucket": pc.cast(rows["bucket"], _TIME),
                     "published": pc.fill_null(rows["published"], 0),
                     "settled": pc.fill_null(rows["settled"], 0)})


def _pandas(table):
    """A pandas frame as Spark's `toPandas` makes it: integer columns with a null as
    float, timestamps naive in UTC (the session's time zone)."""
    frame = table.to_pandas(coerce_temporal_nanoseconds=True)
    for field in table.schema:
        if pa.types.is_timestamp(field.type):
            frame[field.name] = frame[field.name].dt.tz_convert("UTC").dt.tz_localize(None)
    return frame
