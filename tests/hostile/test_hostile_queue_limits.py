"""A consumer that never reads must not let a queue grow without limit (1M MQKS messages:
674 MB, unbounded). Queues have length and byte limits by name, with an overflow policy:
here a queue keeps its newest 1,000 messages and moves the older ones to a dead-letter
queue that keeps 2,000 and drops the oldest past that."""
import pytest

from mqksbridge.bridge.clients.mqks import MqksClient
from tests.hostile.hostile import MB, rss
from tests.support.process import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    config = tmp_path / "limits.toml"
    config.write_text('[broker]\n'
                      'queue_length_limit = [["dead", 2000], ["jobs.*", 1000]]\n'
                      'queue_overflow = [["dead", "drop-oldest"], ["jobs.*", "dead-letter:dead"]]\n')
    process = BrokerProcess(tmp_path, doors=("mqks",), args=["--config", str(config)]).start()
    yield process
    process.stop()


def test_a_queue_nobody_reads_keeps_its_limit(broker):
    client = MqksClient(port=broker.ports["mqks"], timeout=10)
    start = rss(broker.process.pid)
    cid = client.consume("jobs.stuck", ["ev.stuck"])
    client.delete_consumer(cid)                      # the queue stays, nobody reads it
    body = "x" * 1000
    for i in range(50_000):
        client.publish("ev.stuck", body, confirm=False)
    assert client.ping("done") == "done"             # every publish before it is handled
    queues = client.eval("state.queues")
    assert "'jobs.stuck': 1000" in queues and "'dead': 2000" in queues, queues
    assert rss(broker.process.pid) - start < 32 * MB
    client.close()
