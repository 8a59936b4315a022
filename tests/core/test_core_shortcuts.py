"""Property: a queue's shortcuts (direct hand-over, first match, fan-out, drain, drain
matching) change nothing but speed. The same operations run on a queue with shortcuts and on
one made with shortcuts=False; who got which message, in which order, with which retry
count, what the producers' observers heard and every counter must be the same after each
step, under the core's delivery rules (docs/delivery.md): shared copies, requeue by mode,
the publisher flow control holds."""
import re

from hypothesis import given, settings, strategies as st

from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.core.queue import (BROADCAST, CACHE, PAUSED, PULL, PUSH_ALL, ROUND_ROBIN,
                                   STOPPED)
from mqksbridge.core.queues import round_robin
from tests.support.inputs import Input

SUBJECTS = ("a.1", "a.2", "b.1")
FILTERS = (None, None, None, re.compile(r"^a\."), re.compile(r"1$"), re.compile("^b"))
CLIENTS = 2


class World:
    """One broker, one queue, two clients; every hand-over and observer call logged."""

    def __init__(self, shortcuts, mode, flow_limit, most):
        self.most = most                 # consumers at a time (a lone one is _drain's case)
        self.n = 0
        self.clock = FakeClock()
        self.broker = Broker(self.clock, flow_limit=flow_limit)
        self.queue = self.broker.queue("q", mode=mode, ack_timeout=5.0, shortcuts=shortcuts)
        self.clients = [Client(f"cl{i}", "t") for i in range(CLIENTS)]
        self.consumers = []
        self.log = []
        self.publisher = Client("pub", "t")      # whose input a congested queue holds
        self.publisher.input = Input()

    def deliver(self, consumer, entry):
        self.log.append(("deliver", consumer.id, entry.message.id, entry.retry,
                         entry.deliveries))

    def observer(self, event, entry, consumer, reason, receipt):
        self.log.append((event, entry.message.id, consumer and consumer.id, reason, receipt))

    def state(self):
        q = self.queue
        return (q.received, q.delivered, q.acked, q.requeued, q.dropped, q.expired, q.bytes,
                q.outstanding, q.turn % len(q.consumers) if q.consumers else 0,
                [e.message.id for e in q.priority], [e.message.id for e in q.entries],
                [(c.id, c.delivered, c.credit, sorted(c.unacked)) for c in q.consumers],
                [c.client.id for c in q.consumers], self.broker.flow.holds,
                sorted(client.id for _, held in self.broker.flow.held.values()
                       for client in held))


# Operations, drawn with weights (a kind appears as often as it is listed), each with an
# integer its arguments are read from (two draws per operation keep generation cheap).
# Consumers are named by an index taken modulo the live ones, so any list is valid.
CHOICES = {
    "put": (SUBJECTS, (False, False, False, True), (False, True), range(4), range(1, 5)),
    "join": (range(CLIENTS), (False, True), FILTERS, (None, None, None, 0, 1, 3)),
    "leave": (range(8),),
    "pause": (range(CLIENTS),),
    "credit": (range(8), range(1, 4)),
    "settle": (range(8), ("ack", "reject", "nack", "ack_all", "reject_all"), range(8),
               (None, "receipt")),
    "reshape": ((("wait_for_ack", True), ("wait_for_ack", False), ("only_first", True),
                 ("only_first", False), ("max_messages", 4), ("max_messages", None),
                 ("mode", ROUND_ROBIN), ("mode", PUSH_ALL), ("mode", BROADCAST),
                 ("mode", PULL), ("mode", CACHE), ("mode", PAUSED), ("mode", STOPPED)),),
    "tick": ((1.0, 6.0),),
}
KINDS = ["put"] * 4 + ["pause"] * 3 + ["join", "join", "settle", "settle", "leave", "credit",
                                      "reshape", "tick"]


def operation(kind, seed):
    """(kind, *arguments), each argument chosen by the next digits of `seed`."""
    arguments = []
    for choices in CHOICES[kind]:
        seed, digit = divmod(seed, len(choices))
        arguments.append(choices[digit])
    return (kind, *arguments)


OPERATION = st.builds(operation, st.sampled_from(KINDS), st.integers(0, 2**24))


