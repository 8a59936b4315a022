"""The engine contract's fixture: each engine under test, behind one small harness.

An engine joins the contract by adding its factory to ENGINES: a function of the test's
request and a data directory returning an object with

- `engine` (the IEngine) and `durable_prefix` (queues whose names start with it are
  durable);
- `advance(seconds)` (move the engine's time and run its timers and pending disk work);
- `commit()` (finish pending durability work: the journal's writes and fsyncs here) and
  `restart()` (a new engine on the same data, as after a crash), for the state machine;
- the same as coroutines for the contract's tests, which also run on a networked engine:
  `start()`, `committed()` (every confirmation in), `restarted()`, `close()`, and
  `settle(condition, what)`: wait, bounded, until `condition()` holds once the engine's
  work in flight is done. An engine that answers in the call (the embedded one) waits
  for nothing: the condition must hold at once, so its tests are as strict as before;
- `at_once`: the engine answers in the call (a publish to a queue that is not durable is
  confirmed, a full queue's refusal known, a delivery made); the state machine drives
  such engines.

Real parts only: the embedded engine writes and fsyncs real journal files; the RabbitMQ
engine talks to a real RabbitMQ node (tests/support/rabbitmq.py).
"""
import uuid

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task, threads

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.clock import ReactorClock
from mqksbridge.bridge.engine import EmbeddedEngine
from mqksbridge.bridge.engine.rabbitmq import RabbitMQEngine
from mqksbridge.bridge.journal import Durability
from tests.support.rabbitmq import _rabbitmq_node_session, rabbitmq_node  # noqa: F401 (fixtures)
from tests.support.waits import TimedOut, until

DURABLE = "durable."
START = 1_700_000_000


def inline(work, batch):
    """The journal's batches run when the test's clock turns, not on its worker thread."""
    return defer.maybeDeferred(work, batch)


class Embedded:
    durable_prefix = DURABLE
    at_once = True

    def __init__(self, request, data_dir):
        self.data_dir = data_dir
        self.clock = task.Clock()
        self.clock.advance(START)
        self.engine = EmbeddedEngine(ReactorClock(self.clock))
        config = configuration.load(overrides={
            "data_dir": str(data_dir), "durability": {"queues": [DURABLE + "*"]}})
        self.durability = Durability(config["durability"], str(data_dir), self.engine,
                                     self.clock, self.clock, run=inline)
        self.durability.recover()

    def commit(self):
        writer = self.durability.writer
        while writer.pending or writer.in_flight is not None:
            self.clock.advance(0)

    def restart(self):
        """A new engine on the same directory, as after a crash (pending work is lost)."""
        return Embedded(None, self.data_dir)

    def advance(self, seconds):
        self.clock.advance(seconds)
        self.engine.tick()

    async def start(self):
        return self

    async def committed(self):
        self.commit()

    async def restarted(self):
        return self.restart()

    async def settle(self, condition, what="the condition"):
        assert condition(), what

    async def close(self):
        pass

    # -- the state machine's: it answers in the call, so nothing waits
    def run(self, fn, *args):
        return fn(*args)

    def steady(self, condition, what="the condition"):
        """Nothing to wait for: the checks that follow judge the state as it is."""

    def close_now(self):
        pass


