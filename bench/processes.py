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


def spawn(module, *args):
    """`python -m module args...` from the project root, stdin/stdout piped as text."""
    return subprocess.Popen([PY, "-m", module, *args], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def last_json(proc):
    """Wait for a load role and parse the JSON result it prints last."""
    out = proc.stdout.read().strip().splitlines()
    proc.wait()
    return json.loads(out[-1])
