"""A consumer that never reads, against a real `twistd -n mqksbridge` with a small
storage window: the backlog pages out to disk (scratch segments, or the durable queue's
journal), memory stays bounded, every message comes back in order once the consumer
reads, and a kill -9 brings back the durable backlog and never the scratch one."""
import json
import os
import shutil
import subprocess
import threading

import pytest

from tests.hostile.hostile import rss
from tests.journal.crash import Line
from tests.support.admin import fetch, fetch_json
from tests.support.process import BrokerProcess
from tests.support.waits import wait_until

WINDOW = 200                    # messages a queue keeps resident
TOTAL = 2 << 20                 # pages waiting for the disk past this hold publishers
CONFIG = f"""
[broker]
queue_memory_window_messages = {WINDOW}
queue_memory_total = {TOTAL}

[durability]
queues = ["kept*"]
fsync = "always"
"""


def broker(tmp_path, config=CONFIG):
    path = tmp_path / "broker.toml"
    path.write_text(config)
    return BrokerProcess(tmp_path, doors=("mqks", "admin"), args=["--config", str(path)])


def consumer(port, queue, manual=False):
    """A consumer of `queue` (bound to event ev.QUEUE) that reads nothing from here on."""
    conn = Line(port)
    conn.send([b"%s consume --confirm %s ev.%s%s" % (queue, queue, queue,
                                                     b" --manual-ack" if manual else b"")])
    while True:
        got = conn.lines()
        if b"%s ok " % queue in got:         # deliveries may follow in the same read
            conn.early = got[got.index(b"%s ok " % queue) + 1:]
            return conn


def publish(port, queue, count, size=16):
    """`count` confirmed publishes to ev.QUEUE, bodies numbered in order."""
    conn = Line(port)
    pad = b"x" * max(0, size - 8)
    for first in range(0, count, 1000):
        ids = range(first, min(count, first + 1000))
        conn.send([b"%d publish --confirm ev.%s %08d%s" % (i, queue, i, pad) for i in ids])
        waiting = len(ids)
        while waiting:
            for line in conn.lines():
                assert line.endswith(b" ok "), line
                waiting -= 1
    conn.close()


def read_all(conn, queue, count):
    """What the consumer reads once it does: the bodies' numbers, in delivery order."""
    got = []
    prefix = b"%s ok " % queue
    lines = conn.early
    while True:
        for line in lines:
            assert line.startswith(prefix), line
            got.append(int(line.split(b" ", 4)[4][:8]))
        if len(got) >= count:
            return got
        lines = conn.lines()


def queue_info(process, name):
    return fetch_json(process.ports["admin"], f"/api/queues/{name}")


def spill_files(tmp_path, name):
    folder = tmp_path / "var" / "spill" / name
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def test_backlog_pages_out_and_comes_back_in_order(tmp_path):
    """Scratch queue: past the window the backlog is on disk (admin shows it, segment
    files in TextQueue format exist), RSS stays bounded against a flood, a healthy
    consumer of another queue is served meanwhile, and all of it comes back in order. The
    bound holds however fast the disk is: pages waiting for it past `TOTAL` hold the
    publisher (test_a_slow_disk_holds_the_publisher)."""
    process = broker(tmp_path).start()
    try:
        port = process.ports["mqks"]
        stalled = consumer(port, b"stuck")
        healthy = consumer(port, b"fine")
        before = rss(process.process.pid)
        count = 40_000
        publisher = threading.Thread(target=publish, args=(port, b"stuck", count, 1000))
        publisher.start()
        publish(port, b"fine", 500)            # served while the flood goes on
        assert read_all(healthy, b"fine", 500) == list(range(500))
        publisher.join(120)
        info = queue_info(process, "stuck")
        assert info["depth"] == info["resident"] + info["paged_out"]
        assert info["paged_out"] > count // 2 and info["resident"] <= 2 * WINDOW, info
        files = spill_files(tmp_path, "stuck")
        assert files, "no spill segment"
        with open(tmp_path / "var" / "spill" / "stuck" / files[0], "rb") as f:
            assert f.read(64).startswith(b"#mqksbridge journal segment")
        grown = rss(process.process.pid) - before
        # 40 MB of bodies went in; with a 200-message window little of it is resident
        assert grown < 20 << 20, f"RSS grew by {grown} bytes"
        assert read_all(stalled, b"stuck", count) == list(range(count))
        info = queue_info(process, "stuck")
        assert info["depth"] == info["paged_out"] == 0
    finally:
        process.stop()


