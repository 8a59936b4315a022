"""The real `twistd -n mqksbridge` process, spoken to with plain blocking sockets.

This proves the packaging glue end to end: the plugin is found from any working
directory, the options reach the service tree, the MQKS door answers byte-exact lines,
and SIGTERM stops the process cleanly.
"""
import os
import signal
import socket
import subprocess

import pytest

from tests.support.process import TWISTD, BrokerProcess, door_args


class Lines:
    """A blocking line reader/writer over one TCP connection."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""

    def send(self, *lines):
        self.sock.sendall(b"".join(line.encode() + b"\n" for line in lines))

    def line(self):
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the broker")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def request(self, line):
        self.send(line)
        return self.line()

    def close(self):
        self.sock.close()


@pytest.fixture
def broker_process(tmp_path):
    """A running `twistd -n mqksbridge` with only the MQKS door; stopped afterwards."""
    broker = BrokerProcess(tmp_path, doors=("mqks",))
    try:
        broker.start()
        yield broker.process, broker.ports["mqks"], broker.log_path
    finally:
        broker.stop()


def test_twistd_serves_mqks_and_stops_cleanly(broker_process):
    process, port, log_path = broker_process
    c, p = Lines(port), Lines(port)
    try:
        assert c.request("c1 consume --confirm q1 e1 e2") == "c1 ok "
        p.send("m1 publish e1 hello world", "m2 publish e3 nobody", "m3 publish e2  x")
        assert c.line() == "c1 ok m1 event=e1 hello world"
        assert c.line() == "c1 ok m3 event=e2  x"
        assert p.request("p1 ping x y   ") == "p1 ok x y"
        assert p.request("v1 _eval len(state.queues)") == "v1 ok 1"
        assert p.request("v2 _eval --worker=0 WORKERS") == "v2 ok 1"
        assert p.request("v3 _eval ' '.join(sorted(state.events_by_queues['q1']))") \
            == "v3 ok e1 e2"
        client = c.request("v4 _eval request['client']")
        assert client.startswith("v4 ok 127.0.0.1:") and len(client.rsplit(".", 1)[1]) == 4
        error = p.request("x blabla 123").split(" ")
        assert error[:2] == ["x", "error"] and len(error[2]) == 24
        assert c.request("d1 delete_consumer --confirm c1") == "d1 ok "
        assert c.request("d2 delete_queue --confirm q1") == "d2 ok "
        assert p.request("v5 _eval len(state.queues)") == "v5 ok 0"
    finally:
        c.close()
        p.close()

    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(20)
    except subprocess.TimeoutExpired:
        raise AssertionError("twistd did not stop on SIGTERM")
    log = open(log_path, errors="replace").read()
    # Our SIGTERM handler runs the ordered shutdown and exits 0 (Twisted's would re-raise).
    assert code == 0, log
    assert "Traceback" not in log, log
    assert "Main loop terminated." in log and "Server Shut Down." in log, log
    assert not os.path.exists(os.path.join(os.path.dirname(str(log_path)), "twistd.pid"))


@pytest.mark.parametrize("door", ["mqks", "malamute", "twino"])
def test_a_taken_address_fails_start_up_with_status_1(tmp_path, door):
    """A supervisor must see a broker that cannot listen as failed, not as running: the
    address is named in the log, twistd exits 1 and leaves no pid file behind."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [TWISTD, "-n", "mqksbridge", "--data", str(tmp_path / "var")]
        for name in ("mqks", "malamute", "twino", "admin"):
            args += door_args(name, port) if name == door else [f"--{name}", "none"]
        done = subprocess.run(args, cwd=tmp_path, capture_output=True, timeout=60)
    log = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 1, log
    assert "cannot listen on" in log and "Address already in use" in log, log
    assert not (tmp_path / "twistd.pid").exists()
