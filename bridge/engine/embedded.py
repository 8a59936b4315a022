"""The embedded engine: the core broker in this process, its durable queues' journals
behind the storage barrier (bridge.journal), as IEngine.

It is the core's Broker with the engine's verbs added, not a wrapper around one: doors'
hot paths reach queues as directly as before, and nothing is forwarded per message.
"""
from twisted.internet import defer
from zope.interface import implementer

from mqksbridge.bridge.engine.interface import IEngine
from mqksbridge.bridge.engine.verbs import ConsumerVerbs
from mqksbridge.core.broker import Broker


@implementer(IEngine)
class EmbeddedEngine(ConsumerVerbs, Broker):
    """core.broker.Broker as IEngine (bridge.engine.interface)."""

    def members(self, channel):
        return [client for client, _ in channel.members.values()]

    def publish(self, queue, message, publisher=None, observer=None, confirm=False):
        """A put on the queue; with `confirm`, the Deferred of IEngine.publish. A durable
        queue's journal takes the message's record in the put (core.storage: `appended`
        moves); the confirmation waits for the barrier to pass the last record appended
        so far, this one's or an earlier publish's, which keeps confirmations in publish
        order without a token per message."""
        if isinstance(queue, str):
            queue = self.queue(queue)
        accepted = queue.put_message(message, observer, publisher)
        if not confirm:
            return accepted
        if not accepted:
            return defer.succeed(False)
        confirmed = defer.Deferred()
        self.storage.when_stored(self.storage.appended, lambda: confirmed.callback(True))
        return confirmed
