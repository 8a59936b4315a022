"""A plain pika client on the cluster meets an MQKS client of a gateway, both ways, with the
envelope in the AMQP properties docs/mapping.md lists (its AMQP column)."""
import pika
import pytest_twisted
from twisted.internet.threads import deferToThread

from tests.cluster.test_cluster_status import gateway_overrides


def amqp_publish(url, queue, body, **properties):
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("", queue, body, pika.BasicProperties(**properties),
                              mandatory=True)
    finally:
        connection.close()


def amqp_get(url, queue):
    """(properties, body) of the next message of `queue` (acked), or None."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        method, properties, body = connection.channel().basic_get(queue, auto_ack=True)
        return None if method is None else (properties, body)
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_a_pika_client_and_an_mqks_client_meet_in_the_cluster(rabbitmq_cluster, running):
    overrides = gateway_overrides(rabbitmq_cluster, "gw-amqp")
    prefix = overrides["cluster"]["prefix"]
    server = await running(overrides)
    url = rabbitmq_cluster.urls()[1]                  # another node than the gateway's
    mqks = await server.mqks()

    assert await mqks.request("c1 consume --confirm amqp-in") == "c1 ok "
    await server.broker.queues["amqp-in"].declared
    await deferToThread(amqp_publish, url, f"{prefix}q.amqp-in", b"hello", message_id="a1",
                        type="job.new", app_id="amqp", reply_to="pika-1",
                        headers={"k": "v"})
    assert await mqks.line() == "c1 ok a1 event=job.new,origin=amqp,sender=pika-1,h.k=v hello"

    assert await mqks.request("c2 consume --confirm amqp-out ev") == "c2 ok "   # bound to ev
    assert await mqks.request("d2 delete_consumer --confirm c2") == "d2 ok "    # left waiting
    assert await mqks.request("m1 publish --confirm ev data") == "m1 ok "
    properties, body = await deferToThread(amqp_get, url, f"{prefix}q.amqp-out")
    assert body == b"data"
    assert (properties.message_id, properties.type, properties.app_id) == ("m1", "ev", "mqks")
    assert properties.reply_to and properties.delivery_mode == 2
