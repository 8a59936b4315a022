"""The local RabbitMQ launcher (bridge.cluster.local) against Debian's real rabbitmq-server:
three nodes booted and clustered, each answering AMQP on its own loopback port; one killed
with SIGKILL and brought back into the cluster; the command line's start and stop."""
import base64
import json
import os
import socket
import struct
import subprocess
import sys
import urllib.request

import pytest

from mqksbridge.bridge.cluster.local import STATE, LocalCluster, _group_alive, missing
from tests.support.waits import wait_until

NAMES = ["rabbit-1@localhost", "rabbit-2@localhost", "rabbit-3@localhost"]


def connection_start(port):
    """Whether the port speaks AMQP 0-9-1: the protocol header is answered with a
    Connection.Start method frame (class 10, method 10) on channel 0."""
    with socket.create_connection(("127.0.0.1", port), 10) as s:
        s.settimeout(10)
        s.sendall(b"AMQP\x00\x00\x09\x01")
        head = b""
        while len(head) < 11:
            chunk = s.recv(11 - len(head))
            if not chunk:
                return False
            head += chunk
    kind, channel, _, class_id, method_id = struct.unpack(">BHIHH", head)
    return (kind, channel, class_id, method_id) == (1, 0, 10, 10)


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), 5).close()
    except ConnectionRefusedError:
        return True
    return False


def management(cluster, node, path):
    request = urllib.request.Request(f"http://127.0.0.1:{node.management_port}{path}")
    token = base64.b64encode(f"{cluster.user}:{cluster.password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def test_three_nodes_form_one_cluster(rabbitmq_cluster):
    assert [node.name for node in rabbitmq_cluster.nodes] == NAMES
    for index in (1, 2, 3):       # every node sees the same three, all running, on disk
        status = rabbitmq_cluster.cluster_status(index)
        assert sorted(status["running_nodes"]) == NAMES
        assert sorted(status["disk_nodes"]) == NAMES
        assert status["partitions"] == {} and status["alarms"] == []
    ports = {port for node in rabbitmq_cluster.nodes
             for port in (node.amqp_port, node.dist_port, node.management_port)}
    assert len(ports) == 9
    for node in rabbitmq_cluster.nodes:
        assert connection_start(node.amqp_port)
        assert node.log_path.startswith(rabbitmq_cluster.directory)
    # the gateways' user (an administrator, for the HTTP API) and vhost, on every node
    node = rabbitmq_cluster.nodes[2]
    assert management(rabbitmq_cluster, node, "/api/whoami")["name"] == "mqksbridge"
    assert "mqksbridge" in [v["name"] for v in management(rabbitmq_cluster, node, "/api/vhosts")]
    assert rabbitmq_cluster.urls()[0] == (
        f"amqp://mqksbridge:{rabbitmq_cluster.password}@127.0.0.1:"
        f"{rabbitmq_cluster.nodes[0].amqp_port}/mqksbridge")


def test_a_killed_node_leaves_and_comes_back(rabbitmq_cluster):
    node = rabbitmq_cluster.nodes[2]
    pgid = node.pgid
    rabbitmq_cluster.kill(3)
    assert not _group_alive(pgid) and refused(node.amqp_port)
    wait_until(lambda: "rabbit-3@localhost" not in
               rabbitmq_cluster.cluster_status(1)["running_nodes"],
               60, "node 1 to see node 3 down", step=0.2)
    status = rabbitmq_cluster.cluster_status(1)
    assert sorted(status["disk_nodes"]) == NAMES        # still a member, only down
    rabbitmq_cluster.restart(3)
    assert sorted(rabbitmq_cluster.cluster_status(3)["running_nodes"]) == NAMES
    assert connection_start(node.amqp_port)


def test_one_node(rabbitmq_node):
    assert rabbitmq_node.cluster_status()["running_nodes"] == ["rabbit-1@localhost"]
    assert connection_start(rabbitmq_node.nodes[0].amqp_port)


@pytest.mark.skipif(missing() is not None, reason=f"no local RabbitMQ: {missing()}")
def test_command_line_start_and_stop(tmp_path):
    """What `make cluster` runs: start leaves the node running after the command exits
    (its state in cluster.json), stop ends every process of it."""
    command = [sys.executable, "-m", "mqksbridge.bridge.cluster.local"]
    started = subprocess.run([*command, "start", str(tmp_path), "--nodes", "1"],
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    cluster = LocalCluster.load(tmp_path)
    try:
        assert started.stdout.split() == ["rabbit-1@localhost", cluster.urls()[0]]
        assert connection_start(cluster.nodes[0].amqp_port)
        again = subprocess.run([*command, "start", str(tmp_path)], capture_output=True,
                               text=True, timeout=60)
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        stopped = subprocess.run([*command, "stop", str(tmp_path)], capture_output=True,
                                 text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert not _group_alive(cluster.nodes[0].pgid) and not _group_alive(cluster.epmd)
    assert not os.path.exists(tmp_path / STATE)
