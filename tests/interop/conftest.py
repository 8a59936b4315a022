"""The real `twistd -n mqksbridge` with every door, one per test module, and a `net` per test
that hands out door adapters and closes every client it made."""
import json

import pytest

from tests.interop.sides import Malamute, Mqks, TextQueue, Twino
from tests.support.process import BrokerProcess

MAX_LINE = 4 << 20          # MQKS request lines up to 4 MiB: a 1 MiB body fits


class Net:
    def __init__(self, ports, inbox=None, outbox=None):
        self.ports = ports
        self.inbox, self.outbox = inbox, outbox
        self.endpoint = f"tcp://127.0.0.1:{ports['malamute']}"
        self._closers = []

    def track(self, client):
        self._closers.append(client.close)
        return client

    def on_close(self, action):
        self._closers.append(action)

    def side(self, door):
        return SIDES[door](self)

    def close(self):
        for action in reversed(self._closers):
            try:
                action()
            except OSError:
                pass


SIDES = {"malamute": Malamute, "mqks": Mqks, "textqueue": TextQueue, "twino": Twino}


def spool_broker(workdir, settings, doors=("mqks", "malamute", "twino"), args=()):
    """A started broker process whose TextQueue door reads an inbox directory and an
    outbox directory (`process.inbox`, `process.outbox`), with `settings` (TOML sections)
    in its configuration file."""
    inbox, outbox = str(workdir / "inbox"), str(workdir / "outbox")
    config = workdir / "broker.toml"
    config.write_text(settings + "[textqueue]\n"
                      f"inbox = {json.dumps([inbox])}\noutbox_dirs = {json.dumps([outbox])}\n"
                      "poll_interval = 0.1\n")
    process = BrokerProcess(workdir, doors=doors,
                            args=["--config", str(config), *args]).start()
    process.inbox, process.outbox = inbox, outbox
    return process


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """The broker process sweeps every 0.1 s, so a test of an ack timeout waits for the
    nack about as long as the timeout it set (the process runs on the wall clock)."""
    process = spool_broker(tmp_path_factory.mktemp("interop"),
                           "[broker]\nsweep_interval = 0.1\n",
                           args=["--mqks-max-line", str(MAX_LINE)])
    yield process
    process.stop()


@pytest.fixture
def net(broker):
    network = Net(broker.ports, broker.inbox, broker.outbox)
    yield network
    network.close()
