"""The engine contract's delivery rules, as a state machine over IEngine's verbs only.

Hypothesis drives each engine of tests/engine/conftest.py's ENGINES that answers in the
call (`at_once`): publishes to a durable
round-robin queue with an ack timeout, consumers coming and going (auto- or manual-ack,
with or without credit), credit, acks, nacks, requeues, time passing, commits, and
crashes (a new engine on the same data). After every step:

- nothing is lost until it is settled (acked, nacked, or handed to an auto-ack consumer):
  it is stored in the queue or held by exactly one consumer;
- a consumer is never handed more than the credit it was given;
- nothing waits in the queue that a ready consumer could take;
- after a crash, what was outstanding at the last commit is stored again.
"""
import shutil
import tempfile

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mqksbridge.bridge.engine import Client, Consumer, Message
from tests.engine.conftest import ENGINES

ACK_TIMEOUT = 5.0


class Delivery(RuleBasedStateMachine):
    factory = None

    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="engine-contract-")
        self.under = self.factory(None, self.directory)
        self.name = self.under.durable_prefix + "jobs"
        self.sent = 0
        self.outstanding = set()         # accepted, not settled
        self.committed = None            # `outstanding` at the last commit
        self._begin()

    def _begin(self):
        self.engine = self.under.engine
        self.queue = self.engine.queue(self.name, ack_timeout=ACK_TIMEOUT)
        self.consumers = []              # (consumer, granted credit or None, handed count)

    def teardown(self):
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- steps ------------------------------------------------------------------------------
    @rule()
    def publish(self):
        self.sent += 1
        message = Message(f"m{self.sent}", "s", (b"x",))
        self.outstanding.add(message.id)     # before: an auto-ack consumer takes it in the put
        if not self.engine.publish(self.queue, message):
            self.outstanding.discard(message.id)

    @rule(manual=st.booleans(), credit=st.one_of(st.none(), st.integers(0, 3)))
    def consume(self, manual, credit):
        record = {"credit": credit, "handed": 0}

        def deliver(consumer, entry):
            record["handed"] += 1
            if not consumer.manual_ack:
                self.outstanding.discard(entry.message.id)
        consumer = Consumer(f"c{len(self.consumers)}", Client(f"k{len(self.consumers)}", "test"),
                            deliver, manual_ack=manual, credit=credit)
        self.consumers.append((consumer, record))
        self.engine.consume(self.queue, consumer)

    def _pick(self, data, credited=False):
        live = [(c, r) for c, r in self.consumers if c.queue is not None
                and (not credited or r["credit"] is not None)]
        return data.draw(st.sampled_from(live)) if live else (None, None)

    @rule(data=st.data(), n=st.integers(1, 3))
    def credit(self, data, n):
        consumer, record = self._pick(data, credited=True)
        if consumer is not None:
            record["credit"] += n
            self.engine.credit(consumer, n)

    @rule(data=st.data(), verdict=st.sampled_from(["ack", "nack", "requeue"]))
    def settle(self, data, verdict):
        consumer, _ = self._pick(data)
        if consumer is None or not consumer.unacked:
            return
        message_id = data.draw(st.sampled_from(sorted(consumer.unacked)))
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
            self.engine.cancel(consumer)

    @rule(seconds=st.sampled_from([1.0, ACK_TIMEOUT]))
    def advance(self, seconds):
        self.under.advance(seconds)

    @rule()
    def commit(self):
        self.under.commit()
        self.committed = set(self.outstanding)

    @precondition(lambda self: self.committed is not None)
    @rule()
    def crash(self):
        """What was outstanding at the last commit comes back; later work may be lost."""
        self.under = self.under.restart()
        self._begin()
        stored = self.stored_ids()
        assert self.committed & self.outstanding <= stored
        self.outstanding, self.committed = stored, None

    def stored_ids(self):
        """Ids the queue holds, seen through the verbs: a probe takes them all and hands
        them back."""
        probe = Consumer("probe", Client("probe", "test"), lambda c, e: None, manual_ack=True)
        self.engine.consume(self.queue, probe)
        ids = set(probe.unacked)
        self.engine.cancel(probe)
        return ids

    # -- what must hold -----------------------------------------------------------------------
    @invariant()
    def nothing_is_lost(self):
        held = [m for c, _ in self.consumers if c.queue is not None for m in c.unacked]
        assert len(held) == len(set(held)), "a message held by two consumers"
        assert len(self.queue) + len(held) == len(self.outstanding)
        assert set(held) <= self.outstanding

    @invariant()
    def credit_is_never_exceeded(self):
        for consumer, record in self.consumers:
            if record["credit"] is not None:
                assert record["handed"] <= record["credit"]

    @invariant()
    def nothing_waits_for_a_ready_consumer(self):
        if len(self.queue):
            assert not any(c.queue is not None and c.ready() for c, _ in self.consumers)


for _name, _factory in ((n, f) for n, f in ENGINES.items() if f.at_once):
    _case = type(f"Delivery_{_name}", (Delivery,), {"factory": staticmethod(_factory)})
    globals()[f"TestDelivery_{_name}"] = settings(max_examples=60, stateful_step_count=30)(
        _case).TestCase
