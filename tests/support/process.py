"""The real `twistd -n mqksbridge` as a subprocess, every door on a free loopback port."""
import os
import resource
import socket
import subprocess
import sys

from bench.procstat import cpu_ns
from tests.support.waits import wait_until

TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")
STARTUP_SECONDS = 30
_LIVE = set()           # every broker process started and not yet seen stopped


def stop_all():
    """Kill the brokers tests left running (one that failed before its stop): an orphan
    would keep loading the machine for the rest of the suite and after it."""
    for process in list(_LIVE):
        if process.poll() is None:
            process.kill()
            process.wait(10)
    _LIVE.clear()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def door_args(door, port):
    """The flag that puts a door (or the admin endpoint) on a loopback port."""
    if door == "malamute":
        return ["--malamute", f"tcp://127.0.0.1:{port}"]
    return [f"--{door}", f"tcp:{port}:interface=127.0.0.1"]


class BrokerProcess:
    """Start with `start()`, read `ports[door]`, stop with `stop()` (kills if needed)."""

    def __init__(self, workdir, doors=("mqks",),
                 all_doors=("mqks", "malamute", "twino", "admin"), args=(), nofile=None):
        self.workdir = workdir
        self.doors = doors
        self.all_doors = all_doors
        self.args = list(args)          # more `mqksbridge` flags
        self.nofile = nofile            # (soft, hard) RLIMIT_NOFILE for the broker
        self.log_path = os.path.join(str(workdir), "twistd.log")
        self.process = None
        self.ports = {}

    def start(self):
        for _ in range(3):          # another process may grab a free port first
            self.ports = {door: free_port() for door in self.doors}
            args = [TWISTD, "-n", "--pidfile=", "mqksbridge", "--data",
                    os.path.join(str(self.workdir), "var"), *self.args]
            for door in self.all_doors:
                args += door_args(door, self.ports[door]) if door in self.ports \
                    else [f"--{door}", "none"]
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(args, cwd=self.workdir, stdout=log,
                                                stderr=subprocess.STDOUT,
                                                preexec_fn=self._limits if self.nofile else None)
            _LIVE.add(self.process)
            if all(self._wait_for(port) for port in self.ports.values()):
                return self
            self.stop()
        raise AssertionError("twistd did not start:\n" + self.log())

    def _limits(self):
        resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def _wait_for(self, port):
        """Whether twistd listens on `port` (False: it exited first)."""
        wait_until(lambda: self.process.poll() is not None or self._listens(port),
                   STARTUP_SECONDS, f"twistd to listen on {port}", step=0.05, detail=self.log)
        return self.process.poll() is None

    def _listens(self, port):
        """Whether this broker holds a listening socket on `port`: a connection that
        succeeds may reach another process that took the free port first (this broker
        then exits on its bind error, and a test would talk to the wrong peer)."""
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for row in f.read().splitlines()[1:]:
                    fields = row.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{fields[9]}]")
        if not inodes:
            return False
        fds = f"/proc/{self.process.pid}/fd"
        for fd in os.listdir(fds):
            try:
                if os.readlink(os.path.join(fds, fd)) in inodes:
                    return True
            except OSError:
                pass                     # closed meanwhile
        return False

    def cpu_seconds(self):
        """CPU time the broker has used so far, all threads: what a test bounds to say the
        broker did little work, whatever else loads the machine meanwhile (a wall-clock
        bound fails on a busy machine)."""
        return cpu_ns(self.process.pid) / 1e9

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        _LIVE.discard(self.process)
