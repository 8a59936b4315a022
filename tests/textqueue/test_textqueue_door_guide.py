"""The shell session of docs/guide.md ("The TextQueue door"), run as written with bash
against a real `twistd -n mqksbridge`: only the ports (free ones instead of the defaults)
and the paths of the installed commands change."""
import os
import re
import subprocess
import sys

from tests.support.process import TWISTD, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARK = "<!-- shell example, run as written by tests/textqueue/test_textqueue_door_guide.py -->"


def example():
    guide = open(os.path.join(ROOT, "docs", "guide.md")).read()
    block = guide[guide.index(MARK):]
    return block.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_guide_shell_session_works(tmp_path):
    ports = {door: free_port() for door in ("mqks", "malamute", "twino", "admin")}
    bin_dir = os.path.dirname(sys.executable)
    script = example()
    assert ".venv/bin/twistd -n --pidfile= mqksbridge --inbox" in script
    script = script.replace(
        ".venv/bin/twistd -n --pidfile= mqksbridge",
        f"{TWISTD} -n --pidfile= mqksbridge --mqks tcp:{ports['mqks']}:interface=127.0.0.1"
        f" --malamute tcp://127.0.0.1:{ports['malamute']}"
        f" --twino tcp:{ports['twino']}:interface=127.0.0.1"
        f" --admin tcp:{ports['admin']}:interface=127.0.0.1")
    script = script.replace(".venv/bin/mqksbridge queues",
                            f"{bin_dir}/mqksbridge queues --admin "
                            f"http://127.0.0.1:{ports['admin']}")
    done = subprocess.run(["bash", "-c", "trap 'kill %1 2>/dev/null' EXIT\n" + script],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    log = (tmp_path / "var" / "broker.log").read_text() if (
        tmp_path / "var" / "broker.log").exists() else ""
    assert done.returncode == 0, done.stderr + log
    out = done.stdout
    assert out.startswith("=resize photo-1.jpg\n=resize photo-2.jpg\n\\s=urgent\n\\i=tq-")
    assert re.search(r"^-resize photo-2\.jpg\n\\i=tq-\w+-20\n\\s=urgent\n\\f=textqueue:jobs\.tq\n"
                     r"\\t=\d+\n\\r=0\n\\error= {64}\n", out, re.M)
    assert re.search(r"^jobs +round-robin +0 +0 +1 +textqueue:1 ", out, re.M)
    inbox = (tmp_path / "var" / "inbox" / "jobs.tq").read_bytes()
    assert inbox.count(b"\n=") + inbox.startswith(b"=") == 2
    outbox = (tmp_path / "var" / "outbox" / "jobs.tq").read_bytes()
    assert outbox.count(b"\n=resize photo-") == 2 and b"\n-" not in outbox
