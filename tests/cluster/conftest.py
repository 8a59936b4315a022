"""The session's RabbitMQ node and cluster (tests/support/rabbitmq.py), and the fixtures
of the modules that run two gateways (tests/cluster/gateways.py): each such module
defines its own `gateways`."""
import pytest

from tests.cluster.gateways import Rabbit
from tests.interop.conftest import Net
from tests.support.rabbitmq import (  # noqa: F401 (fixtures)
    _rabbitmq_cluster_session, _rabbitmq_node_session, rabbitmq_cluster, rabbitmq_node)


@pytest.fixture(scope="module")
def rabbit(_rabbitmq_node_session):
    seen = Rabbit(_rabbitmq_node_session)
    yield seen
    seen.close()


@pytest.fixture
def nets(gateways):
    """A client side (tests/interop) of every door on each gateway."""
    made = [Net(gw.ports, gw.inbox, gw.outbox) for gw in gateways]
    yield made
    for net in made:
        net.close()
