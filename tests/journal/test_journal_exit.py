"""A process that starts the broker's services and exits without stopping them is not held
open by the journal's worker thread (the last CI run passed every test and then waited for
its time limit on that thread)."""
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import sys, threading
    from mqksbridge.bridge import config as configuration
    from mqksbridge.bridge.service import build
    off = {"listen": []}
    config = configuration.load(overrides={"mqks": off, "malamute": off, "twino": off,
                                           "admin": off, "data_dir": sys.argv[1],
                                           "durability": {"queues": ["jobs"]}})
    top, broker, doors, listeners = build(config)
    top.startService()
    workers = [t for t in threading.enumerate() if "journal" in t.name]
    print(len(workers), flush=True)
""")


def test_a_process_that_never_stops_the_journal_still_exits(tmp_path):
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]        # the worker was running when main returned
