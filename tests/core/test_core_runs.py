"""Property: a run of messages of one subject published as one (Stream.publish_run,
Queue.put_run, the round-robin run shortcut and a consumer's deliver_run) ends exactly as
publishing them one by one with Stream.publish, and a run of acks (Consumer.ack_run) as
acking them one by one: which client got which message, in which
order, with which retry count, and what every queue, consumer, stream and flow counter says
after each step. Bindings, readers, modes, limits, pauses, credit, manual acks and consumers
that take runs, refuse long ones or take none are drawn at random."""
import re

from hypothesis import given, settings, strategies as st

from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.core.queue import PUSH_ALL, ROUND_ROBIN
from tests.support.inputs import Input

SUBJECTS = ("a", "b", "c")
QUEUES = ("q0", "q1", "q2")
CLIENTS = 2
READ_A = re.compile("a")


class World:
    """One broker, one stream bound to up to three queues; every hand-over logged."""

    def __init__(self, runs, flow_limit):
        self.runs = runs                  # publish as runs (the fast path) or one by one
        self.broker = Broker(FakeClock(), flow_limit=flow_limit)
        self.clock = self.broker.clock
        self.stream = self.broker.stream("s")
        self.clients = [Client(f"cl{i}", "t") for i in range(CLIENTS)]
        self.publisher = Client("pub", "t")
        self.publisher.input = Input()
        self.consumers = []
        self.log = []                     # what the publisher hears
        self.got = {client: [] for client in self.clients}     # what each client gets
        self.n = 0

    def deliver(self, consumer, entry):
        self.got[consumer.client].append((consumer.id, entry.message.id, entry.retry,
                                          entry.deliveries))

    def deliver_run(self, consumer, messages):
        """Takes a run whole; a consumer tagged "short" refuses runs of more than two."""
        if consumer.tag == "short" and len(messages) > 2:
            return False
        self.got[consumer.client].extend((consumer.id, m.id, 0, 1) for m in messages)
        return True

    def read(self, stream, message):
        self.got[self.clients[0]].append(("read", message.id))

    def state(self):
        queues = []
        for name, q in sorted(self.broker.queues.items()):
            queues.append((name, q.received, q.delivered, q.acked, q.requeued, q.dropped,
                           q.outstanding, q.turn % len(q.consumers) if q.consumers else 0,
                           [e.message.id for e in q.entries],
                           [(c.id, c.delivered, c.credit, sorted(c.unacked),
                             [e.deliveries for _, e in sorted(c.unacked.items())])
                            for c in q.consumers]))
        s = self.stream
        return (queues, [self.got[c] for c in self.clients], s.published, s.unrouted, s.refused,
                s.refused_by.name if s.refused_by is not None else None,
                self.broker.flow.holds, sorted(q.name for q in self.publisher.held))


CHOICES = {
    "publish": (SUBJECTS, range(1, 7), range(3)),
    "bind": (range(len(QUEUES)), range(8)),
    "join": (range(len(QUEUES)), range(CLIENTS), (False, True), (None, None, None, 1, 3),
             ("runs", "runs", "short", None)),
    "leave": (range(8),),
    "pause": (range(CLIENTS),),
    "credit": (range(8), range(1, 4)),
    "settle": (range(8), ("ack", "reject", "ack_all", "ack_run"), range(8)),
    "reshape": (range(len(QUEUES)), (("max_messages", 2), ("max_messages", None),
                                     ("mode", PUSH_ALL), ("mode", ROUND_ROBIN),
                                     ("wait_for_ack", True), ("wait_for_ack", False))),
    "reader": (range(CLIENTS),),
    "delete": (range(len(QUEUES)),),
    "tick": ((1.0, 6.0),),
}
KINDS = (["publish"] * 5 + ["bind"] * 2 + ["join"] * 2 + ["pause"] * 2 + ["settle"] * 2
         + ["leave", "credit", "reshape", "reader", "delete", "tick"])


def operation(kind, seed):
    """(kind, *arguments), each argument chosen by the next digits of `seed`."""
    arguments = []
    for choices in CHOICES[kind]:
        seed, digit = divmod(seed, len(choices))
        arguments.append(choices[digit])
    return (kind, *arguments)


OPERATION = st.builds(operation, st.sampled_from(KINDS), st.integers(0, 2**24))


