"""`export`: the journals as Parquet, partitioned by day (UTC, of the publish time) and
queue: `OUT/day=2024-06-13/queue=orders/part-....parquet`.

Every column of the data source but `variables` by default (`--columns` to choose).
Comment records (`#`: segment notes, the old copies of records compaction moved
forward) are not messages, and an export of them would count a moved message twice:
they are left out unless asked for (`--with-comments`; their status is `comment`).
Partition values that are not path-safe are escaped as Spark escapes them (`audit/1`
becomes `audit%2F1`) and read back unescaped; a record of a file that is no journal
has no queue (`queue=__HIVE_DEFAULT_PARTITION__`, null when read back).

The Python tasks write the Parquet files themselves (pipeline/parquet_parts.py): the
rows never become JVM rows. Without `--where` the tasks are the reader's own
(pipeline/tasks.py); a `--where` predicate is Spark SQL, so then Spark reads and
filters and hands the rows to the same writer (`mapInArrow`). An `--out` that is a
URL (`hdfs://`, `s3a://`) is written by Spark's own writer: the Python tasks write
to file system paths only.
"""
import re

from pyspark.sql import functions as F

from mqksbridge.pipeline import parquet_parts, tasks
from mqksbridge.pipeline.progress import progress
from mqksbridge.pipeline.replay import columns_for
from mqksbridge.pipeline.schema import COLUMNS, spark_schema
from mqksbridge.pipeline.session import read

DEFAULT = [c for c in COLUMNS if c != "variables"]
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def run(spark, paths, out, where=None, columns=None, show_progress=None, mode="errorifexists",
        with_comments=False):
    """Write the export; returns the number of records written."""
    wanted = list(columns or DEFAULT)
    for needed in ("queue", "created"):
        if needed not in wanted:
            wanted.append(needed)
    if _URL.match(str(out)):
        return spark_write(spark, paths, out, wanted, where, show_progress, mode, with_comments)
    job = parquet_parts.Job(out, mode, spark_schema([c for c in wanted if c != "queue"]),
                            spark.version)
    if job.skip():
        return 0
    filters = () if with_comments else (tasks.NO_COMMENTS,)
    with progress(spark, "export", show_progress):
        try:
            if where:
                df = _selection(spark, paths, wanted, where, with_comments).select(*wanted)
                rows = df.mapInArrow(lambda batches: _written(job, batches),
                                     "path string, rows long").collect()
                written = [tuple(row) for row in rows]
            else:
                planned = tasks.reader(spark, paths, wanted, filters)
                written = tasks.run(spark, planned,
                                    lambda batches: parquet_parts.write_task(job, batches))
        except BaseException:
            job.clean()
            raise
    return job.commit(written)


def _written(job, batches):
    """mapInArrow form of `parquet_parts.write_task`: the files written as batches."""
    import pyarrow as pa

    for path, rows in parquet_parts.write_task(job, batches):
        yield pa.RecordBatch.from_pydict({"path": [path], "rows": [rows]},
                                         pa.schema([("path", pa.string()), ("rows", pa.int64())]))


def _selection(spark, paths, wanted, where, with_comments):
    needed = wanted if with_comments or "status" in wanted else wanted + ["status"]
    df = read(spark, paths, columns_for(where, needed), pushFilters=True)   # one query
    if not with_comments:
        df = df.where(F.col("status") != "comment")     # pushed down: not decoded
    return df.where(where) if where else df


def spark_write(spark, paths, out, wanted, where, show_progress, mode, with_comments):
    """The export written by Spark's Parquet writer (for `--out` URLs)."""
    df = _selection(spark, paths, wanted, where, with_comments)
    df = df.select(*wanted).withColumn("day", F.to_date("created"))
    with progress(spark, "export", show_progress):
        df.write.partitionBy("day", "queue").mode(mode).parquet(out)
    return spark.read.schema(df.schema).parquet(out).count()   # none written: no schema
