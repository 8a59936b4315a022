"""The global memory watermark. Without it, a queue nobody consumed grew without bound
(1M MQKS messages: 674 MB). Once the broker's resident memory passes
`broker.memory_watermark`, every connection that published is not read any more (the
admin API shows `memory` in its `input_held`, `_eval` and the overview the alarm), while a
connection that only consumes is read on; when memory falls back the publisher is read
again."""
import pytest

from mqksbridge.bridge.clients.mqks import MqksClient
from tests.hostile.hostile import MB, api, connection_of, deaf_socket, flood, rss
from tests.support.process import BrokerProcess
from tests.support.waits import unless, wait_until

OVER = 48 * MB               # what the broker may pass the watermark by


@pytest.fixture
def broker(tmp_path):
    probe = BrokerProcess(tmp_path, doors=("mqks", "admin")).start()
    idle = rss(probe.process.pid)
    probe.stop()
    watermark = idle + 64 * MB
    # paging off: with it, a backlog nobody reads goes to disk and never reaches the mark
    process = BrokerProcess(tmp_path, doors=("mqks", "admin"), args=[
        "--set", f"broker.memory_watermark={watermark}",
        "--set", "broker.queue_memory_window=max",
        "--set", "broker.memory_check_interval=0.02"]).start()
    process.watermark = watermark
    yield process
    process.stop()


def test_publishers_wait_while_memory_is_over_the_watermark(broker):
    pid, admin = broker.process.pid, broker.ports["admin"]
    worker = MqksClient(port=broker.ports["mqks"], timeout=10)
    cid = worker.consume("piled", ["ev.piled"])
    worker.delete_consumer(cid)                   # the queue stays and keeps what comes
    publisher = deaf_socket(broker.ports["mqks"])

    def held(sock, reason="memory"):
        conn = connection_of(admin, sock)
        return conn is not None and reason in conn.get("input_held", ())

    def over():
        if rss(pid) > broker.watermark + OVER:
            return f"the broker passed its watermark by {(rss(pid) - broker.watermark) // MB} MB"
    line = b"p publish ev.piled " + b"x" * 4000 + b"\n"
    flood(publisher, line * (400 * MB // len(line)), stop=lambda: held(publisher) or over(),
          deadline=60)
    wait_until(unless(lambda: held(publisher), over),
               30.0, "the publisher to be held for memory", step=0.02)
    assert api(admin, "/api/overview")["memory"]["alarm"] is True
    assert "'alarm': True" in worker.eval("state.memory")
    # the consumer's connection is read on: it consumes and deletes the queue
    cid = worker.consume("piled", ["ev.piled"])
    assert worker.recv().data == b"x" * 4000
    assert not held(worker.sock)
    worker.delete_consumer(cid)
    worker.delete_queue("piled")
    wait_until(lambda: not held(publisher),
               30, "the publisher to be read again once memory fell", step=0.02)
    assert api(admin, "/api/overview")["memory"]["alarm"] is False
    worker.close()
    publisher.close()
