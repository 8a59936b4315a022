"""Shared steps for the Twino door tests (queues made with 610, raw frames)."""
import json

from mqksbridge.protocols.twino.codec import ContentType

OPTION_KEYS = {"only_first": "SendOnlyFirstAcquirer", "ack": "RequestAcknowledge",
               "ack_timeout": "AcknowledgeTimeout", "message_timeout": "MessageTimeout",
               "wait": "WaitForAcknowledge", "hide": "HideClientNames", "limit": "MessageLimit",
               "size_limit": "MessageSizeLimit", "handler": "MessageDeliveryHandler"}


def options_json(**options):
    return json.dumps({OPTION_KEYS[k]: v for k, v in options.items()}).encode()


async def make_queue(client, channel, queue_id, status="push", tag=None, **options):
    """CreateQueue (610) with Queue-Status (and Queue-Tag) headers and options JSON; asserts Ok."""
    headers = [("Channel-Name", channel), ("Queue-Id", str(queue_id)), ("Queue-Status", status)]
    if tag:
        headers.append(("Queue-Tag", tag))
    answer = await client.operation(ContentType.CREATE_QUEUE, channel, headers,
                                    options_json(**options))
    assert answer.content_type == 0, answer
    return answer


async def update_queue(client, channel, queue_id, **fields):
    answer = await client.operation(ContentType.UPDATE_QUEUE, channel,
                                    [("Channel-Name", channel), ("Queue-Id", str(queue_id))],
                                    json.dumps(fields).encode())
    return answer.content_type


async def receive_all(client, *senders):
    """Every frame `client` has once the broker handled what `senders` sent: a PING round
    trip on each sender, then one on the client (the broker answers it after everything it
    had for the client), never a quiet period."""
    for sender in senders:
        await sender.ping()
    return await client.received()
