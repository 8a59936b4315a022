"""What the cluster test modules share: real gateways (`twistd -n mqksbridge` processes
with `[cluster] engine = "rabbitmq"`, each with TextQueue inbox and outbox directories of
its own) on the session's RabbitMQ node, and what RabbitMQ itself has, read over a plain
AMQP connection and rabbitmqctl rather than through a gateway."""
import json

import pika

from tests.interop.conftest import spool_broker
from tests.support.waits import wait_until

QUEUE = "mqksbridge.q."                  # the default prefix's quorum queue of a core queue
MAILBOX = "mqksbridge.m."                # ... of a mailbox


def start(cluster, tmp_path_factory, nodes=("gw1", "gw2"),
          doors=("mqks", "malamute", "twino", "admin"), settings=""):
    """For a module fixture: the gateways `nodes` (started in turn, each listening once it
    reached the cluster), yielded as a list and stopped at the end. `settings`: more TOML
    sections for every gateway."""
    urls = json.dumps(cluster.urls())
    started = []
    try:
        for node in nodes:
            config = ("[broker]\nsweep_interval = 0.1\n"
                      f'[cluster]\nengine = "rabbitmq"\nurls = {urls}\nnode = "{node}"\n'
                      + settings)
            started.append(spool_broker(tmp_path_factory.mktemp(node), config, doors=doors))
        yield started
    finally:
        for process in started:
            process.stop()


class Rabbit:
    """A queue's ready messages and consumers (a passive declare), a stream's bindings."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.connection = pika.BlockingConnection(pika.URLParameters(cluster.urls()[0]))

    def channel(self):
        """A channel, on a new connection if RabbitMQ closed the last one (a blocking
        connection idle through tests that only ask rabbitmqctl misses its heartbeats)."""
        try:
            return self.connection.channel()
        except pika.exceptions.AMQPError:
            self.connection = pika.BlockingConnection(
                pika.URLParameters(self.cluster.urls()[0]))
            return self.connection.channel()

    def counts(self, queue, prefix=QUEUE):
        """(ready, consumers) of core queue `queue` (with `prefix` MAILBOX: of mailbox
        `queue`); (None, 0) while it is not declared."""
        channel = self.channel()
        try:
            frame = channel.queue_declare(prefix + queue, passive=True)
            return frame.method.message_count, frame.method.consumer_count
        except pika.exceptions.ChannelClosedByBroker:      # 404: not declared yet
            return None, 0
        finally:
            if channel.is_open:
                channel.close()

    def wait_ready(self, queue, n):
        wait_until(lambda: self.counts(queue)[0] == n, 30, f"{n} ready in {queue}", step=0.02)

    def wait_consumers(self, queue, n=1, prefix=QUEUE):
        wait_until(lambda: self.counts(queue, prefix)[1] >= n, 30,
                   f"{n} consumers of {prefix}{queue}", step=0.02)

    def _bindings(self, *columns):
        return json.loads(self.cluster.ctl(1, "list_bindings", "-p", self.cluster.vhost,
                                           *columns, "--formatter", "json"))

    def wait_bindings(self, subject, n):
        """Until `n` queues are bound to `subject` of the stream `mqks`."""
        def bound():
            return sum(1 for row in self._bindings("source_name", "routing_key")
                       if row["routing_key"] == subject
                       and row["source_name"] == "mqksbridge.b.mqks") >= n
        wait_until(bound, 60, f"{n} bindings of {subject}", step=0.2)

    def wait_reading(self, n):
        """Until `n` gateways' readers' queues are bound to the stream `mqks`."""
        def bound():
            return sum(1 for row in self._bindings("source_name", "destination_name")
                       if row["source_name"] == "mqksbridge.s.mqks"
                       and row["destination_name"].startswith("mqksbridge.r.")) >= n
        wait_until(bound, 60, f"{n} gateways reading mqks", step=0.2)

    def close(self):
        if self.connection.is_open:
            self.connection.close()
