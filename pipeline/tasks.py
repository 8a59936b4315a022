"""The textqueue source's read tasks run as plain Spark tasks, with no DataFrame between.

A job whose work after the read is its own Python (export writing Parquet, report
aggregating) need not turn the reader's Arrow batches into JVM rows and back: the
driver plans the reads with the source's own reader (the same byte ranges in whole
rounds of the cores, the same filters applied in the reader), Spark runs each read
task in a Python worker, and the job's function turns that task's record batches
into a small result that is collected. A predicate only Spark SQL can evaluate
(`--where`) needs the DataFrame: the jobs take that path then.
"""
import json

from pyspark.sql.datasource import EqualTo, Not

from mqksbridge.pipeline import schema

NO_COMMENTS = Not(EqualTo(("status",), "comment"))     # a row is a message


def reader(spark, paths, columns, filters=()):
    """The source's reader of `paths` with only `columns` decoded and `filters` (data
    source filters the reader applies exactly, such as NO_COMMENTS) applied."""
    from mqksbridge.pipeline.source import TextQueueReader

    options = {"paths": json.dumps([str(p) for p in paths]), "pushFilters": "true",
               "minPartitions": str(spark.sparkContext.defaultParallelism)}
    planned = TextQueueReader(options, schema.spark_schema(columns))
    left = list(planned.pushFilters(list(filters)))
    if left:
        raise ValueError(f"the textqueue reader cannot apply {left}")
    return planned


def run(spark, planned, function):
    """`function(batches)` run on the record batches of each read task of `planned`
    (a reader), one Spark task each; returns everything the calls yielded."""
    tasks = planned.partitions()

    def each(partition):
        for task in partition:
            yield from function(planned.read(task))

    return spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(each).collect()
