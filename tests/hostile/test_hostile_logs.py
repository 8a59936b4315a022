"""Issue 12 item 6: a client that sends 100k bad lines wrote 300 bytes of log for each.
Warnings are now rate-limited per connection (log.warn_burst per log.warn_interval), and
the ones held back are counted in one line."""
import re
import socket
import time

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
    deadline = time.monotonic() + 10
    while "similar warnings not logged" not in broker.process.log():   # written at close
        assert time.monotonic() < deadline, broker.process.log()[-2000:]
        bystander.ping()
    added = broker.process.log()[len(log_before):]
    assert added.count("mqks error") == 10, added[-2000:]
    assert len(added) < 5000, len(added)
    [count] = re.findall(r"(\d+) similar warnings not logged", added)
    assert int(count) == BAD - 10
