"""Starting and reading the benchmark's separate processes (server, load roles)."""
import json
import os
import socket
import subprocess
import sys

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpus(role):
    """Where a process may run: the broker gets CPU 0 to itself and the load roles share
    the others, so a generator never preempts the broker it measures (with 2 CPUs this
    halves the run-to-run spread). One CPU: no pinning."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return cpus[:1] if role == "server" else cpus[1:]


def spawn(module, *args, pin=False):
    """`python -m module args...` from the project root, stdin/stdout piped as text.
    With `pin`, a first argument of `server` marks the broker (see _cpus). Latency runs do
    not pin: there the load roles must not queue behind each other on one CPU."""
    cpus = _cpus("server" if args[:1] == ("server",) else "load") if pin else None
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    return subprocess.Popen([PY, "-m", module, *args], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, preexec_fn=pin)


def last_json(proc):
    """Wait for a load role and parse the JSON result it prints last."""
    out = proc.stdout.read().strip().splitlines()
    proc.wait()
    return json.loads(out[-1])
