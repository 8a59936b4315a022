"""Declaring a quorum queue that another gateway may have declared first."""
import pika.exceptions
from twisted.internet import defer
from twisted.logger import Logger

log = Logger(namespace="mqksbridge.cluster")


@defer.inlineCallbacks
def declare_queue(channel, open_channel, name, arguments, what):
    """Declare `name` on `channel`; the channel still open afterwards (a Deferred). A
    queue the cluster has with other arguments (406 PRECONDITION_FAILED: another gateway,
    configured otherwise, declared it first) is taken as it is: RabbitMQ closed `channel`
    on the refusal, so a new one from `open_channel()` checks that it exists (a passive
    declare) and is returned instead."""
    try:
        yield channel.queue_declare(name, durable=True, arguments=arguments)
        return channel
    except pika.exceptions.ChannelClosedByBroker as refused:
        if refused.reply_code != 406:
            raise
        log.warn("{what} exists in the cluster with other options ({why}): kept as it is",
                 what=what, why=refused.reply_text)
    channel = yield open_channel()
    yield channel.queue_declare(name, passive=True)
    return channel