class RabbitMQ:
    """A gateway's engine on a real RabbitMQ node. Every queue is a quorum queue, durable
    (`durable_prefix` is empty) and confirmed by RabbitMQ; each test has names of its own
    (a prefix) and deletes its queues at the end. Its time is a task.Clock (ack timeouts
    are the gateway's), its I/O the reactor's."""

    durable_prefix = ""
    at_once = False
    TIMEOUT = 30.0

    def __init__(self, request, data_dir, urls=None, prefix=None):
        self.urls = urls or request.getfixturevalue("rabbitmq_node").urls()
        self.prefix = prefix or f"contract-{uuid.uuid4().hex[:8]}."
        self.clock = task.Clock()
        self.clock.advance(START)
        self.engine = RabbitMQEngine(ReactorClock(self.clock), self.urls, node="test",
                                     prefix=self.prefix, replicas=1, reactor=reactor)

    async def start(self):
        await defer.ensureDeferred(_bounded(self.engine.ready(), self.TIMEOUT,
                                            "the engine's connection"))
        return self

    def advance(self, seconds):
        self.clock.advance(seconds)
        self.engine.tick()

    async def committed(self):
        await until(lambda: not self.engine.unconfirmed(), self.TIMEOUT,
                    "RabbitMQ's publisher confirms")

    async def settle(self, condition, what="the condition"):
        """Until `condition()` holds once the engine is idle (every confirm in, no
        basic.consume or cancel in flight) and past its barrier (lengths read again,
        deliveries in)."""
        deadline = reactor.seconds() + self.TIMEOUT
        while True:
            await until(lambda: not self.engine.busy(), self.TIMEOUT,
                        "the engine's confirms, consumes and cancels")
            await self.engine.barrier()
            if condition():
                return
            if reactor.seconds() > deadline:
                raise TimedOut(f"timed out after {self.TIMEOUT:g} s waiting for {what}")
            await task.deferLater(reactor, 0.01, lambda: None)

    async def restarted(self):
        """The gateway dies (its connection goes: RabbitMQ hands back what it held) and a
        new one connects to the same cluster."""
        await self.engine.stop()
        self.successor = RabbitMQ(None, None, self.urls, self.prefix)
        return await self.successor.start()

    async def close(self):
        """Delete what the test declared (through the last engine of its restarts), then
        disconnect."""
        last = self
        while getattr(last, "successor", None) is not None:
            await last.engine.stop()
            last = last.successor
        names = {q.amqp_name for h in (self, last) for q in h.engine.queues.values()}
        declarer = last.engine._declarer
        if declarer is not None:
            for name in sorted(names):
                await declarer.queue_delete(name)
        await last.engine.stop()


class Threaded:
    """The RabbitMQ harness driven from a thread of its own (the state machine runs its
    steps there, the reactor runs the engine): each call runs on the reactor thread and
    returns its result; `steady(condition)` waits as `settle` does."""

    durable_prefix = RabbitMQ.durable_prefix
    at_once = False

    def __init__(self, harness):
        self.harness = harness

    @classmethod
    def start(cls, urls, prefix=None):
        return cls(_blocking(RabbitMQ(None, None, urls, prefix).start))

    @property
    def engine(self):
        return self.harness.engine

    def run(self, fn, *args):
        return threads.blockingCallFromThread(reactor, fn, *args)

    def steady(self, condition, what="the condition"):
        _blocking(self.harness.settle, condition, what)

    def advance(self, seconds):
        self.run(self.harness.advance, seconds)

    def commit(self):
        _blocking(self.harness.committed)

    def restart(self):
        return Threaded(_blocking(self.harness.restarted))

    def close_now(self):
        _blocking(self.harness.close)


def _blocking(coroutine_function, *args):
    """Run a coroutine on the reactor thread from another thread; its result."""
    return threads.blockingCallFromThread(
        reactor, lambda: defer.ensureDeferred(coroutine_function(*args)))


def _bounded(deferred, timeout, what):
    """`deferred`, failed with TimedOut after `timeout` seconds."""
    def late(failure, seconds):
        failure.trap(defer.TimeoutError)
        raise TimedOut(f"timed out after {seconds:g} s waiting for {what}")
    return deferred.addTimeout(timeout, reactor).addErrback(late, timeout)


ENGINES = {"embedded": Embedded, "rabbitmq": RabbitMQ}


@pytest_twisted.async_yield_fixture(params=sorted(ENGINES))
async def started(request, tmp_path):
    """The engine, started; closed at the end."""
    harness = await ENGINES[request.param](request, tmp_path).start()
    yield harness
    await harness.close()
