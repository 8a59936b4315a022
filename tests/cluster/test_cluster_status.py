"""What a gateway shows of its cluster: /api/cluster (against the shipped OpenAPI schema) and
`mqksbridge cluster status`, over the session's real 3-node cluster, with a node killed."""
import os
import subprocess
import sys
import uuid

import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.threads import deferToThread

from mqksbridge.bridge.engine import Message
from tests.support.admin import aget, fetch, response_schema, validate
from tests.support.waits import until

CLI = os.path.join(os.path.dirname(sys.executable), "mqksbridge")


def gateway_overrides(cluster, name):
    return {"cluster": {"engine": "rabbitmq", "urls": cluster.urls(), "node": name,
                        "prefix": f"t{uuid.uuid4().hex[:8]}.",     # this test's own names
                        "management": cluster.management_urls()}}


async def cluster_view(port, predicate, what):
    """/api/cluster once `predicate(answer)` holds (the answer is kept two seconds)."""
    seen = []

    def look():
        return seen and predicate(seen[-1]) and seen[-1]

    async def poll():
        seen.append(await aget(port, "/api/cluster"))
    while not look():
        await poll()
        if not look():
            await until(lambda: True, what=what)        # one reactor turn between polls
    return seen[-1]


@pytest_twisted.ensureDeferred
async def test_the_gateway_shows_nodes_queues_and_replicas(rabbitmq_cluster, running):
    server = await running(gateway_overrides(rabbitmq_cluster, "gw-status"))
    port = server.port("admin")
    server.broker.queue("jobs")                       # declared in RabbitMQ, 3 replicas
    assert await server.broker.publish("jobs", Message("m1", "job", (b"x",)), confirm=True)
    raw = (await deferToThread(fetch, port, "/metrics"))[2].decode()
    values = {s.name: s.value for f in text_string_to_metric_families(raw) for s in f.samples}
    assert values["mqksbridge_engine_confirms_total"] == 1
    assert values["mqksbridge_engine_confirm_seconds_total"] > 0
    answer = await cluster_view(port, lambda a: any(q["name"] == "jobs" for q in a["queues"])
                                and any(g["name"] == "gw-status" for g in a["gateways"]),
                                "the queue and the gateway in the view")
    validate(answer, response_schema("/api/cluster"))
    assert answer["gateway"] == "gw-status" and answer["error"] is None
    assert answer["connected"].startswith("amqp://mqksbridge:***@127.0.0.1:")
    assert rabbitmq_cluster.password not in str(answer)
    assert set(answer["clients"]) == {"mqks", "malamute", "twino", "textqueue"}
    assert [(n["name"], n["running"]) for n in answer["nodes"]] == [
        (f"rabbit-{i}@localhost", True) for i in (1, 2, 3)]
    gateway = next(g for g in answer["gateways"] if g["name"] == "gw-status")
    assert gateway["node"] in [n["name"] for n in answer["nodes"]]   # (its channel count
    # is as of RabbitMQ's last statistics pass, every 5 s: not asserted)
    jobs = next(q for q in answer["queues"] if q["name"] == "jobs")
    assert (jobs["type"], jobs["replicas"], jobs["online"]) == ("quorum", 3, 3)
    assert jobs["amqp"] == answer["prefix"] + "q.jobs"

    await deferToThread(rabbitmq_cluster.kill, 3)
    answer = await cluster_view(
        port, lambda a: a["nodes"] and not a["nodes"][2]["running"] and next(
            q for q in a["queues"] if q["name"] == "jobs")["online"] == 2,
        "node 3 down in the view")
    validate(answer, response_schema("/api/cluster"))
    shown = await deferToThread(subprocess.run, [CLI, "cluster", "status", "--admin",
                                                 f"http://127.0.0.1:{port}"],
                                capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("gateway gw-status: connected to amqp://mqksbridge:***@")
    assert any(line.split()[:2] == ["rabbit-3@localhost", "DOWN"] for line in lines)
    assert any(line.split()[:2] == ["rabbit-1@localhost", "running"] for line in lines)
    assert any(line.split()[:2] == ["jobs", "quorum"] and "2/3" in line.split() for line in lines)
    await deferToThread(rabbitmq_cluster.restart, 3)


@pytest_twisted.ensureDeferred
async def test_an_embedded_broker_says_so(server):
    answer = await aget(server.port("admin"), "/api/cluster")
    assert answer == {"engine": "embedded"}
    validate(answer, response_schema("/api/cluster"))
    shown = await deferToThread(subprocess.run, [CLI, "cluster", "status", "--admin",
                                                 f"http://127.0.0.1:{server.port('admin')}"],
                                capture_output=True, text=True, timeout=60)
    assert shown.stdout.strip() == "engine embedded: this broker is not a cluster gateway"
