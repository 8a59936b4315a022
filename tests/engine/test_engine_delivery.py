"""The engine contract's delivery rules, as a state machine over IEngine's verbs only.

Hypothesis drives each engine of tests/engine/conftest.py's ENGINES: publishes to a
durable round-robin queue with an ack timeout, consumers coming and going (auto- or
manual-ack, with or without credit), credit, acks, nacks, requeues, time passing,
commits, and crashes (a new engine on the same data). After every step:

- nothing is lost until it is settled (acked, nacked, or handed to an auto-ack consumer):
  it is stored in the queue or held by exactly one consumer;
- a consumer is never handed more than the credit it was given;
- nothing waits in the queue that a ready consumer could take;
- after a crash, what was outstanding at the last commit is stored again.

An engine that answers in the call is judged right after each step. A networked one
(RabbitMQ) runs the machine in a thread of its own, each step on the reactor thread, and
is judged once it is steady: idle, and its lengths and deliveries in (the harness's
`steady`, bounded); credit is judged at every delivery as well, since it must never be
exceeded, not even on the way.
"""
import shutil
import tempfile

import pytest_twisted
from hypothesis import settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition, rule,
                                 run_state_machine_as_test)
from twisted.internet import threads

from mqksbridge.bridge.engine import Client, Consumer, Message
from tests.engine.conftest import Embedded, Threaded

ACK_TIMEOUT = 5.0


class Delivery(RuleBasedStateMachine):
    factory = None                       # directory -> harness

    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="engine-contract-")
        self.under = self.factory(self.directory)
        self.name = self.under.durable_prefix + "jobs"
        self.sent = 0
        self.outstanding = set()         # accepted, not settled
        self.committed = None            # `outstanding` at the last commit
        self.under.run(self._begin)

    def _begin(self):
        self.engine = self.under.engine
        self.queue = self.engine.queue(self.name, ack_timeout=ACK_TIMEOUT)
        self.consumers = []              # (consumer, granted credit or None, handed count)

    def teardown(self):
        self.under.close_now()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- steps ------------------------------------------------------------------------------
    @rule()
    def publish(self):
        self.sent += 1
        self.under.run(self._publish, Message(f"m{self.sent}", "s", (b"x",)))

    def _publish(self, message):
        self.outstanding.add(message.id)     # before: an auto-ack consumer takes it in the put
        if not self.engine.publish(self.queue, message):
            self.outstanding.discard(message.id)

    @rule(manual=st.booleans(), credit=st.one_of(st.none(), st.integers(0, 3)))
    def consume(self, manual, credit):
        self.under.run(self._consume, manual, credit)

    def _consume(self, manual, credit):
        record = {"credit": credit, "handed": 0}

        def deliver(consumer, entry):
            record["handed"] += 1
            assert record["credit"] is None or record["handed"] <= record["credit"]
            if not consumer.manual_ack:
                self.outstanding.discard(entry.message.id)
        consumer = Consumer(f"c{len(self.consumers)}", Client(f"k{len(self.consumers)}", "test"),
                            deliver, manual_ack=manual, credit=credit)
        self.consumers.append((consumer, record))
        self.engine.consume(self.queue, consumer)

    def _live(self, credited=False):
        return [(c, r) for c, r in self.consumers if c.queue is not None
                and (not credited or r["credit"] is not None)]

    def _pick(self, data, credited=False):
        live = self.under.run(self._live, credited)
        return data.draw(st.sampled_from(live)) if live else (None, None)

    @rule(data=st.data(), n=st.integers(1, 3))
    def credit(self, data, n):
        consumer, record = self._pick(data, credited=True)
        if consumer is not None:
            self.under.run(self._credit, consumer, record, n)

    def _credit(self, consumer, record, n):
        record["credit"] += n
        self.engine.credit(consumer, n)

    @rule(data=st.data(), verdict=st.sampled_from(["ack", "nack", "requeue"]))
    def settle(self, data, verdict):
        consumer, _ = self._pick(data)
        held = self.under.run(lambda: sorted(consumer.unacked)) if consumer else []
        if held:
            self.under.run(self._settle, consumer, data.draw(st.sampled_from(held)), verdict)

    def _settle(self, consumer, message_id, verdict):
        if verdict == "requeue":
            assert self.engine.requeue(consumer, message_id)
        else:
            assert self.engine.settle(consumer, message_id, verdict == "ack")
            self.outstanding.discard(message_id)
            assert not self.engine.settle(consumer, message_id)   # settled once only

    @rule(data=st.data())
    def cancel(self, data):
        consumer, _ = self._pick(data)
        if consumer is not None:
            self.under.run(self.engine.cancel, consumer)

    @rule(seconds=st.sampled_from([1.0, ACK_TIMEOUT]))
    def advance(self, seconds):
        self.under.advance(seconds)

    @rule()
    def commit(self):
        self.under.commit()
        self.committed = self.under.run(set, self.outstanding)

    @precondition(lambda self: self.committed is not None)
    @rule()
    def crash(self):
        """What was outstanding at the last commit comes back; later work may be lost."""
        self.under = self.under.restart()
        self.under.run(self._begin)
        stored = self.stored_ids()
        assert self.committed & self.outstanding <= stored
        self.outstanding, self.committed = stored, None

    def stored_ids(self):
        """Ids the queue holds, seen through the verbs: a probe takes them all and hands
        them back."""
        probe = Consumer("probe", Client("probe", "test"), lambda c, e: None, manual_ack=True)
        self.under.run(self.engine.consume, self.queue, probe)
        self.under.steady(lambda: not len(self.queue), "the probe holding every message")
        ids = self.under.run(lambda: set(probe.unacked))
        self.under.run(self.engine.cancel, probe)
        return ids

    # -- what must hold -----------------------------------------------------------------------
    def _steady(self):
        held = [m for c, _ in self.consumers if c.queue is not None for m in c.unacked]
        ready = any(c.queue is not None and c.ready() for c, _ in self.consumers)
        return (len(self.queue) + len(held) == len(self.outstanding)
                and not (len(self.queue) and ready))

    @invariant()
    def the_rules_hold(self):
        self.under.steady(self._steady, "the queue and its consumers to agree with the model")
        self.under.run(self._check)

    def _check(self):
        # nothing is lost
        held = [m for c, _ in self.consumers if c.queue is not None for m in c.unacked]
        assert len(held) == len(set(held)), "a message held by two consumers"
        assert len(self.queue) + len(held) == len(self.outstanding)
        assert set(held) <= self.outstanding
        # credit is never exceeded
        for consumer, record in self.consumers:
            if record["credit"] is not None:
                assert record["handed"] <= record["credit"]
        # nothing waits for a ready consumer
        if len(self.queue):
            assert not any(c.queue is not None and c.ready() for c, _ in self.consumers)


class Delivery_embedded(Delivery):
    factory = staticmethod(lambda directory: Embedded(None, directory))


TestDelivery_embedded = settings(max_examples=60, stateful_step_count=30)(
    Delivery_embedded).TestCase


@pytest_twisted.ensureDeferred
async def test_delivery_rules_on_rabbitmq(rabbitmq_node):
    """The same machine on a RabbitMQ node; fewer, shorter runs (each step waits for the
    network)."""
    urls = rabbitmq_node.urls()

    class Delivery_rabbitmq(Delivery):
        factory = staticmethod(lambda directory: Threaded.start(urls))
    await threads.deferToThread(
        run_state_machine_as_test, Delivery_rabbitmq,
        settings=settings(max_examples=15, stateful_step_count=20))
