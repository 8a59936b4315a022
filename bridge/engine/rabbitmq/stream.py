"""A stream whose exact bindings live in the cluster.

Each stream is a direct exchange `<prefix>s.<name>` (exact subjects: a topic exchange
would read `*` and `#` in a subject as wildcards); each of a queue's bound subjects is a
queue.bind with the subject as routing key. A publish on any gateway is one basic.publish
to the exchange, and RabbitMQ hands a copy to every queue bound on any gateway; a plain
AMQP client publishing to the exchange with the subject as routing key reaches them too.
Router bindings (Twino routers) and readers (Malamute stream readers) stay in the gateway
that holds them, as in the core: they see this gateway's publishes only.
"""
from mqksbridge.core.stream import Stream


class RemoteStream(Stream):
    def __init__(self, name, queues, engine):
        super().__init__(name, queues)
        self.engine = engine
        self.exchange = engine.names.stream(name)

    def set_bindings(self, queue_name, subjects, client=None):
        old = set(self.bound_subjects(queue_name))
        if not super().set_bindings(queue_name, subjects, client):
            return False
        new = set(self.bound_subjects(queue_name))
        self.engine.bind(self, queue_name, sorted(new - old), sorted(old - new))
        return True

    def _resolve(self, subject):
        """No exact route in the gateway: RabbitMQ routes the one copy publish sends."""
        return ()

    def publish(self, message, publisher=None):
        """One copy to the exchange for the exact bindings of every gateway, then this
        gateway's router bindings and readers as the core does. Returns the copies this
        gateway can count: its own bound queues, routers and readers."""
        bound = len(self.exact.get(message.subject, ()))
        sent = self.engine.publish_to_stream(self, message)
        delivered = super().publish(message, publisher)
        if bound and sent:
            if not delivered:
                self.unrouted -= 1          # the exchange took it for the bound queues
            delivered += bound
        return delivered