def run(w, operation):
    kind, *args = operation
    if kind == "publish":
        subject, count, size = args
        messages = []
        for _ in range(count):
            w.n += 1
            messages.append(Message(str(w.n), subject, (b"x" * size,)))
        if w.runs:
            copies = w.stream.publish_run(messages, w.publisher)
        else:
            copies = sum(w.stream.publish(m, w.publisher) for m in messages)
        w.log.append(("copies", copies))
    elif kind == "bind":
        index, mask = args
        w.stream.set_bindings(QUEUES[index], [s for k, s in enumerate(SUBJECTS)
                                              if mask >> k & 1])
        w.stream.queues_changed()
    elif kind == "join":
        index, client, manual, credit, runs = args
        queue = w.broker.queue(QUEUES[index], ack_timeout=5.0)
        c = Consumer(f"c{len(w.consumers)}", w.clients[client], w.deliver,
                     manual_ack=manual, credit=credit, tag=runs,
                     deliver_run=w.deliver_run if runs else None)
        w.consumers.append(c)
        w.broker.add_consumer(queue, c)
        w.stream.queues_changed()
    elif kind == "pause":
        client = w.clients[args[0]]
        client.resume() if client.paused else client.pause()
    elif kind == "reshape":
        queue = w.broker.queues.get(QUEUES[args[0]])
        option, value = args[1]
        if queue is None:
            return
        if option == "mode":
            queue.set_mode(value)
        else:
            queue.configure(**{option: value})
    elif kind == "reader":
        w.stream.add_reader(w.clients[args[0]], "r", READ_A, w.read)
    elif kind == "delete":
        if QUEUES[args[0]] in w.broker.queues:
            w.broker.delete_queue(QUEUES[args[0]])
            w.stream.queues_changed()
    elif kind == "tick":
        w.clock.advance(args[0])
        w.broker.tick()
    else:
        live = [c for c in w.consumers if c.queue is not None]
        if not live:
            return
        c = live[args[0] % len(live)]
        if kind == "leave":
            w.broker.remove_consumer(c)
        elif kind == "credit":
            c.add_credit(args[1])
        elif args[1] == "ack_all":
            c.ack_all()
        elif args[1] == "ack_run":           # a door's run of acks, an unknown id among them
            ids = sorted(c.unacked)[:args[2] % 4 + 1] + ["unknown"]
            if w.runs:
                w.log.append(("missing", c.ack_run(ids)))
            else:
                w.log.append(("missing", [i for i in ids if not c.ack(i)]))
        elif c.unacked:
            mid = sorted(c.unacked)[args[2] % len(c.unacked)]
            c.reject(mid) if args[1] == "reject" else c.ack(mid)


# Starting points: queues bound to one subject, consumed by one client or by both.
SETUPS = ([], [("bind", 0, 1), ("bind", 1, 1), ("join", 0, 0, False, None, "runs"),
               ("join", 1, 1, True, None, "runs")],
          [("bind", 0, 3), ("bind", 1, 1), ("bind", 2, 1), ("join", 0, 0, False, None, "runs"),
           ("join", 1, 1, False, None, "short"), ("join", 2, 0, False, None, "runs")])


@settings(max_examples=600, deadline=None)
@given(flow_limit=st.sampled_from([None, None, 2]), setup=st.sampled_from(SETUPS),
       operations=st.lists(OPERATION, min_size=10, max_size=60))
def test_publish_run_is_publish_one_by_one(flow_limit, setup, operations):
    fast, plain = World(True, flow_limit), World(False, flow_limit)
    for step, operation in enumerate(setup + operations):
        for world in (fast, plain):
            run(world, operation)
        assert fast.log == plain.log, (step, operation)
        assert fast.state() == plain.state(), (step, operation)


def test_a_run_is_handed_over_whole():
    """The property above only proves something if runs do take the shortcut: a lone
    ready consumer that takes runs gets a run in one deliver_run call."""
    w = World(True, None)
    calls = []
    queue = w.broker.queue("q0")
    w.stream.set_bindings("q0", ["a"])
    c = Consumer("c", w.clients[0], w.deliver,
                 deliver_run=lambda c, ms: calls.append(len(ms)) or True)
    w.broker.add_consumer(queue, c)
    w.stream.publish_run([Message(str(i), "a", (b"x",)) for i in range(5)], w.publisher)
    assert calls == [5] and queue.delivered == c.delivered == 5


def test_a_fan_out_run_goes_queue_by_queue():
    """Two queues, a client each: each consumer gets the run in one call."""
    w = World(True, None)
    calls = []
    for k in range(2):
        w.stream.set_bindings(f"q{k}", ["a"])
        w.broker.add_consumer(w.broker.queue(f"q{k}"), Consumer(
            f"c{k}", w.clients[k], w.deliver,
            deliver_run=lambda c, ms: calls.append((c.id, len(ms))) or True))
    w.stream.publish_run([Message(str(i), "a", (b"x",)) for i in range(5)], w.publisher)
    assert calls == [("c0", 5), ("c1", 5)]
