"""CPU time per message of the MQKS publish -> deliver path, in process on fake transports
(no sockets, no load generator: what is left is the broker's own work, steady on a busy
machine). Prints the median ns/message of REPEATS runs of 100,000 messages.

    python bench/mqks_cpu.py REPEATS
    PYTHONPATH=/other/checkout/src python bench/mqks_cpu.py REPEATS   (another tree)

Interleave runs of two trees to compare them (the admin counters were measured so).
"""
import json
import sys
import time

from twisted.internet import reactor
from twisted.internet.testing import StringTransport

from mqksbridge.bridge import config
from mqksbridge.bridge.mqks.door import MqksConnection
from mqksbridge.bridge.service import build


def main(repeats):
    overrides = {name: {"listen": []} for name, section in config.DEFAULTS.items()
                 if isinstance(section, dict) and "listen" in section}
    _, _, doors, _ = build(config.load(overrides=overrides), reactor)
    door = doors["mqks"]

    def connection():
        conn, transport = MqksConnection(door), StringTransport()
        conn.makeConnection(transport)
        return conn, transport
    consumer, delivered = connection()
    publisher, _ = connection()
    consumer.dataReceived(b"c1 consume q ev\n")
    lines = b"".join(b"m%d publish ev 0-%s\n" % (i, b"x" * 36) for i in range(2000))
    chunks = [lines[i:i + 65536] for i in range(0, len(lines), 65536)]
    per_message = []
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(50):
            for chunk in chunks:
                publisher.dataReceived(chunk)
            door.scheduler.flush()
            delivered.clear()
        per_message.append((time.process_time() - started) / 100_000 * 1e9)
    print(json.dumps(round(sorted(per_message)[len(per_message) // 2], 1)))


if __name__ == "__main__":
    main(int(sys.argv[1]))