def test_kill_9_keeps_the_durable_backlog_and_drops_the_scratch_one(tmp_path):
    """A durable queue pages out to its journal (no spill file of its own) and comes back
    whole and in order after kill -9; a plain queue's spill files are removed at start
    and its backlog is not resurrected."""
    process = broker(tmp_path).start()
    count = 10_000
    try:
        port = process.ports["mqks"]
        # manual acks: what the socket buffers took before it stopped is unacked, and so
        # comes back after the kill with the rest, in order
        stalled = [consumer(port, b"kept", True), consumer(port, b"scratch", True)]
        publish(port, b"kept", count, 1000)
        publish(port, b"scratch", count, 1000)
        kept, scratch = queue_info(process, "kept"), queue_info(process, "scratch")
        assert kept["paged_out"] > 0 and scratch["paged_out"] > 0, (kept, scratch)
        assert kept["durable"] and not spill_files(tmp_path, "kept")
        assert spill_files(tmp_path, "scratch")
        process.process.kill()                  # SIGKILL
        process.process.wait(10)
        for conn in stalled:
            conn.close()
        process.start()
        assert not spill_files(tmp_path, "scratch"), "scratch spill files survived a restart"
        port = process.ports["mqks"]
        kept = queue_info(process, "kept")
        assert kept["depth"] == count and kept["paged_out"] > 0, kept
        conn = consumer(port, b"kept")
        assert read_all(conn, b"kept", count) == list(range(count))
        status, _, raw = fetch(process.ports["admin"], "/api/queues/scratch")
        assert status == 404 or json.loads(raw)["depth"] == 0, (status, raw)
    finally:
        process.stop()


def slow_disk(pid, delay_us=30_000):
    """Every pwrite64 of the broker (the spill's scratch writes) made `delay_us` slower: a
    real process tracer on the real syscalls. Skips where this machine forbids ptrace."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (make test installs it as root)")
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=pwrite64",
                               "-e", f"inject=pwrite64:delay_exit={delay_us}", "-p", str(pid)],
                              stderr=subprocess.PIPE)

    def traced():
        return all(_tracer_of(pid, t) == tracer.pid for t in os.listdir(f"/proc/{pid}/task"))
    try:
        wait_until(lambda: tracer.poll() is not None or traced(), 10, "strace to attach")
    except AssertionError:
        tracer.kill()
        raise
    if tracer.poll() is not None:
        pytest.skip(f"strace cannot attach here: {tracer.stderr.read().decode().strip()}")
    return tracer


def _tracer_of(pid, tid):
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


def test_a_slow_disk_holds_the_publisher(tmp_path):
    """A disk slower than the flood (each scratch write 30 ms late): the pages waiting for
    it pass `TOTAL`, the publisher is held at once (not half a second of reading later),
    RSS stays bounded, and every message comes back in order. (That the freed pages are
    then given back, malloc_trim, is test_spill_files' to show: how much glibc can give
    back depends on what else shares the heap.)"""
    process = broker(tmp_path).start()
    tracer = None
    try:
        port = process.ports["mqks"]
        stalled = consumer(port, b"stuck")
        before = rss(process.process.pid)
        tracer = slow_disk(process.process.pid)
        count = 40_000
        publish(port, b"stuck", count, 1000)
        grown = rss(process.process.pid) - before
        assert grown < 20 << 20, f"RSS grew by {grown} bytes against a slow disk"
        overview = fetch_json(process.ports["admin"], "/api/overview")
        memory = overview["memory"]
        assert memory["alarms"] >= 1 and memory["spill"]["written_bytes"] > 0, memory
        tracer.terminate()
        tracer.wait(10)
        tracer = None
        assert read_all(stalled, b"stuck", count) == list(range(count))
    finally:
        if tracer is not None:
            tracer.kill()
        process.stop()
