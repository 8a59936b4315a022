"""[cluster]: what --check-config accepts and refuses, and the URLs and name a gateway uses."""
import socket
import subprocess

import pytest

from mqksbridge.bridge import config
from mqksbridge.bridge.cluster import gateway
from tests.support.process import TWISTD

URL = "amqp://gw:secret@127.0.0.1:5672/fleet"


def load(**cluster):
    return config.load(overrides={"cluster": cluster})


def refused(**cluster):
    with pytest.raises(config.ConfigError) as caught:
        load(**cluster)
    return str(caught.value)


def test_a_gateway_configuration_loads():
    cluster = load(engine="rabbitmq", urls=[URL, "amqps://gw:secret@10.0.0.2/fleet"],
                   node="gw1", replicas=5)["cluster"]
    assert cluster["node"] == "gw1" and cluster["replicas"] == 5
    assert cluster["prefix"] == "mqksbridge." and load()["cluster"]["engine"] == "embedded"


@pytest.mark.parametrize("cluster, says", [
    ({"engine": "rabbitmq"}, "set cluster.urls"),
    ({"engine": "kafka", "urls": [URL]}, "must be one of 'embedded', 'rabbitmq'"),
    ({"urls": [URL]}, 'cluster.engine = "embedded" does not use it'),
    ({"engine": "rabbitmq", "urls": ["http://gw:secret@h/"]},
     "'http://gw:***@h/' is not an AMQP URL (the scheme must be amqp:// or amqps://)"),
    ({"engine": "rabbitmq", "urls": ["amqp://h:70000/v"]}, "is not an AMQP URL"),
    ({"engine": "rabbitmq", "urls": ["amqp:///v"]}, "(no host)"),
    ({"engine": "rabbitmq", "urls": ["amqp://h/a/b"]}, "is not an AMQP URL"),
    ({"engine": "rabbitmq", "urls": "amqp://h/"}, "must be a list of amqp:// or amqps://"),
    ({"engine": "rabbitmq", "urls": [URL], "node": "gw 1"}, "cluster.node"),
    ({"engine": "rabbitmq", "urls": [URL], "node": "-gw"}, "the first a letter or digit"),
    ({"engine": "rabbitmq", "urls": [URL], "prefix": ""}, "cluster.prefix"),
    ({"engine": "rabbitmq", "urls": [URL], "replicas": 0}, "cluster.replicas"),
    ({"engine": "rabbitmq", "urls": [URL], "vhost": "other"}, 'a URL names vhost "fleet"'),
    ({"engine": "rabbitmq", "urls": [URL], "management": ["ftp://h"]}, "http:// or https://"),
])
def test_refused_with_the_key_and_the_reason(cluster, says):
    message = refused(**cluster)
    assert says in message and "secret" not in message


def test_a_gateway_keeps_no_journal():
    with pytest.raises(config.ConfigError, match="quorum queue the cluster keeps"):
        config.load(overrides={"cluster": {"engine": "rabbitmq", "urls": [URL]},
                               "durability": {"queues": ["jobs.*"]}})


def test_the_vhost_goes_into_urls_that_name_none():
    cluster = load(engine="rabbitmq", vhost="a/b",
                   urls=["amqp://u:p@h1:5672", "amqp://u:p@h2/", "amqp://u:p@h3/a%2Fb",
                         "amqp://u:p@h4?heartbeat=30"])["cluster"]
    assert gateway.urls(cluster) == ["amqp://u:p@h1:5672/a%2Fb", "amqp://u:p@h2/a%2Fb",
                                     "amqp://u:p@h3/a%2Fb", "amqp://u:p@h4/a%2Fb?heartbeat=30"]
    assert gateway.node_name(cluster) == socket.gethostname().split(".")[0]


def test_check_config_prints_the_cluster_section(tmp_path):
    done = subprocess.run([TWISTD, "-n", "--pidfile=", "mqksbridge", "--check-config",
                           "--set", 'cluster.engine="rabbitmq"',
                           "--set", f'cluster.urls=["{URL}"]', "--set", "cluster.node=gw1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("[cluster]\n", 1)[1]
    assert 'engine = "rabbitmq"' in section and 'node = "gw1"' in section
    bad = subprocess.run([TWISTD, "-n", "--pidfile=", "mqksbridge", "--check-config",
                          "--set", 'cluster.engine="rabbitmq"'],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "set cluster.urls" in bad.stderr
