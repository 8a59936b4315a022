"""The broker model every door maps onto: streams, queues, mailboxes, channels, clients.

Pure Python: no sockets, no reactor. Time comes from an injected clock so tests can
drive timers deterministically (see core.clock.FakeClock).
"""
from mqksbridge.core.broker import Broker
from mqksbridge.core.client import Client
from mqksbridge.core.clock import Clock, FakeClock
from mqksbridge.core.consumer import Consumer
from mqksbridge.core.message import Entry, Message
from mqksbridge.core.permissions import Denied, Principal, Rules, Taken
from mqksbridge.core.queue import Queue, QueueError
from mqksbridge.core.stream import Stream

__all__ = ["Broker", "Client", "Clock", "FakeClock", "Consumer", "Denied", "Entry", "Message",
           "Principal", "Queue", "QueueError", "Rules", "Stream", "Taken"]
