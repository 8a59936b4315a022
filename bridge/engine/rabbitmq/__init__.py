"""The cluster engine: IEngine over a RabbitMQ cluster through pika's Twisted adapter.

connection  one AMQP connection kept up, failing over along the cluster's URLs
topology    names and declare arguments: quorum queues, the exchanges of each stream
envelope    a core Message as AMQP properties, headers and body, and back
queue       RemoteQueue (a core queue's public methods over a quorum queue) and the
            Subscription of each consumer (credit over prefetch)
stream      RemoteStream: exact bindings in RabbitMQ, readers and routers here
readers     the Tap: this gateway's queue of what other gateways publish to streams it reads
engine      RabbitMQEngine: the core broker's model in the gateway, queues in RabbitMQ
"""
from mqksbridge.bridge.engine.rabbitmq.engine import RabbitMQEngine

__all__ = ["RabbitMQEngine"]
