"""What the Python-on-the-workers tests share: a wrapper interpreter that logs who
started it (its parent's command line) and runs this venv's Python, and a plain
SparkSession built the way docs/pipeline.md shows (`python -m tests.pipeline.workers
MASTER PYTHON JOURNALS`, with no PYSPARK_PYTHON in its environment)."""
import os
import stat
import sys

from tests.pipeline.conftest import LEAN_JVM


def wrapper(folder):
    """(path of a wrapper interpreter, path of its log): each start appends a line
    `PID PARENT-COMMAND-LINE` and execs this interpreter."""
    path = os.path.join(str(folder), "bin", "python")
    log = os.path.join(str(folder), "started.log")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                f"echo \"$$ $(tr '\\0' ' ' < /proc/$PPID/cmdline)\" >> '{log}'\n"
                f"exec '{sys.executable}' \"$@\"\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path, log


def starts(log):
    """The parents' command lines of the wrapper's starts."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [line.split(" ", 1)[1] for line in f if " " in line]


def environment():
    """This environment without PYSPARK_PYTHON (a user's shell that never set it)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")} | {"SPARK_LOCAL_IP": "127.0.0.1"}


def main(master, python, journals):
    # docs/pipeline.md, "With a plain SparkSession"
    from pyspark.sql import SparkSession

    from mqksbridge.pipeline.schema import columns
    from mqksbridge.pipeline.session import register, stop

    spark = (SparkSession.builder.master(master)
             .config("spark.pyspark.python", python)
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.executor.memory", "768m")
             .config("spark.cores.max", "2")
             .config("spark.driver.extraJavaOptions", LEAN_JVM)
             .config("spark.executor.extraJavaOptions", LEAN_JVM)
             .getOrCreate())
    register(spark)
    def df():
        return spark.read.format("textqueue").schema(columns("status", "retry")).load(journals)

    print(df().where("status = 'queued'").count(), df().count())
    stop(spark)


if __name__ == "__main__":
    main(*sys.argv[1:])
