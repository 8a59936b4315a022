"""The data source on journals written by the broker itself (its durable queues):
a real `twistd -n mqksbridge` with durable queues, real traffic through every door (text,
binary and multi-frame bodies, headers, acks by consumers of each door, rejects), then the
journals under `<data_dir>/journal/` read by Spark and checked against what was sent.

These tests need the broker's durability. Until the broker writes journals (no
`[durability]` section in bridge/config.DEFAULTS) they are skipped, with that reason; the
same tests on journals made with the journal encoder run in the other modules of this
package.
"""
import json
import os

import pytest

from mqksbridge.bridge import config
from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.bridge.clients.mqks import MqksClient
from mqksbridge.pipeline.session import read
from tests.support.process import BrokerProcess

DURABLE = "durability" in config.DEFAULTS
pytestmark = pytest.mark.skipif(
    not DURABLE, reason="the broker does not write journals yet (no [durability] configuration)")
WAIT = 30


@pytest.fixture
def durable_broker(tmp_path):
    settings = tmp_path / "mqksbridge.toml"
    settings.write_text('[durability]\nqueues = ["jobs", "orders.*", "bin/1"]\nfsync = "always"\n'
                        '[twino]\nproducer_ack = [["bin/*", "saved"]]\n')   # acked once on disk
    broker = BrokerProcess(tmp_path, doors=("mqks", "malamute", "twino"),
                           args=["--config", str(settings)])
    broker.start()
    yield broker, tmp_path / "var"
    broker.stop()


def test_journals_written_by_the_broker_read_back(spark, durable_broker):
    broker, data_dir = durable_broker
    mqks = MqksClient(port=broker.ports["mqks"], timeout=WAIT)
    endpoint = f"tcp://127.0.0.1:{broker.ports['malamute']}"
    try:
        # queues first (durable by name), then traffic through every door
        consumer = mqks.consume("jobs", ["job.run"], manual_ack=True)
        mqks.consume("orders.eu", ["order.new"], manual_ack=True)
        sent = {}
        for i in range(20):
            sent[mqks.publish("job.run", f"job {i}")] = ("jobs", "mqks", (f"job {i}".encode(),))
        with twino.connect(port=broker.ports["twino"], timeout=WAIT) as producer:
            answer = producer.operation(610, "bin", [("Channel-Name", "bin"), ("Queue-Id", "1"),
                                                     ("Queue-Status", "round-robin")],
                                        json.dumps({"RequestAcknowledge": False}).encode())
            assert answer.content_type in (0, 481), answer
            for i in range(10):
                body = bytes([0, 255, i, 13, 10])
                result = producer.push("bin", 1, body, headers=[("x-n", str(i))], wait_ack=True)
                assert result.ok, result
                sent[result.frame.message_id] = ("bin/1", "twino", (body,))
        with MalamuteClient(endpoint, "", timeout=WAIT) as sender:
            for i in range(10):
                sender.sendfor("jobs", "job.multi", b"part-a", bytes([i]), b"")
        # consume: ack half the MQKS jobs, reject a few (retries)
        acked, rejected = set(), set()
        for _ in range(30):
            delivery = mqks.recv(WAIT)
            if delivery.consumer != consumer:
                continue
            if len(acked) < 10:
                mqks.ack(consumer, delivery.id)
                acked.add(delivery.id)
            elif len(rejected) < 3 and delivery.id not in rejected:
                mqks.reject(consumer, delivery.id)
                rejected.add(delivery.id)
    finally:
        mqks.close()
    journal_dir = data_dir / "journal"
    assert journal_dir.is_dir() and any(journal_dir.rglob("*"))
    rows = read(spark, [journal_dir], ["queue", "id", "status", "origin", "frames", "headers",
                                       "retry", "consumer", "checksum"]).collect()
    by_id = {r.id: r for r in rows if r.status != "comment"}
    for mid, (queue, origin, frames) in sent.items():
        row = by_id[mid]
        assert (row.queue, row.origin, tuple(map(bytes, row.frames))) == (queue, origin, frames)
        assert row.checksum == "ok"
    for mid in acked:
        assert by_id[mid].status == "done" and by_id[mid].consumer == "mqks"
    for mid in rejected:
        assert by_id[mid].retry >= 1
    multi = [r for r in rows if r.origin == "malamute"]
    assert len(multi) == 10 and all(len(r.frames) == 3 for r in multi)
    assert all(r.headers and "x-n" in r.headers for r in rows if r.queue == "bin/1")
    assert os.path.isdir(journal_dir)
