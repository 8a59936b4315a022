"""The Spark session of the pipeline's jobs: master, configuration, the data source.

The same job runs on a laptop (`local[*]`) and on a cluster (`spark://host:7077`, YARN,
Kubernetes): only `--master` and `--conf` change. Executors run the Python that runs
the job unless `spark.pyspark.python` names another (docs/pipeline.md: the workers
keep the environment at another path).

PySpark's Python side does not read `spark.pyspark.python`: a SparkContext takes the
workers' interpreter from the PYSPARK_PYTHON variable when it starts, and a Python
data source keeps the interpreter its context had when it was registered. So the
setting given to a session is applied here, before the context starts and again when
the source is registered (`register`, for sessions built by hand).
"""
import os
import sys

DEFAULTS = {
    "spark.sql.python.filterPushdown.enabled": "true",  # the textqueue source pushes filters
    "spark.sql.session.timeZone": "UTC",                # days and hours of reports are UTC
    "spark.ui.showConsoleProgress": "false",            # the jobs draw their own progress
    "spark.sql.shuffle.partitions": "8",                # report.tables and users' own aggregates
    "spark.sql.execution.arrow.pyspark.enabled": "true",  # toPandas of report tables
}

# A local session needs no network beyond loopback. Its one JVM runs every task of a job
# that lasts a minute or two, and compiles with the quick JIT only: the optimising
# compiler's work on the same cores cost more CPU than it saved (docs/pipeline.md,
# Performance); `--conf spark.driver.extraJavaOptions=` gives it back.
LOCAL = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1",
         "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def parse_conf(items) -> dict:
    """`KEY=VALUE` strings (the --conf arguments) as a dict."""
    conf = {}
    for item in items or ():
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--conf takes KEY=VALUE, not {item!r}")
        conf[key.strip()] = value
    return conf


PYTHON = "spark.pyspark.python"


def workers_python(conf=None) -> str:
    """The interpreter the Python workers run: `spark.pyspark.python` when given, else
    PYSPARK_PYTHON, else this one (it has mqksbridge installed)."""
    return (conf or {}).get(PYTHON) or os.environ.get("PYSPARK_PYTHON") or sys.executable


def spark_session(master="local[*]", conf=None, app="mqksbridge-pipeline"):
    """A SparkSession with the textqueue data source registered and the workers
    running `workers_python(conf)`."""
    from pyspark.sql import SparkSession

    settings = {**DEFAULTS, PYTHON: workers_python(conf)}
    if master.startswith("local"):
        settings.update(LOCAL)
    settings.update(conf or {})
    os.environ["PYSPARK_PYTHON"] = settings[PYTHON]      # what the context starts with
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.get("spark.log.level", "WARN"))
    return register(spark)


def register(spark):
    """Make a session (one built by hand too) read textqueue: the source registered for
    the interpreter the session's `spark.pyspark.python` names (this one when unset and
    PYSPARK_PYTHON is not set either), and filter pushdown on. Returns the session."""
    from mqksbridge.pipeline.source import TextQueueDataSource

    sc = spark.sparkContext
    sc.pythonExec = sc.getConf().get(PYTHON) or os.environ.get("PYSPARK_PYTHON") or sys.executable
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
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
