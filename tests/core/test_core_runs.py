"""Property: a run of messages of one subject published as one (Stream.publish_run), or of
mixed subjects put as one (Queue.put_run), through the round-robin run shortcuts and a
consumer's deliver_run, ends exactly as publishing (putting) them one by one, and a run of
acks (Consumer.ack_run) as acking them one by one: which client got which message, in which
order, with which retry count, and what every queue, consumer, stream and flow counter says
after each step. Bindings, readers, modes, limits, pauses, credit, manual acks, filters
(the filtered run shortcut) and consumers that take runs, refuse long ones or take none are
drawn at random."""
import re

from hypothesis import given, settings, strategies as st

from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.core.queue import PUSH_ALL, ROUND_ROBIN
from tests.support.inputs import Input

SUBJECTS = ("a", "b", "c")
QUEUES = ("q0", "q1", "q2")
CLIENTS = 2
READ_A = re.compile("a")
FILTERS = (None, None, READ_A, re.compile("[ab]"))


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
    "put": (range(len(QUEUES)), (("a",), ("a", "b"), ("b", "a", "c")), range(1, 7)),
    "bind": (range(len(QUEUES)), range(8)),
    "join": (range(len(QUEUES)), range(CLIENTS), (False, True), (None, None, None, 1, 3),
             ("runs", "runs", "short", None), FILTERS),
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
KINDS = (["publish"] * 5 + ["put"] * 2 + ["bind"] * 2 + ["join"] * 2 + ["pause"] * 2
         + ["settle"] * 2 + ["leave", "credit", "reshape", "reader", "delete", "tick"])


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
    elif kind == "put":                      # Queue.put_run itself, subjects mixed
        index, subjects, count = args
        queue = w.broker.queues.get(QUEUES[index])
        if queue is None:
            return
        messages = []
        for k in range(count):
            w.n += 1
            messages.append(Message(str(w.n), subjects[k % len(subjects)], (b"x",)))
        if w.runs:
            w.log.append(("put", queue.put_run(messages, w.publisher)))
        else:
            w.log.append(("put", sum(queue.put_message(m, None, w.publisher)
                                     for m in messages)))
    elif kind == "bind":
        index, mask = args
        w.stream.set_bindings(QUEUES[index], [s for k, s in enumerate(SUBJECTS)
                                              if mask >> k & 1])
        w.stream.queues_changed()
    elif kind == "join":
        index, client, manual, credit, runs, pattern = args
        queue = w.broker.queue(QUEUES[index], ack_timeout=5.0)
        c = Consumer(f"c{len(w.consumers)}", w.clients[client], w.deliver,
                     manual_ack=manual, credit=credit, tag=runs,
                     deliver_run=w.deliver_run if runs else None, filter=pattern)
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
SETUPS = ([], [("bind", 0, 1), ("bind", 1, 1), ("join", 0, 0, False, None, "runs", None),
               ("join", 1, 1, True, None, "runs", None)],
          [("bind", 0, 3), ("bind", 1, 1), ("bind", 2, 1),
           ("join", 0, 0, False, None, "runs", None), ("join", 1, 1, False, None, "short", None),
           ("join", 2, 0, False, None, "runs", None)],
          [("bind", 0, 3), ("bind", 1, 3), ("join", 0, 0, False, None, "runs", READ_A),
           ("join", 1, 1, True, None, "runs", FILTERS[3])])


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


def test_a_filtered_run_is_handed_over_whole():
    """A lone filtered consumer (a Malamute worker) matching the run's subject gets it in
    one deliver_run call (one search per subject); one it does not match gets none."""
    w = World(True, None)
    calls = []
    queue = w.broker.queue("q0")
    w.stream.set_bindings("q0", ["a", "b"])
    c = Consumer("c", w.clients[0], w.deliver, filter=READ_A,
                 deliver_run=lambda c, ms: calls.append(len(ms)) or True)
    w.broker.add_consumer(queue, c)
    w.stream.publish_run([Message(str(i), "a", (b"x",)) for i in range(5)], w.publisher)
    w.stream.publish_run([Message(str(i), "b", (b"x",)) for i in range(5, 8)], w.publisher)
    assert calls == [5] and queue.delivered == c.delivered == 5 and len(queue) == 3


class Mail:
    """One broker's mailbox and its owner; what the owner got, logged."""

    def __init__(self, runs, limit):
        self.runs = runs                  # hand_run first (the door's way) or send one by one
        self.box = Broker(FakeClock()).mailbox("box")
        self.box.limit_bytes = limit
        self.owner = Client("owner", "t")
        self.got, self.log, self.n, self.tag = [], [], 0, None

    def deliver(self, box, message):
        self.got.append(message.id)

    def deliver_run(self, box, messages):
        """Takes a run whole, unless the owner was attached as "short" and it is long."""
        if self.tag == "short" and len(messages) > 2:
            return False
        self.got.extend(m.id for m in messages)
        return True

    def apply(self, operation):
        kind, count, tag = operation
        box = self.box
        if kind == "send":
            messages = []
            for _ in range(count):
                self.n += 1
                messages.append(Message(str(self.n), "s", (b"x" * 3,)))
            if self.runs and box.hand_run(messages):
                self.log.append(["delivered"] * count)
            else:
                self.log.append([box.send(m) for m in messages])
        elif kind == "pause":
            self.owner.resume() if self.owner.paused else self.owner.pause()
        elif kind == "attach":
            self.tag = tag
            box.attach(self.owner, self.deliver,
                       deliver_run=self.deliver_run if tag is not None else None)
        else:
            box.detach(self.owner)

    def state(self):
        box = self.box
        return (self.got, self.log, box.delivered, box.dropped, box.bytes,
                [m.id for m in box.stored])


MAIL = st.tuples(st.sampled_from(["send"] * 4 + ["pause", "pause", "attach", "detach"]),
                 st.integers(1, 5), st.sampled_from(["runs", "runs", "short", None]))


@settings(max_examples=300, deadline=None)
@given(limit=st.sampled_from([None, 20]), operations=st.lists(MAIL, min_size=5, max_size=40))
def test_mailbox_hand_run_is_send_one_by_one(limit, operations):
    """Mailbox.hand_run (a run of mail to a live owner whose door takes runs, at once) ends
    as sending each: what the owner got, in order, and what the mailbox holds and counts."""
    fast, plain = Mail(True, limit), Mail(False, limit)
    for step, operation in enumerate([("attach", 1, "runs")] + operations):
        for world in (fast, plain):
            world.apply(operation)
        assert fast.state() == plain.state(), (step, operation)
