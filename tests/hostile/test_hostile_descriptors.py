"""File descriptors and connection counts, over real sockets against a real `twistd` in a
subprocess. Unguarded, 1,100 idle MQKS sockets under the usual soft limit of
1,024 took every door off the air (Twisted accepted and closed each new connection, four
log lines apiece, at every connect), MQKS and Twino listened with Twisted's backlog of 50.
"""
import os
import resource
import select
import signal
import socket
import time

import pytest

from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.bridge.clients.mqks import MqksClient
from mqksbridge.protocols.twino.codec import PROTOCOL, FrameDecoder, ResultCode
from mqksbridge.protocols.zmtp import codec as zmtp
from tests.support.admin import fetch_json
from tests.support.process import BrokerProcess
from tests.support.waits import wait_until

DOORS = ("mqks", "malamute", "twino", "admin")
WAIT = 10.0                          # seconds an expected condition may take at most


def connect_all(port, count):
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        s.setblocking(False)
        socks.append(s)
    return socks


def hung_up(sock):
    """Whether the broker closed this socket (EOF or reset) - without blocking."""
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def read_until_closed(sock):
    sock.setblocking(True)
    sock.settimeout(WAIT)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


@pytest.fixture
def processes(tmp_path):
    started = []

    def start(args=(), nofile=None):
        process = BrokerProcess(tmp_path / str(len(started)), doors=DOORS, args=args,
                                nofile=nofile)
        os.makedirs(process.workdir, exist_ok=True)
        started.append(process.start())
        return process
    yield start
    for process in started:
        process.stop()


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one(processes):
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)
    broker = processes(nofile=(256, hard))
    with open(f"/proc/{broker.process.pid}/limits") as f:
        [line] = [line for line in f if line.startswith("Max open files")]
    soft_now, hard_now = line.split()[3:5]
    assert (int(soft_now), int(hard_now)) == (hard, hard), line


def test_out_of_descriptors_the_listener_pauses_and_resumes(processes):
    """128 descriptors, 200 idle MQKS sockets: the ones the broker cannot accept wait in the
    backlog (none is accepted only to be closed), established clients are served, the
    log gets a few lines, and once sockets close the waiting ones and new ones get in."""
    broker = processes(nofile=(128, 128))
    healthy = MqksClient(port=broker.ports["mqks"], timeout=WAIT)
    healthy.ping()
    log_before = broker.log().count("\n")
    flood = connect_all(broker.ports["mqks"], 200)
    try:
        wait_until(lambda: "cannot accept" in broker.log() or "EMFILE" in broker.log(),
                   WAIT, "the broker to run out of descriptors", step=0.02)
        assert "cannot accept (EMFILE" in broker.log(), broker.log()[-2000:]
        started = time.monotonic()
        for _ in range(5):
            healthy.ping()
        assert time.monotonic() - started < 2.0
        assert not any(hung_up(s) for s in flood)            # nobody accepted and closed
        lines = broker.log().count("\n") - log_before
        assert lines < 10, broker.log()[-3000:]
        for s in flood[:150]:
            s.close()
        wait_until(lambda: "accepting again" in broker.log(),
                   WAIT, "accepting to resume", step=0.02)
        assert not any(hung_up(s) for s in flood[150:])     # the waiting ones got in
        late = MqksClient(port=broker.ports["mqks"], timeout=WAIT)
        late.ping()
        late.close()
        with twino.connect(port=broker.ports["twino"], timeout=WAIT) as client:
            client.ping()
        mlm = MalamuteClient(f"tcp://127.0.0.1:{broker.ports['malamute']}", "late",
                             timeout=WAIT)
        mlm.connect()
        mlm.close()
        assert broker.log().count("\n") - log_before < 15, broker.log()[-3000:]
    finally:
        for s in flood:
            s.close()
        healthy.close()


def test_each_door_refuses_past_its_connection_limit_in_its_own_words(processes):
    broker = processes(args=["--set", "mqks.max_connections=5",
                             "--set", "malamute.max_connections=2",
                             "--set", "twino.max_connections=2"])
    ports = broker.ports
    wait_until(lambda: not any(door["connections"] for door in
                               fetch_json(ports["admin"], "/api/overview")["doors"]),
               WAIT, "the start-up probes to be gone", step=0.02)
    held = connect_all(ports["mqks"], 5) + connect_all(ports["malamute"], 2) \
        + connect_all(ports["twino"], 2)
    try:
        wait_until(lambda: all(door["connections"] == want for door, want in zip(
            fetch_json(ports["admin"], "/api/overview")["doors"], (5, 2, 2, 0))),
                   WAIT, "the broker to hold every connection", step=0.02)
        [mqks] = connect_all(ports["mqks"], 1)
        line = read_until_closed(mqks)
        assert line.startswith(b"None error ") and line.endswith(b"\n"), line
        [zmq] = connect_all(ports["malamute"], 1)
        data = read_until_closed(zmq)
        assert data[:zmtp.GREETING_SIZE] == zmtp.GREETING
        assert data[zmtp.GREETING_SIZE:] == zmtp.error("too many connections")
        with pytest.raises(twino.TwinoRefused) as refused:
            twino.connect(port=ports["twino"], timeout=WAIT)
        assert refused.value.code == ResultCode.BUSY
        [raw] = connect_all(ports["twino"], 1)
        data = read_until_closed(raw)
        assert data[:8] == PROTOCOL
        [frame] = FrameDecoder().feed(data[8:])
        assert frame.content_type == ResultCode.BUSY
        overview = fetch_json(ports["admin"], "/api/overview")
        assert [(d["name"], d["refused"]) for d in overview["doors"]][:3] == \
            [("mqks", 1), ("malamute", 1), ("twino", 2)]
        for sock in held[:1]:
            sock.close()
        wait_until(lambda: fetch_json(ports["admin"], "/api/overview")["doors"][0]
                   ["connections"] == 4, WAIT, "a slot to free up", step=0.02)
        client = MqksClient(port=ports["mqks"], timeout=WAIT)
        client.ping()
        client.close()
    finally:
        for sock in held:
            sock.close()


def test_a_crowd_connecting_at_once_is_held_in_the_backlog(processes):
    """With the broker stopped (SIGSTOP), the kernel completes connects up to the listen
    backlog; past it, SYNs are dropped and clients wait out a 1 s, 3 s... retry."""
    broker = processes()
    broker.process.send_signal(signal.SIGSTOP)
    try:
        for door in ("mqks", "twino", "malamute"):
            socks = []
            try:
                for _ in range(300):
                    s = socket.socket()
                    s.setblocking(False)
                    s.connect_ex(("127.0.0.1", broker.ports[door]))
                    socks.append(s)
                pending = list(socks)

                def connected():
                    _, writable, _ = select.select([], pending, [], 0.05)
                    pending[:] = [s for s in pending if s not in writable]
                    return not pending
                wait_until(connected, 0.5, f"{door}: the 300 connects", step=0,
                           detail=lambda: f"{len(pending)} still waiting")
            finally:
                for s in socks:
                    s.close()
    finally:
        broker.process.send_signal(signal.SIGCONT)
