"""The core's message path in one process: no sockets, no doors, best of N runs.

    python bench/core_bench.py [--runs 7] [--n 200000]

What the doors' hot paths cost in the core itself: an MQKS-style publish through the
stream to a queue with one auto-ack consumer, Twino-style push-all to two consumers
(auto-ack, and manual ack with each consumer acking), and round-robin with a producer
observer and a manual ack. For A/B runs against another tree, put its `src/` first on
PYTHONPATH (`PYTHONPATH=/other/tree/src python bench/core_bench.py`); the script adapts
to that tree's signatures (the publisher argument exists only in newer trees). Times are
the process's CPU time, so other processes on a busy machine disturb them less.
"""
import argparse
import inspect
import time

from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.core.queue import PUSH_ALL, Queue

NEW = len(inspect.signature(Queue.put_message).parameters) > 3   # the publisher argument


def _noop(consumer, entry):
    pass


def _observer(*args):
    pass


def _setup(mode, consumers, manual):
    broker = Broker(FakeClock())
    queue = broker.queue("q", mode=mode)
    made = []
    for i in range(consumers):
        client = Client(f"c{i}", "bench")
        made.append(broker.add_consumer(queue, Consumer(f"k{i}", client, _noop, manual)))
    return broker, queue, made, Client("pub", "bench")


def stream_publish(n):
    broker, queue, _, pub = _setup("round-robin", 1, False)
    stream = broker.stream("mqks")
    stream.set_bindings("q", ["ev"])
    publish = stream.publish
    messages = [Message(str(i), "ev", (b"x" * 40,)) for i in range(n)]
    start = time.process_time()
    if NEW:
        for m in messages:
            publish(m, pub)
    else:
        for m in messages:
            publish(m)
    return time.process_time() - start


def push_all(n, manual):
    broker, queue, consumers, pub = _setup(PUSH_ALL, 2, manual)
    put = queue.put_message
    messages = [Message(str(i), "s", (b"x" * 40,)) for i in range(n)]
    a, b = consumers
    start = time.process_time()
    if NEW:
        for m in messages:
            put(m, None, pub)
            if manual:
                a.ack(m.id)
                b.ack(m.id)
    else:
        for m in messages:
            put(m, None)
            if manual:
                a.ack(m.id)
                b.ack(m.id)
    return time.process_time() - start


def round_robin_observed(n):
    broker, queue, (c,), pub = _setup("round-robin", 1, True)
    put = queue.put_message
    messages = [Message(str(i), "s", (b"x" * 40,)) for i in range(n)]
    ack = c.ack
    start = time.process_time()
    if NEW:
        for m in messages:
            put(m, _observer, pub)
            ack(m.id)
    else:
        for m in messages:
            put(m, _observer)
            ack(m.id)
    return time.process_time() - start


CASES = {
    "stream-publish-1-auto": stream_publish,
    "push-all-2-auto": lambda n: push_all(n, False),
    "push-all-2-manual-ack": lambda n: push_all(n, True),
    "round-robin-observed-ack": round_robin_observed,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    for name, case in CASES.items():
        if args.only and args.only not in name:
            continue
        best = min(case(args.n) for _ in range(args.runs))
        print(f"{name:28s} {best / args.n * 1e9:8.1f} ns/message")


if __name__ == "__main__":
    main()
