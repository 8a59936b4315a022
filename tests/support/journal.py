"""A core broker with durable queues on real files, in-process and deterministic.

The journal is the real one (bridge.journal: real files, real fdatasync); only where its
batches run differs: inline, when the test advances its task.Clock, instead of on the
worker thread. `restart()` is a crash: a new broker recovers from whatever the files
hold at that moment (pending, unwritten batches are lost, as in a kill -9).
"""
from twisted.internet import defer, task

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.clock import ReactorClock
from mqksbridge.bridge.journal import Durability
from mqksbridge.core import Broker, Client, Consumer, Message


class Taker(Consumer):
    """A test consumer: what it was handed is in `got`."""


def inline(work, batch):
    return defer.maybeDeferred(work, batch)


class Harness:
    def __init__(self, data_dir, settings=None, clock=None, recover=True, files=None):
        self.data_dir = str(data_dir)
        self.settings = {"queues": ["*"], **(settings or {})}
        self.clock = clock or task.Clock()
        if self.clock.seconds() == 0:
            self.clock.advance(1_700_000_000)
        self.broker = Broker(ReactorClock(self.clock))
        config = configuration.load(overrides={"data_dir": self.data_dir,
                                               "durability": self.settings})
        self.durability = Durability(config["durability"], self.data_dir, self.broker,
                                     self.clock, self.clock, run=inline, files=files)
        self.writer = self.durability.writer
        self.recovered = self.durability.recover() if recover else {}
        self.sent = 0

    def commit(self):
        """Run every pending batch (each turn of the clock starts the next one)."""
        while self.writer.pending or self.writer.in_flight is not None:
            self.clock.advance(0)

    def restart(self):
        """A crash: a fresh broker recovers from the files as they are now."""
        return Harness(self.data_dir, self.settings, self.clock)

    def queue(self, name="jobs"):
        return self.broker.queue(name)

    def publish(self, name="jobs", body=None, confirmed=None, **fields):
        """Put one message; `confirmed` (a list) gets its id once its record is on disk."""
        self.sent += 1
        mid = fields.pop("id", "m%d" % self.sent)
        message = Message(mid, fields.pop("subject", "s"),
                          (body if body is not None else b"body %d" % self.sent,),
                          created_at=fields.pop("created_at", self.clock.seconds()),
                          **fields)
        queue = self.queue(name)
        storage = self.broker.storage
        before = storage.appended
        queue.put_message(message)
        if confirmed is not None:
            if storage.appended != before:
                storage.when_stored(storage.appended, lambda: confirmed.append(mid))
            else:
                confirmed.append(mid)
        return message

    def consumer(self, name="jobs", manual_ack=True, client="c", door="test", **kwargs):
        """A consumer (of a client of `door`); what it receives is in `.got` (entries, in
        order)."""
        got = []
        consumer = Taker(client + str(len(self.broker.clients)), Client(client, door),
                         lambda c, entry: got.append(entry), manual_ack, **kwargs)
        consumer.got = got
        self.broker.add_consumer(self.queue(name), consumer)
        return consumer

    def ids(self, name="jobs"):
        """Ids of the messages a queue holds, in order (priority lane first)."""
        queue = self.broker.queues.get(name)
        if queue is None:
            return []
        return [e.message.id for e in (*queue.priority, *queue.entries)]

    def retries(self, name="jobs"):
        queue = self.broker.queues[name]
        return {e.message.id: e.retry for e in (*queue.priority, *queue.entries)}
