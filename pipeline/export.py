"""`export`: the journals as Parquet, partitioned by day (UTC, of the publish time) and
queue: `OUT/day=2024-06-13/queue=orders/part-....parquet`.

Every column of the data source but `variables` by default (`--columns` to choose).
Comment records (`#`: segment notes, the old copies of records compaction moved
forward) are not messages, and an export of them would count a moved message twice:
they are left out unless asked for (`--with-comments`; their status is `comment`). Spark escapes partition
values that are not path-safe (`audit/1` becomes `audit%2F1`) and reads them back
unescaped; a record of a file that is no journal has no queue
(`queue=__HIVE_DEFAULT_PARTITION__`, null when read back).
"""
from pyspark.sql import functions as F

from mqksbridge.pipeline.progress import progress
from mqksbridge.pipeline.replay import columns_for
from mqksbridge.pipeline.schema import COLUMNS
from mqksbridge.pipeline.session import read

DEFAULT = [c for c in COLUMNS if c != "variables"]


def run(spark, paths, out, where=None, columns=None, show_progress=None, mode="errorifexists",
        with_comments=False):
    """Write the export; returns the number of records written."""
    wanted = list(columns or DEFAULT)
    for needed in ("queue", "created"):
        if needed not in wanted:
            wanted.append(needed)
    needed = wanted if with_comments or "status" in wanted else wanted + ["status"]
    df = read(spark, paths, columns_for(where, needed), pushFilters=True)   # one query
    if not with_comments:
        df = df.where(F.col("status") != "comment")     # pushed down: not decoded
    if where:
        df = df.where(where)
    df = df.select(*wanted).withColumn("day", F.to_date("created"))
    with progress(spark, "export", show_progress):
        df.write.partitionBy("day", "queue").mode(mode).parquet(out)
    return spark.read.parquet(out).count()
