"""Property: whatever consumers do, a queue never loses or duplicates a message."""
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message


class QueueMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.broker = Broker(FakeClock())
        self.queue = self.broker.queue("q")
        self.consumers = []
        self.put = 0
        self.done = set()         # ids acked, or delivered to auto-ack consumers
        self.order = []           # (consumer, id) in delivery order for auto-ack
        self.n = 0

    def _deliver(self, consumer, entry):
        if not consumer.manual_ack:
            mid = entry.message.id
            assert mid not in self.done, f"{mid} delivered twice"
            self.done.add(mid)

    @rule(manual=st.booleans(), slow=st.booleans())
    def add_consumer(self, manual, slow):
        self.n += 1
        client = Client(f"cl{self.n}", "t")
        client.paused = slow
        c = Consumer(f"c{self.n}", client, self._deliver, manual_ack=manual)
        self.broker.add_consumer(self.queue, c)
        self.consumers.append(c)

    @rule(count=st.integers(1, 5))
    def publish(self, count):
        for _ in range(count):
            self.queue.put_message(Message(str(self.put), "e", (b"x",)))
            self.put += 1

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def remove_consumer(self, data):
        c = data.draw(st.sampled_from(self.consumers))
        self.consumers.remove(c)
        self.broker.remove_consumer(c)

    @precondition(lambda self: self.consumers)
    @rule(data=st.data(), reject=st.booleans())
    def settle_one(self, data, reject):
        c = data.draw(st.sampled_from(self.consumers))
        if not c.unacked:
            return
        mid = data.draw(st.sampled_from(sorted(c.unacked)))
        if reject:
            c.reject(mid)
        else:
            assert mid not in self.done
            c.ack(mid)
            self.done.add(mid)

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def toggle_pause(self, data):
        c = data.draw(st.sampled_from(self.consumers))
        if c.client.paused:
            c.client.resume()
        else:
            c.client.pause()

    @invariant()
    def conserved(self):
        queued = [e.message.id for e in list(self.queue.priority) + list(self.queue.entries)]
        unacked = [mid for c in self.consumers for mid in c.unacked]
        everything = queued + unacked + list(self.done)
        assert len(everything) == len(set(everything)), "a message is in two places"
        assert len(everything) == self.put, "a message was lost"


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
