"""A stream of the cluster: exact bindings in RabbitMQ, readers and routers in gateways.

Each stream is a fanout exchange `<prefix>s.<name>`, which every gateway (and a plain
AMQP client) publishes to with the subject as routing key, bound to a direct exchange
`<prefix>b.<name>`, on which each of a queue's bound subjects is a queue.bind with the
subject as routing key (exact subjects: a topic exchange would read `*` and `#` in a
subject as wildcards). RabbitMQ hands a copy to every queue bound on any gateway.
Readers (Malamute stream readers) and router bindings (Twino routers) stay in the gateway
that holds them, as in the core; what other gateways publish reaches them through this
gateway's readers' queue (readers.Tap), bound to the fanout exchange while the stream
has some here.
"""
from mqksbridge.core.guarded import check_publish
from mqksbridge.core.stream import Stream


class RemoteStream(Stream):
    def __init__(self, name, queues, engine):
        super().__init__(name, queues)
        self.engine = engine
        self.exchange = engine.names.stream(name)
        self.subjects = engine.names.subjects(name)
        self.remote = 0                # messages of other gateways handed on here

    def set_bindings(self, queue_name, subjects, client=None):
        old = set(self.bound_subjects(queue_name))
        if not super().set_bindings(queue_name, subjects, client):
            return False
        new = set(self.bound_subjects(queue_name))
        self.engine.bind(self, queue_name, sorted(new - old), sorted(old - new))
        return True

    # -- what this gateway reads ----------------------------------------------------------
    def read_here(self):
        """Whether this gateway holds readers or router bindings of the stream: then it
        reads the whole stream from the cluster (readers.Tap)."""
        return bool(self._readers or self.routed)

    def add_reader(self, client, key, matcher, deliver):
        reader = super().add_reader(client, key, matcher, deliver)
        self.engine.tap.watch(self)
        return reader

    def remove_readers(self, client):
        super().remove_readers(client)
        self.engine.tap.watch(self)

    def set_routed(self, queue_names):
        super().set_routed(queue_names)
        self.engine.tap.watch(self)

    # -- publishing -----------------------------------------------------------------------
    def _resolve(self, subject):
        """No exact route in the gateway: RabbitMQ routes the one copy publish sends."""
        return ()

    def publish(self, message, publisher=None):
        """One copy to the exchange for the exact bindings and the readers of every
        gateway, then this gateway's router bindings and readers as the core does.
        Returns the copies this gateway can count: its own bound queues, routers and
        readers (other gateways' are out of its sight). With users, Denied (before
        anything is sent) unless the publisher may publish it, as core.guarded checks."""
        if self.engine.guarded:
            check_publish(self.name, message, publisher)      # before anything is sent
        bound = len(self.exact.get(message.subject, ()))
        here = self.engine.tap.gateway if self._readers or self.routed else None
        sent = self.engine.publish_to_stream(self, message, here)
        delivered = super().publish(message, publisher)
        if bound and sent:
            if not delivered:
                self.unrouted -= 1          # the exchange took it for the bound queues
            delivered += bound
        return delivered

    def publish_run(self, messages, publisher=None):
        """publish() for each: every message is its own basic.publish (the core's run
        shortcut puts into local queues, which a gateway has none of)."""
        publish = self.publish
        return sum([publish(message, publisher) for message in messages])

    def deliver_remote(self, message):
        """A message another gateway or an AMQP client published: to this gateway's
        readers and router bindings (RabbitMQ gave the bound queues theirs). Counted in
        `remote`, not in `published` nor `unrouted`, which are this gateway's publishes."""
        published, unrouted = self.published, self.unrouted
        delivered = Stream.publish(self, message)
        self.published, self.unrouted = published, unrouted
        self.remote += 1
        return delivered
