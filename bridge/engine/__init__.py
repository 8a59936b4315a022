"""The engine seam: the one interface every door reaches the broker through.

A door (bridge/<door>/) turns its protocol into calls on an engine and the engine's
deliveries and events back into its protocol; it never imports core/ itself. Today the
engine is the embedded core (bridge.engine.embedded: core.broker plus the journal's
confirmations); a cluster engine (a broker of brokers, RabbitMQ behind pika) implements
the same interface, and tests/engine/ is the contract both must pass.
docs/engine.md is the page for whoever writes the next one.

What doors need of the core's model comes from here too (messages, clients, consumers,
the delivery modes, permission words), so that the model is the engine's, whichever
engine runs.
"""
from mqksbridge.bridge.engine.interface import IEngine
from mqksbridge.bridge.engine.embedded import EmbeddedEngine
from mqksbridge.core import Client, Consumer, Message
from mqksbridge.core.cache import bounded
from mqksbridge.core.channel import numbered, queue_name
from mqksbridge.core.mailbox import DROPPED
from mqksbridge.core.permissions import (
    BROKER, CONSUME, MAILBOX, MANAGE, PUBLISH, QUEUE, STREAM, Denied, Taken, check)
from mqksbridge.core.queue import (
    BROADCAST, CACHE, PAUSED, PULL, PUSH_ALL, ROUND_ROBIN, STOPPED)
from mqksbridge.core.stream import DISTRIBUTE, ONLY_FIRST

__all__ = [
    "IEngine", "EmbeddedEngine",
    "Client", "Consumer", "Message", "bounded", "numbered",
    "queue_name", "DROPPED",
    "BROKER", "CONSUME", "MAILBOX", "MANAGE", "PUBLISH", "QUEUE", "STREAM", "Denied", "Taken",
    "check",
    "BROADCAST", "CACHE", "PAUSED", "PULL", "PUSH_ALL", "ROUND_ROBIN", "STOPPED",
    "DISTRIBUTE", "ONLY_FIRST",
]
