"""The pipeline on a real Spark cluster, not local mode: a standalone master and a worker
started from the pyspark installation's own `spark-class`, bound to loopback on free ports;
`mqksbridge-pipeline report --master spark://127.0.0.1:PORT` runs there (a separate driver
process, an executor the worker launches) and writes the same tables as local[*]."""
import os
import re
import signal
import subprocess
import sys

import pandas
import pyspark
import pytest

from mqksbridge.pipeline import report
from tests.pipeline import plain, workers
from tests.pipeline.conftest import LEAN_JVM
from tests.pipeline.test_retries import check_retries
from tests.support.process import free_port
from tests.support.waits import wait_until

SPARK_CLASS = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
CLI = os.path.join(os.path.dirname(sys.executable), "mqksbridge-pipeline")
STARTUP = 120
CLUSTER_CONF = [
    "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
    "--conf", "spark.executor.memory=768m", "--conf", "spark.cores.max=2",
    "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false",
    "--conf", f"spark.driver.extraJavaOptions={LEAN_JVM}",
    "--conf", f"spark.executor.extraJavaOptions={LEAN_JVM}"]


class Daemon:
    """A spark-class daemon in its own process group, its output in a log file."""

    def __init__(self, workdir, name, args, env):
        self.log_path = os.path.join(workdir, f"{name}.log")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([SPARK_CLASS, *args], stdout=log, stderr=subprocess.STDOUT,
                                            env=env, cwd=workdir, start_new_session=True)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_for(self, pattern):
        """The daemon's log line matching `pattern` (a daemon that exits first fails)."""
        wait_until(lambda: re.search(pattern, self.log()) or self.process.poll() is not None,
                   STARTUP, f"{pattern!r} in {self.log_path}", step=0.2,   # nothing polls faster
                   detail=lambda: self.log()[-3000:])
        assert re.search(pattern, self.log()), f"the daemon exited:\n{self.log()[-3000:]}"

    def stop(self):
        """SIGTERM the daemon's group (the worker's executors with it), then SIGKILL."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A master and a worker, started together (the worker retries until the master
    answers)."""
    workdir = str(tmp_path_factory.mktemp("spark-cluster"))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_NO_DAEMONIZE": "1", "SPARK_DAEMON_MEMORY": "512m",
           "SPARK_DAEMON_JAVA_OPTS": LEAN_JVM}
    port, worker_port = free_port(), free_port()
    daemons = []
    try:
        daemons.append(Daemon(workdir, "master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
            "--webui-port", str(free_port())], env))
        daemons.append(Daemon(workdir, "worker", [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(worker_port),
            "--webui-port", str(free_port()), "--cores", "2", "--memory", "1g",
            "--work-dir", os.path.join(workdir, "work"), f"spark://127.0.0.1:{port}"], env))
        master, worker = daemons
        master.wait_for(r"I have been elected leader")
        worker.wait_for(r"Successfully registered with master")
        yield f"spark://127.0.0.1:{port}", master, worker
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


def _wait_group_gone(group, timeout=STARTUP):
    """Wait until no process of a process group is left (the job's driver JVM waits for
    its end, but the JVM's Python daemon and workers exit when they see it gone)."""
    def gone():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        return False
    wait_until(gone, timeout, "the job's processes to end", step=0.1,    # no event to wait for
               detail=lambda: subprocess.run(["ps", "-o", "pid,args", "-g", str(group)],
                                             capture_output=True, text=True).stdout)


def _sorted_rows(frame):
    frame = frame.astype(object).where(frame.notna(), None)
    columns = sorted(frame.columns)
    return sorted((tuple(row[c] for c in columns) for row in frame.to_dict("records")), key=repr)


def run_job(argv, timeout=600):
    """Run a job's process (its own process group) to its end; (exit status, stdout,
    stderr), once nothing of it is left."""
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True, env=workers.environment())
    try:
        stdout, stderr = job.communicate(timeout=timeout)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    _wait_group_gone(job.pid)
    return job.returncode, stdout, stderr


def started_by_executors(log):
    return [s for s in workers.starts(log) if "CoarseGrainedExecutorBackend" in s]


def test_export_on_the_cluster_runs_the_python_the_conf_names(cluster, report_journals,
                                                               broker_journal, tmp_path):
    url, master, worker = cluster
    _, ids, journal = broker_journal
    python, log = workers.wrapper(tmp_path / "venv")
    out = tmp_path / "export"
    status, stdout, stderr = run_job(
        [CLI, "export", str(report_journals), journal, "--out", str(out), "--master", url,
         "--quiet", *CLUSTER_CONF, "--conf", f"spark.pyspark.python={python}"])
    assert status == 0, stdout + stderr[-5000:]
    assert started_by_executors(log), workers.starts(log)
    rows = pandas.read_parquet(out)
    assert "comment" not in set(rows["status"])          # a row is a message
    messages = [r for r in plain.read_tree(report_journals) if r.status != "comment"]
    check_retries(list(rows.itertuples()), ids)
    assert len(rows) == len(messages) + 5               # + acked, dead, back, their dlq copies


def test_a_plain_session_on_the_cluster(cluster, report_journals, tmp_path):
    url, master, worker = cluster
    python, log = workers.wrapper(tmp_path / "venv")
    status, stdout, stderr = run_job([sys.executable, "-m", "tests.pipeline.workers", url, python,
                                      str(report_journals)])
    assert status == 0, stderr[-5000:]
    queued, total = map(int, stdout.split())
    assert 0 < queued < total
    assert started_by_executors(log), workers.starts(log)


def test_report_on_a_standalone_cluster_equals_local(cluster, report_journals, local_report, tmp_path):
    url, master, worker = cluster
    journals = report_journals
    out = tmp_path / "cluster-report"
    job = subprocess.Popen(
        [CLI, "report", str(journals), "--out", f"{out}/", "--master", url, "--quiet",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--conf", "spark.executor.memory=768m", "--conf", "spark.cores.max=2",
         "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false",
         "--conf", f"spark.driver.extraJavaOptions={LEAN_JVM}",
         "--conf", f"spark.executor.extraJavaOptions={LEAN_JVM}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    try:
        stdout, stderr = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 0, stdout + stderr[-5000:]
    _wait_group_gone(job.pid)           # nothing of the job outlives it: JVM, Python workers
    assert "report: 3" in stdout and f" -> {out}/report.html, tables in {out}/tables/" in stdout
    assert re.search(r"Launching executor app-\S+/\d+ on worker", master.log()), master.log()[-2000:]
    local = local_report[1]
    for name in report.TABLES:
        remote = pandas.read_parquet(out / "tables" / f"{name}.parquet")
        assert len(remote) == len(local[name]) > 0, name
        assert _sorted_rows(remote) == _sorted_rows(local[name]), name
    assert (out / "report.html").stat().st_size > 10_000
