"""CPU time per message of the MQKS publish -> deliver path, in process on fake transports
(no sockets, no load generator: what is left is the broker's own work, steady under a busy
machine). Prints the median ns/message of REPEATS runs of 100,000 messages.

    python bench/mqks_cpu.py REPEATS
    PYTHONPATH=/other/checkout/src python bench/mqks_cpu.py REPEATS   (another tree)

Interleave runs of two trees to compare them (the admin counters were measured so).
"""
import sys, time, json
from twisted.internet import reactor
from twisted.internet.testing import StringTransport
from mqksbridge.bridge import config
from mqksbridge.bridge.service import build
over = {d: {"listen": []} for d in ("mqks", "malamute", "twino")}
if "admin" in config.DEFAULTS: over["admin"] = {"listen": []}
top, broker, doors, _ = build(config.load(overrides=over), reactor)
door = doors["mqks"]
from mqksbridge.bridge.mqks.door import MqksConnection
def conn():
    c = MqksConnection(door); t = StringTransport(); c.makeConnection(t); return c, t
cons, ct = conn(); pub, pt = conn()
cons.dataReceived(b"c1 consume q ev\n")
sched = door.scheduler
lines = b"".join(b"m%d publish ev 0-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n" % i for i in range(2000))
chunks = [lines[i:i+65536] for i in range(0, len(lines), 65536)]
per_message = []
for rep in range(int(sys.argv[1])):
    t0 = time.process_time()
    for _ in range(50):
        for ch in chunks: pub.dataReceived(ch)
        sched.flush(); ct.clear()
    per_message.append((time.process_time() - t0) / 100000 * 1e9)
print(json.dumps(round(sorted(per_message)[len(per_message) // 2], 1)))
