"""The broker model every door maps onto: streams, queues, mailboxes, channels, clients.

Pure Python: no sockets, no reactor. Time comes from an injected clock so tests can
drive timers deterministically (see core.clock.FakeClock).
"""
from core.broker import Broker
from core.client import Client
from core.clock import Clock, FakeClock
from core.consumer import Consumer
from core.message import Entry, Message
from core.queue import Queue, QueueError
from core.stream import Stream

__all__ = ["Broker", "Client", "Clock", "FakeClock", "Consumer", "Entry", "Message",
           "Queue", "QueueError", "Stream"]
