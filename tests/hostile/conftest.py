"""Hostile clients against the real `twistd -n mqksbridge` in a subprocess, one per test:
a broker that a test stalls must not stall the test runner, and is killed afterwards."""
import pytest

from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.bridge.clients.mqks import MqksClient
from tests.support.process import BrokerProcess

TIMEOUT = 5.0        # seconds any single reply may take before the test fails


class Broker:
    def __init__(self, process):
        self.process = process
        self.endpoint = f"tcp://127.0.0.1:{process.ports['malamute']}"
        self._clients = []

    def mqks(self):
        client = MqksClient(port=self.process.ports["mqks"], timeout=TIMEOUT)
        self._clients.append(client)
        return client

    def malamute(self, address=""):
        client = MalamuteClient(self.endpoint, address, timeout=TIMEOUT)
        client.connect()
        self._clients.append(client)
        return client

    def close(self):
        for client in self._clients:
            try:
                client.close()
            except Exception:           # the broker may be the thing that broke
                pass


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path, doors=("mqks", "malamute")).start()
    running = Broker(process)
    yield running
    running.close()
    process.stop()
