"""The Spark session of the pipeline's jobs: master, configuration, the data source.

The same job runs on a laptop (`local[*]`) and on a cluster (`spark://host:7077`, YARN,
Kubernetes): only `--master` and `--conf` change. Executors run the Python that runs
the job (PYSPARK_PYTHON, `spark.pyspark.python`) unless told otherwise, so on a
cluster the same environment (mqksbridge[pipeline] installed) must exist on every
worker at the same path (docs/pipeline.md).
"""
import os
import sys

DEFAULTS = {
    "spark.sql.python.filterPushdown.enabled": "true",  # the textqueue source pushes filters
    "spark.sql.session.timeZone": "UTC",                # days and hours of reports are UTC
    "spark.ui.showConsoleProgress": "false",            # the jobs draw their own progress
    "spark.sql.shuffle.partitions": "8",                # reports aggregate to small tables
    "spark.sql.execution.arrow.pyspark.enabled": "true",  # toPandas of report tables
}

# A local session needs no network beyond loopback.
LOCAL = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}


def parse_conf(items) -> dict:
    """`KEY=VALUE` strings (the --conf arguments) as a dict."""
    conf = {}
    for item in items or ():
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--conf takes KEY=VALUE, not {item!r}")
        conf[key.strip()] = value
    return conf


def spark_session(master="local[*]", conf=None, app="mqksbridge-pipeline"):
    """A SparkSession with the textqueue data source registered."""
    from pyspark.sql import SparkSession

    from mqksbridge.pipeline.source import TextQueueDataSource

    python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {**DEFAULTS, "spark.pyspark.python": python}
    if master.startswith("local"):
        settings.update(LOCAL)
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.get("spark.log.level", "WARN"))
    spark.dataSource.register(TextQueueDataSource)
    return spark


def stop(spark, timeout=60):
    """Stop the session and the JVM behind it: `SparkSession.stop` leaves the JVM and
    the py4j gateway running until the interpreter exits; this closes the gateway and
    waits for the JVM (and so its Python workers) to end, so nothing outlives the job."""
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None
    if process is not None:
        process.stdin.close()               # the JVM exits when its stdin closes
        process.wait(timeout)


def read(spark, paths, columns=None, **options):
    """The textqueue DataFrame of `paths` (files, directories, globs) with only
    `columns` decoded (all by default), in tasks balanced over the session's cores."""
    import json

    from mqksbridge.pipeline import schema

    reader = spark.read.format("textqueue").option("paths", json.dumps([str(p) for p in paths]))
    options.setdefault("minPartitions", spark.sparkContext.defaultParallelism)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.schema(schema.spark_schema(columns)).load()
