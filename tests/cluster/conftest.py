"""The session's RabbitMQ node and cluster (tests/support/rabbitmq.py)."""
from tests.support.rabbitmq import (  # noqa: F401 (fixtures)
    _rabbitmq_cluster_session, _rabbitmq_node_session, rabbitmq_cluster, rabbitmq_node)
