"""A Spark standalone cluster on loopback running `report`, in the background.

A master and a worker started from the pyspark installation's own `spark-class`, bound
to loopback on free ports, then `mqksbridge-pipeline report --master spark://...` (a
separate driver process, an executor the worker launches). The whole run takes minutes
of mostly waiting on JVMs, so tests/pipeline/conftest.py starts it when the pipeline
tests start and test_cluster.py, run last of them, takes its result: the other tests
run meanwhile.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pyspark

from tests.support.process import free_port

SPARK_CLASS = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
CLI = os.path.join(os.path.dirname(sys.executable), "mqksbridge-pipeline")
STARTUP = 180


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
        deadline = time.monotonic() + STARTUP
        while time.monotonic() < deadline:
            if re.search(pattern, self.log()):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)         # a daemon's log line is the condition; nothing to poll faster
        raise AssertionError(f"no {pattern!r} in {self.log_path}:\n{self.log()[-3000:]}")

    def stop(self):
        """SIGTERM the daemon's group (the worker's executors with it), then SIGKILL."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


class ClusterReport:
    """`start()` runs master, worker and the report in a thread; `result()` waits for
    the report's CompletedProcess (and the master, whose log tells where the executor
    ran); `stop()` stops the daemons (also when the run is still going)."""

    def __init__(self, workdir, journals, out):
        self.workdir, self.journals, self.out = str(workdir), str(journals), str(out)
        self.master = None
        self._daemons = []
        self._lock = threading.Lock()
        self._stopped = False
        self._outcome = None
        self._thread = threading.Thread(target=self._run, name="spark-cluster-report", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _daemon(self, name, args, env):
        with self._lock:
            if self._stopped:
                raise RuntimeError("the cluster was stopped")
            daemon = Daemon(self.workdir, name, args, env)
            self._daemons.append(daemon)
            return daemon

    def _run(self):
        try:
            env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                   "SPARK_NO_DAEMONIZE": "1", "SPARK_DAEMON_MEMORY": "512m"}
            port = free_port()
            self.master = self._daemon("master", [
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                "--webui-port", str(free_port())], env)
            self.master.wait_for(r"I have been elected leader")
            worker = self._daemon("worker", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", "2",
                "--memory", "1g", "--work-dir", os.path.join(self.workdir, "work"),
                f"spark://127.0.0.1:{port}"], env)
            worker.wait_for(r"Successfully registered with master")
            self._outcome = subprocess.run(
                [CLI, "report", self.journals, "--out", self.out, "--master", f"spark://127.0.0.1:{port}",
                 "--quiet", "--conf", "spark.driver.host=127.0.0.1",
                 "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.executor.memory=768m",
                 "--conf", "spark.cores.max=2", "--conf", "spark.sql.shuffle.partitions=4"],
                capture_output=True, text=True, timeout=600,
                env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
        except BaseException as e:      # noqa: BLE001 - handed to the test by result()
            self._outcome = e

    def result(self, timeout):
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the cluster's report did not finish in {timeout} s "
                                 f"(logs in {self.workdir})")
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome

    def stop(self):
        with self._lock:
            self._stopped = True
            daemons = list(reversed(self._daemons))
        for daemon in daemons:
            daemon.stop()
