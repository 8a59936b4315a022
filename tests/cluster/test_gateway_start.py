"""A real `twistd mqksbridge` gateway whose RabbitMQ node starts after it: it does not listen,
logs why and keeps trying; once the node is up it opens its doors and carries messages
through RabbitMQ (the queue is there, in the cluster)."""
import json
import os
import subprocess
import sys

import pytest

from mqksbridge.bridge.cluster.local import LocalCluster, missing
from tests.support.admin import fetch_json
from tests.support.process import BrokerProcess, free_port
from tests.support.waits import wait_until

pytestmark = pytest.mark.skipif(missing() is not None, reason=f"no local RabbitMQ: {missing()}")
CLI = os.path.join(os.path.dirname(sys.executable), "mqksbridge")


def test_a_gateway_listens_only_once_it_reaches_the_cluster(tmp_path):
    cluster = LocalCluster(tmp_path / "rabbit", 1).prepare()      # URLs known, not started
    twino = free_port()
    gateway = BrokerProcess(tmp_path, doors=("admin",), all_doors=("admin", "mqks", "malamute"),
                            args=["--twino", f"tcp:{twino}:interface=127.0.0.1",
                                  "--set", 'cluster.engine="rabbitmq"',
                                  "--set", f'cluster.urls=["{cluster.urls()[0]}"]',
                                  "--set", "cluster.node=gw1"])
    try:
        gateway.start()                       # returns once the admin endpoint listens
        wait_until(lambda: gateway.log().count("cannot reach") >= 2, 60,
                   "two failed attempts logged", step=0.05, detail=gateway.log)
        log = gateway.log()
        assert "not listening until the cluster answers: amqp://mqksbridge:***@" in log
        assert cluster.password not in log
        assert not gateway._listens(twino)
        cluster.start()
        wait_until(lambda: gateway._listens(twino), 120, "the Twino door to open",
                   step=0.05, detail=gateway.log)
        assert "opening the doors" in gateway.log()
        consumer = subprocess.Popen([CLI, "consume", f"twino://127.0.0.1:{twino}", "jobs",
                                     "--count", "1"], stdout=subprocess.PIPE, text=True)
        # the consumer's join makes the queue (round-robin); a Twino push first would make
        # it push-all, a mode the cluster engine does not deliver yet (docs/cluster.md)
        wait_until(lambda: any(q["name"] == "jobs" and q["consumers"] == 1 for q in
                               fetch_json(gateway.ports["admin"], "/api/queues")["items"]),
                   60, "the consumer on queue jobs", step=0.05, detail=gateway.log)
        sent = subprocess.run([CLI, "publish", f"twino://127.0.0.1:{twino}", "--queue", "jobs",
                               "hello cluster"], capture_output=True, text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr + gateway.log()
        assert consumer.communicate(timeout=60)[0].strip() == "hello cluster", gateway.log()
        queues = cluster.ctl(1, "list_queues", "-p", cluster.vhost, "name", "type",
                             "--formatter", "json")
        assert {"name": "mqksbridge.q.jobs", "type": "quorum"} in json.loads(queues)
    finally:
        gateway.stop()
        cluster.stop(kill=True)
