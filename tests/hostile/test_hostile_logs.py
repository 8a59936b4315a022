"""A client that sends 100k bad lines must not write 300 bytes of log for each (it once
did): warnings are rate-limited per connection (log.warn_burst per log.warn_interval), and
the ones held back are counted in one line."""
import re
import socket

from tests.support.waits import wait_until

BAD = 2000


def test_a_flood_of_bad_requests_writes_a_bounded_log(broker):
    log_before = broker.process.log()
    bystander = broker.mqks()
    with socket.create_connection(("127.0.0.1", broker.process.ports["mqks"])) as attacker:
        attacker.sendall(b"".join(b"x%d no_such_action 1\n" % i for i in range(BAD))
                         + b"last ping here\n")
        received = b""
        while not received.endswith(b"last ok here\n"):      # every line was answered
            chunk = attacker.recv(1 << 16)
            assert chunk, received[-200:]
            received += chunk
        assert received.count(b" error ") == BAD
    bystander.ping()
    wait_until(lambda: "similar warnings not logged" in broker.process.log(),   # at close
               10, "the line that counts the warnings not logged", step=0,
               detail=lambda: broker.process.log()[-2000:], between=bystander.ping)
    added = broker.process.log()[len(log_before):]
    assert added.count("mqks error") == 10, added[-2000:]
    assert len(added) < 5000, len(added)
    [count] = re.findall(r"(\d+) similar warnings not logged", added)
    assert int(count) == BAD - 10


GARBAGE_CONNECTIONS = 40        # per door, each with its own fresh per-connection budget
DOOR_BUDGET = 20                # log.door_warn_burst for this broker


def _garbage(port, data):
    """One connection that sends garbage and reads until the broker is done with it."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        received = b""
        while received.count(b" error ") < 3:
            chunk = s.recv(1 << 16)
            if not chunk:                          # Twino and ZMTP hang up on garbage
                return
            received += chunk


def test_reconnecting_garbage_clients_share_their_doors_log_budget(tmp_path):
    """Soak finding: ten garbage connections a second per door wrote 47 KB of log a second
    (4 GB a day), each connection under its own budget. Every door's lines about its
    clients now share `log.door_warn_burst` per `log.warn_interval`."""
    from tests.support.process import BrokerProcess
    process = BrokerProcess(tmp_path, doors=("mqks", "twino", "malamute"),
                            args=[f"--set=log.door_warn_burst={DOOR_BUDGET}"]).start()
    try:
        bad = {"mqks": b"x1 nonsense 1\nx2 nonsense 2\nx3 nonsense 3\n",
               "twino": b"GET / HTTP/1.1\r\n\r\n" + b"\xff" * 64,
               "malamute": b"\x01" * 64}
        for _ in range(GARBAGE_CONNECTIONS):
            for door, data in bad.items():
                _garbage(process.ports[door], data)
        lines = {"mqks": "mqks error", "twino": "twino connection",
                 "malamute": "zmtp connection refused"}

        def counts():
            log = process.log()
            return {door: log.count(text) for door, text in lines.items()}
        # every line the budget lets through is written before its connection's reply
        wait_until(lambda: all(n >= DOOR_BUDGET for n in counts().values()),
                   10, "the door budgets' lines", step=0.02)
        assert counts() == {door: DOOR_BUDGET for door in lines}, counts()
    finally:
        process.stop()
