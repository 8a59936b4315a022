"""The engine contract's fixture: each engine under test, behind one small harness.

An engine joins the contract by adding its factory to ENGINES: a function of a data
directory returning an object with `engine` (the IEngine), `advance(seconds)` (move the
engine's time and run its timers and pending disk work), `commit()` (finish pending
durability work: the journal's writes and fsyncs here, a cluster's replication there) and
`restart()` (a new engine on the same data, as after a crash) and
`durable_prefix` (queues whose names start with it are durable). Real parts only: the
embedded engine writes and fsyncs real journal files.
"""
import pytest
from twisted.internet import defer, task

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.clock import ReactorClock
from mqksbridge.bridge.engine import EmbeddedEngine
from mqksbridge.bridge.journal import Durability

DURABLE = "durable."


def inline(work, batch):
    """The journal's batches run when the test's clock turns, not on its worker thread."""
    return defer.maybeDeferred(work, batch)


class Embedded:
    durable_prefix = DURABLE

    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.clock = task.Clock()
        self.clock.advance(1_700_000_000)
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
        return Embedded(self.data_dir)

    def advance(self, seconds):
        self.clock.advance(seconds)
        self.engine.tick()


ENGINES = {"embedded": Embedded}


@pytest.fixture(params=sorted(ENGINES))
def under_test(request, tmp_path):
    return ENGINES[request.param](tmp_path)