def run(w, operation, live):
    """Apply one operation to one world; `live` lists the indexes of its consumers."""
    kind, *args = operation
    if kind == "put":
        subject, priority, observed, size, count = args
        for _ in range(count):
            w.n += 1
            w.queue.put_message(Message(str(w.n), subject, (b"x" * size,), priority=priority),
                                w.observer if observed else None, w.publisher)
    elif kind == "join":
        client, manual, filter, credit = args
        if len(live) < w.most:
            c = Consumer(f"c{len(w.consumers)}", w.clients[client], w.deliver,
                         manual_ack=manual, filter=filter, credit=credit)
            live.append(len(w.consumers))
            w.consumers.append(c)
            w.broker.add_consumer(w.queue, c)
    elif kind == "pause":
        client = w.clients[args[0]]
        client.resume() if client.paused else client.pause()
    elif kind == "reshape":
        option, value = args[0]
        if option == "mode":
            w.queue.set_mode(value)
        else:
            w.queue.configure(**{option: value})
    elif kind == "tick":
        w.clock.advance(args[0])
        w.broker.tick()
    elif live:
        index = live[args[0] % len(live)]
        c = w.consumers[index]
        if kind == "leave":
            live.remove(index)
            w.broker.remove_consumer(c)
        elif kind == "credit":
            c.add_credit(args[1])
        elif args[1].endswith("_all"):
            getattr(c, args[1])()
        elif c.unacked:
            mid = sorted(c.unacked)[args[2] % len(c.unacked)]
            if args[1] == "reject":
                c.reject(mid)
            else:
                c.ack(mid, args[1] == "ack", "why", args[3])


@settings(max_examples=1000, deadline=None)
@given(mode=st.sampled_from([ROUND_ROBIN, ROUND_ROBIN, PUSH_ALL, BROADCAST]),
       flow_limit=st.sampled_from([None, None, 1, 3]), most=st.sampled_from([1, 2, 4]),
       operations=st.lists(OPERATION, min_size=20, max_size=80))
def test_shortcuts_change_nothing_but_speed(mode, flow_limit, most, operations):
    fast, plain = World(True, mode, flow_limit, most), World(False, mode, flow_limit, most)
    live = {fast: [], plain: []}
    seen = 0
    for step, operation in enumerate(operations):
        for world in (fast, plain):
            run(world, operation, live[world])
        assert fast.log[seen:] == plain.log[seen:], (step, operation)
        seen = len(fast.log)
        assert seen == len(plain.log) and fast.state() == plain.state(), (step, operation)


def test_every_shortcut_is_taken_by_the_fast_queue(monkeypatch):
    """The property above only proves something if the fast queue does take its shortcuts:
    each one is hit by a plain scenario, and never by the plain queue."""
    taken = {}
    drain, drain_matching = round_robin._drain, round_robin._drain_matching
    for shortcuts in (True, False):
        broker = Broker(FakeClock())
        hits = taken[shortcuts] = set()
        rr, push = broker.queue("rr", shortcuts=shortcuts), broker.queue(
            "push", mode=PUSH_ALL, shortcuts=shortcuts)
        filtered = broker.queue("filtered", shortcuts=shortcuts)
        for queue, name in ((rr, "direct"), (push, "fanout"), (filtered, "first_match")):
            queue.put = _spy(queue.put, hits, name)     # the plain path
        client = Client("c", "t")
        broker.add_consumer(rr, Consumer("1", client, lambda c, e: None))
        broker.add_consumer(push, Consumer("2", client, lambda c, e: None))
        broker.add_consumer(filtered, Consumer("3", client, lambda c, e: None,
                                               filter=re.compile("a")))
        for queue in (rr, push, filtered):
            queue.put_message(Message("m", "a", (b"x",)))
        del rr.put
        client.pause()                     # a backlog for a lone consumer: _drain
        rr.put_message(Message("n", "a", (b"x",)))
        monkeypatch.setattr(round_robin, "_drain", _spy(drain, hits, "drain"))
        del filtered.put
        filtered.put_message(Message("n", "a", (b"x",)))   # and for a lone filtered one
        monkeypatch.setattr(round_robin, "_drain_matching",
                            _spy(drain_matching, hits, "drain_matching"))
        client.resume()
    assert taken[True] == {"drain", "drain_matching"}
    assert taken[False] == {"direct", "fanout", "first_match"}


def _spy(fn, hits, name):
    def spy(*args, **kwargs):
        hits.add(name)
        return fn(*args, **kwargs)
    return spy
