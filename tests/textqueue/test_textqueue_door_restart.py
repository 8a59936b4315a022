"""A real `twistd -n mqksbridge` killed (-9) in the middle of an inbox file, and started
again: no record already marked `=` is published again, every other one is, once, and a
record published twice (taken, not yet flipped at the kill) carries the same id."""
import os
import signal
import socket
import threading

from tests.support.process import BrokerProcess
from tests.support.waits import wait_until

N = 300_000
RECORD = b"-message %07d of a file killed mid-way\n"


class Consumer(threading.Thread):
    """An MQKS consumer of queue `jobs` on a raw socket: (index, message id) of every
    delivery, until the broker goes."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"c1 consume --confirm jobs\n")
        self.got = []
        self.ready = threading.Event()

    def run(self):
        buf = b""
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                break
            lines = (buf + data).split(b"\n")
            buf = lines.pop()
            for line in lines:
                if line == b"c1 ok ":
                    self.ready.set()
                    continue
                parts = line.split(b" ", 5)          # c1 ok MID PROPS message NNNNNNN ...
                self.got.append((int(parts[5][:7]), parts[2].decode()))


def marks(path):
    data = open(path, "rb").read()
    return [data[i * len(RECORD % 0)] for i in range(N)]


def test_a_broker_killed_mid_file_publishes_nothing_marked_again(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    staged = tmp_path / "staged.tq"
    staged.write_bytes(b"".join(RECORD % i for i in range(N)))
    path = inbox / "jobs.tq"
    size = len(RECORD % 0)

    broker = BrokerProcess(tmp_path, doors=("mqks",), args=["--inbox", str(inbox)]).start()
    first = Consumer(broker.ports["mqks"])
    first.start()
    assert first.ready.wait(10)
    os.rename(staged, path)
    fd = os.open(path, os.O_RDONLY)
    wait_until(lambda: os.pread(fd, 1, (N // 5) * size) == b"=",   # a fifth: kill it now
               60, "the broker to get a fifth of the way", step=0.001)
    broker.process.send_signal(signal.SIGKILL)
    broker.process.wait(10)
    os.close(fd)
    first.join(10)
    at_kill = marks(path)
    marked = {i for i, c in enumerate(at_kill) if c == ord("=")}
    assert N // 5 <= len(marked) < N, len(marked)
    assert all(c in b"=-" for c in at_kill)

    broker = BrokerProcess(tmp_path, doors=("mqks",), args=["--inbox", str(inbox)]).start()
    try:
        second = Consumer(broker.ports["mqks"])
        second.start()
        assert second.ready.wait(10)
        wait_until(lambda: len(second.got) >= N - len(marked), 120,
                   f"the {N - len(marked)} unmarked records", step=0.01,
                   detail=lambda: f"{len(second.got)} came")
        wait_until(lambda: set(marks(path)) == {ord("=")}, 30, "every record flipped",
                   step=0.01)
    finally:
        broker.stop()
    second.join(10)
    again = [i for i, _ in second.got]
    assert sorted(again) == sorted(set(range(N)) - marked)       # each unmarked one, once
    ids = dict(first.got)
    twice = [(i, mid) for i, mid in second.got if i in ids]       # taken, not flipped
    assert all(ids[i] == mid for i, mid in twice)                 # ...the same id again
    assert all(mid == f"{second.got[0][1].rsplit('-', 1)[0]}-{i * size}"
               for i, mid in second.got)
