"""`report`: what flowed through the broker, from its journals, as Parquet tables and
one HTML page of charts.

The journals are read once (only the columns the report needs), in one Spark job:
each task aggregates its rows into partial tables that the driver merges
(pipeline/report_scan.py). `tables` defines every table in Spark SQL, the
definition the one-scan tables are held equal to. Comment records (segment notes,
records moved forward by compaction: their copy is counted where it now lives) are
not messages and are left out. Times are UTC; "as of" is the latest time any record
mentions (created or settled) unless given, so a report of old archives is not
skewed by today's date.

Tables (docs/pipeline.md lists their columns):
- traffic: per queue, subject, origin door, consumer door, status and settle reason:
  messages, bytes, retries;
- queues: per queue: messages, bytes, each status, dead letters, expired, oldest
  queued message and backlog age, time-in-queue percentiles of acked messages;
- flow: the door-to-door matrix, origin door x consumer door (or what happened
  instead: waiting, expired, removed);
- retries: the retry histogram per queue and status;
- time_in_queue: percentiles per queue, origin door and consumer door;
- dead_letters: per queue, subject, origin and consumer door;
- throughput: messages published and settled per queue and time bucket.
"""
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from mqksbridge.pipeline.progress import progress

COLUMNS = ["queue", "subject", "origin", "consumer", "status", "settle_reason", "retry", "size",
           "created", "settled"]
PERCENTILES = (0.5, 0.9, 0.99)
TABLES = ("traffic", "queues", "flow", "retries", "time_in_queue", "dead_letters", "throughput")


def _count_if(condition):
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def _wait_ms():
    return F.col("settled").cast("double") * 1000 - F.col("created").cast("double") * 1000


def _percentiles(prefix=""):
    wait = F.when(F.col("settle_reason") == "acked", F.round(_wait_ms()))
    exprs = [F.percentile(wait, p).alias(f"{prefix}wait_p{round(p * 100)}_ms") for p in PERCENTILES]
    return exprs + [F.max(wait).alias(f"{prefix}wait_max_ms"),
                    _count_if(F.col("settle_reason") == "acked").alias(f"{prefix}acked")]


def bucket_unit(span_seconds):
    """The throughput bucket for a time span: seconds up to 2 minutes, minutes up to 2
    hours, hours up to 3 days, days beyond."""
    if span_seconds <= 120:
        return "second"
    if span_seconds <= 2 * 3600:
        return "minute"
    if span_seconds <= 3 * 86400:
        return "hour"
    return "day"


def tables(df, as_of=None):
    """The report's tables (Spark DataFrames) from a textqueue DataFrame of the report
    COLUMNS; returns (tables, facts) where facts has as_of, the time span and unit."""
    messages = df.where(F.col("status") != "comment")
    limits = messages.agg(F.min("created").alias("first"),
                          F.max(F.greatest("created", F.coalesce("settled", "created"))).alias("last"),
                          F.count(F.lit(1)).alias("messages")).collect()[0]
    as_of = as_of or limits["last"]
    span = (limits["last"] - limits["first"]).total_seconds() if limits["messages"] else 0
    unit = bucket_unit(span)
    as_of_lit = F.lit(as_of).cast("timestamp") if as_of is not None else F.current_timestamp()
    queued = F.col("status") == "queued"
    out = {}
    out["traffic"] = messages.groupBy("queue", "subject", "origin", "consumer", "status",
                                      "settle_reason").agg(
        F.count(F.lit(1)).alias("messages"), F.sum("size").alias("bytes"),
        F.sum("retry").cast("long").alias("retries"))
    out["queues"] = messages.groupBy("queue").agg(
        F.count(F.lit(1)).alias("messages"), F.sum("size").alias("bytes"),
        _count_if(queued).alias("queued"), _count_if(F.col("status") == "done").alias("done"),
        _count_if(F.col("status") == "error").alias("error"),
        _count_if(F.col("settle_reason") == "dead-lettered").alias("dead_letters"),
        _count_if(F.col("settle_reason") == "expired").alias("expired"),
        _count_if(F.col("settle_reason") == "removed").alias("removed"),
        _count_if(F.col("retry") > 0).alias("retried"),
        F.min(F.when(queued, F.col("created"))).alias("oldest_queued"),
        *_percentiles()).withColumn(
        "backlog_age_s", as_of_lit.cast("double") - F.col("oldest_queued").cast("double"))
    fate = F.coalesce("consumer", F.when(queued, F.lit("waiting"))
                      .when(F.col("settle_reason").isNotNull(), F.col("settle_reason"))
                      .otherwise(F.lit("unknown")))
    out["flow"] = messages.groupBy(F.coalesce("origin", F.lit("")).alias("origin"),
                                   fate.alias("consumer")).agg(
        F.count(F.lit(1)).alias("messages"), F.sum("size").alias("bytes"))
    out["retries"] = messages.groupBy("queue", "status", "retry").agg(
        F.count(F.lit(1)).alias("messages"))
    out["time_in_queue"] = messages.where(F.col("settle_reason") == "acked").groupBy(
        "queue", "origin", "consumer").agg(*_percentiles())
    out["dead_letters"] = messages.where(F.col("settle_reason") == "dead-lettered").groupBy(
        "queue", "subject", "origin", "consumer").agg(
        F.count(F.lit(1)).alias("messages"), F.max("retry").alias("max_retry"),
        F.min("created").alias("first_created"), F.max("settled").alias("last_settled"))
    published = messages.groupBy("queue", F.date_trunc(unit, "created").alias("bucket")).agg(
        F.count(F.lit(1)).alias("published"))
    settled = messages.where(F.col("settled").isNotNull()).groupBy(
        "queue", F.date_trunc(unit, "settled").alias("bucket")).agg(
        F.count(F.lit(1)).alias("settled"))
    out["throughput"] = published.join(settled, ["queue", "bucket"], "full_outer").na.fill(
        0, ["published", "settled"])
    facts = {"as_of": as_of, "first": limits["first"], "last": limits["last"],
             "messages": limits["messages"], "unit": unit}
    return out, facts


def run(spark, paths, out_dir, where=None, as_of=None, show_progress=None, html=True):
    """Read `paths`, write every table as Parquet, `out_dir/tables/<name>.parquet`, and
    the page `out_dir/report.html`; returns {name: pandas DataFrame}, facts. The journals
    are read once: each task aggregates its rows and the driver merges the small
    partial tables (pipeline/report_scan.py), then writes each table with pyarrow (on a
    cluster, `out_dir` is on the driver's machine)."""
    from mqksbridge.pipeline import report_scan

    with progress(spark, "reading journals", show_progress):
        frames, facts = report_scan.tables(spark, paths, where, as_of)
    os.makedirs(os.path.join(out_dir, "tables"), exist_ok=True)
    for name in TABLES:
        table = pa.Table.from_pandas(frames[name], preserve_index=False)
        pq.write_table(table, os.path.join(out_dir, "tables", f"{name}.parquet"))
    if html:
        page(out_dir, frames, facts, paths)
    return frames, facts


def page(out_dir, frames, facts, paths):
    """`out_dir/report.html` and its charts, of what `run` returned; needs no Spark (the
    command line draws it while the session stops)."""
    from mqksbridge.pipeline.report_html import write_page
    write_page(os.path.join(out_dir, "report.html"), frames, facts, paths,
               charts_dir=os.path.join(out_dir, "charts"))


def clear(out_dir):
    """Remove a previous report's tables and page (the report owns these names)."""
    for name in ("tables", "charts"):
        shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
