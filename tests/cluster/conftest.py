from tests.support.rabbitmq import (_rabbitmq_cluster_session, _rabbitmq_node_session,  # noqa: F401
                                    rabbitmq_cluster, rabbitmq_node)
