"""CPU time per message of durable MQKS publish --confirm -> auto-ack delivery, in process
on fake transports, against the in-memory queue in the same process (the journal's own
cost on the reactor thread, steady on a busy machine). The writer's batches run inline
(no worker thread) at the end of each read's reactor turn, as a callLater(0) would.

    python -m bench.durable_cpu [--repeats 7] [--modes memory,never,always] [--profile F]

Prints, per mode, the median ns/message of REPEATS runs of 100,000 messages (4 publisher
connections, 500 lines per read), and each mode's difference from `memory`.
"""
import argparse
import json
import tempfile
import time

from twisted.internet import defer, reactor, task
from twisted.internet.testing import StringTransport

from mqksbridge.bridge import config
from mqksbridge.bridge.mqks.door import MqksConnection
from mqksbridge.bridge.service import build

PUBLISHERS = 4
PER_READ = 500


def setup(mode, data_dir):
    overrides = {name: {"listen": []} for name, section in config.DEFAULTS.items()
                 if isinstance(section, dict) and "listen" in section}
    overrides["data_dir"] = data_dir
    if mode != "memory":
        overrides["durability"] = {"queues": ["q"], "fsync": mode}
    top, _, doors, _ = build(config.load(overrides=overrides), reactor)
    clock = task.Clock()
    durability = getattr(top, "durability", None)
    if durability is not None:
        writer = durability.writer
        writer.reactor = clock          # commits run when the "turn" ends (clock.advance)
        durability.store.turn.reactor = clock
        clock.seconds = reactor.seconds
        writer.run = lambda work, *args: defer.maybeDeferred(work, *args)
    return doors["mqks"], clock


def run(mode, repeats, n=100_000, profile=None):
    door, clock = setup(mode, tempfile.mkdtemp(prefix="durable-cpu-"))

    def connection():
        conn, transport = MqksConnection(door), StringTransport()
        conn.makeConnection(transport)
        return conn, transport
    consumer, delivered = connection()
    consumer.dataReceived(b"c1 consume q ev\n")
    pubs = [connection() for _ in range(PUBLISHERS)]
    body = b"x" * 40
    reads = [[b"".join(b"p%d.%d publish --confirm ev %s\n" % (k, i + j, body)
                       for j in range(PER_READ))
              for i in range(0, n // PUBLISHERS, PER_READ)] for k in range(PUBLISHERS)]
    per_message = []
    for r in range(repeats):
        if profile is not None and r == repeats - 1:
            profile.enable()
        started = time.process_time()
        for step in range(len(reads[0])):
            for (conn, _), chunks in zip(pubs, reads):
                conn.dataReceived(chunks[step])
            door.scheduler.flush()
            clock.advance(0)
            door.scheduler.flush()
            delivered.clear()
            for _, transport in pubs:
                transport.clear()
        per_message.append((time.process_time() - started) / n * 1e9)
        if profile is not None and r == repeats - 1:
            profile.disable()
    return sorted(per_message)[len(per_message) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--modes", default="memory,never,always")
    parser.add_argument("--profile", default=None, help="cProfile the last run of the "
                        "last mode into this file (the figures then mean nothing)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    found = {}
    for mode in modes:
        profile = None
        if args.profile and mode == modes[-1]:
            import cProfile
            profile = cProfile.Profile()
        found[mode] = round(run(mode, args.repeats, profile=profile), 1)
        if profile is not None:
            profile.dump_stats(args.profile)
    if "memory" in found:
        for mode in modes:
            if mode != "memory":
                found[mode + "-memory"] = round(found[mode] - found["memory"], 1)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
