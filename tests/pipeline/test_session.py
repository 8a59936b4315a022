"""Where the Python workers come from, on local[2] (test_cluster.py does the same on a
standalone cluster): `--conf spark.pyspark.python=PATH` is the interpreter the workers
run, and a plain SparkSession with `register` reads textqueue with the interpreter its
`spark.pyspark.python` names, PYSPARK_PYTHON unset. And a journal path that names
nothing is one line, before Spark starts."""
import os
import subprocess
import sys

from tests.pipeline import workers
from tests.pipeline.conftest import LEAN_JVM

CLI = os.path.join(os.path.dirname(sys.executable), "mqksbridge-pipeline")
LOCAL = ["--master", "local[2]", "--quiet", "--conf", "spark.ui.enabled=false",
         "--conf", f"spark.driver.extraJavaOptions={LEAN_JVM}"]


def run(argv, timeout=600):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=workers.environment())


def test_a_journal_path_that_names_nothing_is_one_line(report_journals, tmp_path):
    for command in (["export", "--out", str(tmp_path / "x")], ["report", "--out", str(tmp_path / "r")],
                    ["replay", "--to", str(tmp_path / "in.tq"), "--dry-run"]):
        done = run([CLI, command[0], str(report_journals), "archive/", *command[1:], "--quiet"])
        assert done.returncode == 2, done.stderr[-3000:]
        assert done.stderr == "mqksbridge-pipeline: no journal file or directory at archive/\n"
    assert not (tmp_path / "x").exists()


def test_workers_run_the_python_the_conf_names(report_journals, tmp_path):
    done = run([CLI, "export", str(report_journals), "--out", str(tmp_path / "x"), *LOCAL,
                "--conf", "spark.pyspark.python=/nonexistent/python"])
    assert done.returncode == 1 and "export:" not in done.stdout, done.stderr[-3000:]
    assert not list((tmp_path / "x").rglob("*.parquet"))


def test_a_plain_session_reads_with_the_python_it_names(report_journals, tmp_path):
    python, log = workers.wrapper(tmp_path)
    done = run([sys.executable, "-m", "tests.pipeline.workers", "local[2]", python,
                str(report_journals)])
    assert done.returncode == 0, done.stderr[-3000:]
    queued, total = map(int, done.stdout.split())
    assert 0 < queued < total
    assert workers.starts(log), "the workers never ran the interpreter the session names"
