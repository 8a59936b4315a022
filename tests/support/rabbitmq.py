"""RabbitMQ on loopback for the tests (bridge.cluster.local): one node and a 3-node cluster,
each started once per session on its first use and stopped at the end.

    from tests.support.rabbitmq import rabbitmq_node, rabbitmq_cluster  # in a conftest.py

`rabbitmq_node` / `rabbitmq_cluster` hand a running LocalCluster (`urls()`, `nodes`,
`kill(i)`, `restart(i)`, `cluster_status()`, `ctl(i, ...)`); a node that an earlier test
killed and did not bring back is restarted before the next test gets the cluster. The user
and vhost are `mqksbridge`; the 3-node cluster has the management plugin (HTTP API) on.
Tests are skipped, saying why, only where Debian's rabbitmq-server is not installed.
"""
import pytest

from mqksbridge.bridge.cluster.local import LocalCluster, missing
from tests.support.waits import until


_STARTED = {}   # (size, management) -> the session's LocalCluster: one, however many
#                 conftest.py files import these fixtures (each import is a fixture of its own)


def _session_cluster(request, tmp_path_factory, name, size, management):
    reason = missing()
    if reason:
        pytest.skip(f"no local RabbitMQ: {reason}")
    key = (size, management)
    if key not in _STARTED:
        cluster = LocalCluster(tmp_path_factory.mktemp(name), size, management=management)
        _STARTED[key] = cluster.start()
        request.addfinalizer(lambda: _STARTED.pop(key).stop(kill=True))   # data thrown away
    return _STARTED[key]


@pytest.fixture(scope="session")
def _rabbitmq_node_session(request, tmp_path_factory):
    return _session_cluster(request, tmp_path_factory, "rabbitmq-node", 1, False)


@pytest.fixture(scope="session")
def _rabbitmq_cluster_session(request, tmp_path_factory):
    return _session_cluster(request, tmp_path_factory, "rabbitmq-cluster", 3, True)


@pytest.fixture
def rabbitmq_node(_rabbitmq_node_session):
    """A single RabbitMQ node (a LocalCluster of size 1), running."""
    _rabbitmq_node_session.heal()
    return _rabbitmq_node_session


@pytest.fixture
def rabbitmq_cluster(_rabbitmq_cluster_session):
    """A 3-node RabbitMQ cluster with every node running and clustered."""
    _rabbitmq_cluster_session.heal()
    return _rabbitmq_cluster_session


async def idle(engine, timeout=60.0):
    """Every confirm of a RabbitMQEngine in, no consume or cancel in flight, deliveries
    arrived."""
    await until(lambda: not engine.busy(), timeout, "the engine idle")
    await engine.barrier()
