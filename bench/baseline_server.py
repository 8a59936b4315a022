"""The same-session baseline: what a straightforward port of MQKS to Twisted looks like.

LineReceiver framing, one transport.write per delivery, a dict of bound queues and a
round-robin list, no batching and no backpressure: the design the broker's batching must beat.
It serves only what the benchmark sends (consume, publish, ack, ping).
"""
from collections import defaultdict, deque

from twisted.internet import protocol
from twisted.protocols.basic import LineReceiver


class State:
    def __init__(self):
        self.bindings = defaultdict(set)       # event -> queue names
        self.queues = defaultdict(deque)       # queue -> backlog of (mid, tail)
        self.consumers = defaultdict(list)     # queue -> [(cid, proto, manual)]
        self.turn = defaultdict(int)
        self.unacked = {}                      # (cid, mid) -> queue

    def deliver(self, queue, item):
        consumers = self.consumers[queue]
        if not consumers:
            self.queues[queue].append(item)
            return
        self.turn[queue] = (self.turn[queue] + 1) % len(consumers)
        cid, proto, manual = consumers[self.turn[queue]]
        mid, tail = item
        if manual:
            self.unacked[(cid, mid)] = queue
        proto.transport.write(cid + b" ok " + tail)


class Naive(LineReceiver):
    delimiter = b"\n"
    MAX_LENGTH = 1 << 20

    def __init__(self, state):
        self.state = state

    def lineReceived(self, line):
        req_id, action, data = line.rstrip().split(b" ", 2)
        confirm = data.startswith(b"--confirm ")
        if confirm:
            data = data[10:]
        getattr(self, "do_" + action.decode())(req_id, data)
        if confirm:
            self.transport.write(req_id + b" ok \n")

    def do_ping(self, req_id, data):
        self.transport.write(req_id + b" ok " + data + b"\n")

    def do_consume(self, cid, data):
        tokens = data.split(b" ")
        queue, manual = tokens[0], b"--manual-ack" in tokens
        for event in tokens[1:]:
            if not event.startswith(b"--"):
                self.state.bindings[event].add(queue)
        self.state.consumers[queue].append((cid, self, manual))
        backlog = self.state.queues[queue]
        while backlog:
            self.state.deliver(queue, backlog.popleft())

    def do_publish(self, mid, data):
        event, body = data.split(b" ", 1)
        for queue in self.state.bindings.get(event, ()):
            self.state.deliver(queue, (mid, b"%s event=%s %s\n" % (mid, event, body)))

    def do_ack(self, req_id, data):
        cid, mid = data.split(b" ", 1)
        self.state.unacked.pop((cid, mid), None)


def listen(reactor, port):
    state = State()
    factory = protocol.Factory()
    factory.buildProtocol = lambda addr: Naive(state)
    return reactor.listenTCP(port, factory, interface="127.0.0.1")
