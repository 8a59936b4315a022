"""The core model with a fake clock: no sockets, no reactor."""
import pytest

from mqksbridge.core import Broker, Client, Consumer, Entry, FakeClock, Message, QueueError
from mqksbridge.core import queue as qmod


def msg(i, subject="e1", body=b"d", **kw):
    return Message(str(i), subject, (body,), **kw)


class Sink:
    """Collects what a consumer is handed, as the door's deliver callback would."""

    def __init__(self):
        self.got = []

    def __call__(self, consumer, entry):
        self.got.append((entry.message.id, entry.retry))

    @property
    def ids(self):
        return [m for m, _ in self.got]


@pytest.fixture
def broker():
    return Broker(FakeClock())


def consumer(broker, queue, cid, manual=False, filter=None, client=None):
    client = client or Client("cl-" + cid, "test")
    sink = Sink()
    c = Consumer(cid, client, sink, manual_ack=manual, filter=filter)
    broker.add_consumer(queue, c)
    return c, sink


def test_bindings_exist_before_queue_and_messages_are_dropped_until_it_does(broker):
    s = broker.stream("mqks")
    assert s.set_bindings("q1", {"e1"}) is True
    assert s.set_bindings("q1", {"e1"}) is False
    assert s.publish(msg(1)) == 0
    q = broker.queue("q1")
    assert s.publish(msg(2)) == 1
    c, sink = consumer(broker, q, "c")
    assert sink.ids == ["2"]


def test_fan_out_one_copy_per_bound_queue(broker):
    s = broker.stream("mqks")
    sinks = []
    for i in range(3):
        s.set_bindings(f"q{i}", {"e1"})
        sinks.append(consumer(broker, broker.queue(f"q{i}"), f"c{i}")[1])
    s.publish(msg(7))
    assert [k.ids for k in sinks] == [["7"], ["7"], ["7"]]


def test_round_robin_is_strict(broker):
    q = broker.queue("q")
    a, sa = consumer(broker, q, "a")
    b, sb = consumer(broker, q, "b")
    for i in range(6):
        q.put_message(msg(i))
    assert sa.ids == ["0", "2", "4"] and sb.ids == ["1", "3", "5"]


def test_reject_goes_to_back_with_retry(broker):
    q = broker.queue("q")
    q.put_message(msg(1))
    q.put_message(msg(2))
    c, sink = consumer(broker, q, "c", manual=True)
    assert sink.got == [("1", 0), ("2", 0)]
    assert c.reject("1") is True
    assert sink.got[-1] == ("1", 1)
    assert c.reject("nope") is False
    c.reject_all()
    assert sorted(sink.got[-2:]) == [("1", 2), ("2", 1)]
    c.ack_all()
    assert c.unacked == {} and q.acked == 2


def test_unacked_return_when_consumer_leaves(broker):
    q = broker.queue("q")
    c1, s1 = consumer(broker, q, "c1", manual=True)
    q.put_message(msg(1))
    broker.remove_consumer(c1)
    q.put_message(msg(3))
    c2, s2 = consumer(broker, q, "c2", manual=True)
    assert s2.got == [("1", 1), ("3", 0)]


def test_paused_client_keeps_messages_in_queue(broker):
    q = broker.queue("q")
    client = Client("slow", "test")
    c, sink = consumer(broker, q, "c", client=client)
    client.pause()
    for i in range(1000):
        q.put_message(msg(i))
    assert sink.ids == [] and len(q) == 1000
    client.resume()
    assert len(sink.ids) == 1000 and len(q) == 0


def test_paused_consumer_is_skipped_in_rotation(broker):
    q = broker.queue("q")
    slow = Client("slow", "test")
    a, sa = consumer(broker, q, "a", client=slow)
    b, sb = consumer(broker, q, "b")
    slow.pause()
    for i in range(4):
        q.put_message(msg(i))
    assert sa.ids == [] and sb.ids == ["0", "1", "2", "3"]


def test_when_unused_bare_deletes_at_once(broker):
    q = broker.queue("q", when_unused=True)
    c, _ = consumer(broker, q, "c")
    broker.remove_consumer(c)
    assert "q" not in broker.queues


def test_when_unused_timer_and_cancel(broker):
    clock = broker.clock
    q = broker.queue("q", when_unused=1.0)
    c, _ = consumer(broker, q, "c")
    broker.remove_consumer(c)
    clock.advance(0.5)
    c2, _ = consumer(broker, q, "c2")      # a consume within the window cancels it
    clock.advance(2)
    assert "q" in broker.queues
    broker.remove_consumer(c2)
    clock.advance(0.99)
    assert "q" in broker.queues
    clock.advance(0.02)
    assert "q" not in broker.queues


def test_queue_without_setting_keeps_collecting(broker):
    q = broker.queue("q")
    c, _ = consumer(broker, q, "c")
    broker.remove_consumer(c)
    q.put_message(msg(9))
    assert "q" in broker.queues and len(q) == 1


def test_delete_queue_cancels_consumers_and_bindings(broker):
    s = broker.stream("mqks")
    s.set_bindings("q", {"e1", "e2"})
    q = broker.queue("q")
    cancelled = []
    client = Client("x", "test")
    c = Consumer("c", client, Sink(), on_cancel=cancelled.append)
    broker.add_consumer(q, c)
    assert broker.delete_queue("q") is True
    assert cancelled == [c] and client.consumers == {} and s.exact == {}
    assert broker.delete_queue("q") is False


def test_filters_round_robin_among_matching_and_unmatched_wait(broker):
    class Prefix:
        def __init__(self, p):
            self.p = p

        def search(self, s):
            return s.startswith(self.p)
    q = broker.queue("svc")
    w0, s0 = consumer(broker, q, "w0", filter=Prefix("r"))
    w1, s1 = consumer(broker, q, "w1", filter=Prefix("r"))
    for i in range(6):
        q.put_message(msg(i, subject="req"))
    q.put_message(msg("c1", subject="calc"))
    assert s0.ids == ["0", "2", "4"] and s1.ids == ["1", "3", "5"]
    assert len(q) == 1
    w2, s2 = consumer(broker, q, "w2", filter=Prefix("c"))   # a new offer picks it up
    assert s2.ids == ["c1"] and len(q) == 0


def test_filtered_direct_hand_over_matches_the_stored_path(broker):
    """put_message's shortcut for filtered queues rotates, skips paused or creditless
    consumers and unfiltered ones take anything, exactly like a stored dispatch."""
    class Prefix:
        def __init__(self, p):
            self.p = p

        def search(self, s):
            return s.startswith(self.p)
    subjects = ["req", "calc", "req", "req", "x", "req", "calc"]
    results = []
    for stored in (False, True):
        q = broker.queue(f"svc-{stored}")
        paused = Client("paused", "t")
        paused.pause()
        sinks = [consumer(broker, q, "w0", filter=Prefix("r"))[1],
                 consumer(broker, q, "p", filter=Prefix(""), client=paused)[1],
                 consumer(broker, q, "w1", filter=Prefix("c"))[1],
                 consumer(broker, q, "any")[1]]
        q.consumers[2].credit = 1
        if stored:
            q.set_mode(qmod.PAUSED)
        for i, subject in enumerate(subjects):
            q.put_message(msg(i, subject=subject))
        if stored:
            q.set_mode(qmod.ROUND_ROBIN)
        results.append([sink.ids for sink in sinks])
    assert results[0] == results[1] == [["0", "3", "5"], [], ["1"], ["2", "4", "6"]]


def test_push_all_stores_until_member_then_delivers_to_all(broker):
    q = broker.queue("ch/1", mode=qmod.PUSH_ALL)
    q.put_message(msg(1))
    a, sa = consumer(broker, q, "a")
    b, sb = consumer(broker, q, "b")
    q.put_message(msg(2))
    assert sa.ids == ["1", "2"] and sb.ids == ["2"]


def test_broadcast_never_stores(broker):
    q = broker.queue("b", mode=qmod.BROADCAST)
    dropped = []
    q.put(Entry(msg(1), observer=lambda ev, e, c, r, receipt: dropped.append((ev, r))))
    assert len(q) == 0 and dropped == [("dropped", "no-consumers")]
    a, sa = consumer(broker, q, "a")
    q.put_message(msg(2))
    assert sa.ids == ["2"]


def test_pull_priority_first_lifo_and_clear(broker):
    q = broker.queue("p", mode=qmod.PULL)
    for i in range(5):
        q.put_message(msg(i))
    q.put_message(msg("P", priority=True))
    c, sink = consumer(broker, q, "c")
    assert sink.ids == []
    assert [e.message.id for e in q.pull(c, 3, lifo=True)] == ["P", "4", "3"]
    assert [e.message.id for e in q.pull(c, 1, clear=True)] == ["0"]
    assert len(q) == 0


def test_cache_keeps_latest_only(broker):
    q = broker.queue("c", mode=qmod.CACHE)
    for i in range(3):
        q.put_message(msg(i))
    assert [e.message.id for e in q.entries] == ["2"]


def test_stopped_refuses_and_clears(broker):
    q = broker.queue("s")
    q.put_message(msg(1))
    q.set_mode(qmod.STOPPED)
    assert len(q) == 0
    with pytest.raises(QueueError) as err:
        q.put(__import__("core").Entry(msg(2)), strict=True)
    assert err.value.reason == "stopped"
    assert q.put_message(msg(3)) is False


def test_limits(broker):
    q = broker.queue("l", max_messages=2, max_message_size=4)
    assert q.refusal(msg(1, body=b"12345")) == "too-large"
    assert q.put_message(msg(1)) and q.put_message(msg(2))
    assert q.put_message(msg(3)) is False and q.dropped == 1


def test_paused_mode_holds_until_resumed(broker):
    q = broker.queue("x", mode=qmod.PAUSED)
    c, sink = consumer(broker, q, "c")
    q.put_message(msg(1))
    assert sink.ids == []
    q.set_mode(qmod.ROUND_ROBIN)
    assert sink.ids == ["1"]


def test_ack_timeout_requeues_via_tick(broker):
    q = broker.queue("t", ack_timeout=15)
    c, sink = consumer(broker, q, "c", manual=True)
    q.put_message(msg(1))
    broker.clock.advance(14)
    broker.tick()
    assert sink.got == [("1", 0)]
    broker.clock.advance(2)
    broker.tick()
    assert sink.got == [("1", 0), ("1", 1)]


def test_ack_timeout_nacks_the_observer_and_requeues(broker):
    q = broker.queue("t", ack_timeout=1)
    c, sink = consumer(broker, q, "c", manual=True)
    events = []
    q.put(Entry(msg(1), observer=lambda ev, e, c, r, receipt: events.append((ev, r))))
    broker.clock.advance(2)
    broker.tick()
    assert events == [("sent", None), ("nack", "timeout")]  # the verdict: then nothing more
    assert sink.got == [("1", 0), ("1", 1)]           # handed back: the next one has it


def test_ack_timeout_of_a_push_all_copy_settles_it_for_that_consumer(broker):
    q = broker.queue("t", mode=qmod.PUSH_ALL, ack_timeout=1)
    a, sa = consumer(broker, q, "a", manual=True)
    b, sb = consumer(broker, q, "b", manual=True)
    q.put_message(msg(1))
    b.ack("1")
    broker.clock.advance(2)
    broker.tick()
    assert sa.got == [("1", 0)] and sb.got == [("1", 0)] and a.unacked == {} and len(q) == 0


def test_ack_timeout_counts_from_the_latest_delivery(broker):
    """A message rejected and redelivered to the same consumer gets a fresh deadline."""
    q = broker.queue("t", ack_timeout=10)
    c, sink = consumer(broker, q, "c", manual=True)
    q.put_message(msg(1))
    broker.clock.advance(6)
    c.reject("1")                                    # back, and to c again at once
    broker.clock.advance(6)
    broker.tick()                                    # 12 s after the first delivery
    assert sink.got == [("1", 0), ("1", 1)]
    broker.clock.advance(5)
    broker.tick()
    assert sink.got == [("1", 0), ("1", 1), ("1", 2)]


def test_wait_for_ack_serialises_deliveries(broker):
    q = broker.queue("w", wait_for_ack=True)
    c, sink = consumer(broker, q, "c", manual=True)
    q.put_message(msg(1))
    q.put_message(msg(2))
    assert sink.ids == ["1"]
    c.ack("1")
    assert sink.ids == ["1", "2"]


def test_observer_sees_ack_from_consumer(broker):
    q = broker.queue("o")
    c, sink = consumer(broker, q, "c", manual=True)
    events = []
    q.put(Entry(msg(1), observer=lambda ev, e, cons, r, receipt: events.append((ev, r))))
    c.ack("1", positive=False, reason="busy")
    c.ack("1")
    assert events == [("sent", None), ("nack", "busy")]


def test_message_expiry_in_sweep(broker):
    q = broker.queue("x")
    q.put_message(msg(1, expires_at=broker.clock.now() + 1))
    q.put_message(msg(2))
    broker.clock.advance(2)
    broker.tick()
    assert [e.message.id for e in q.entries] == ["2"] and q.expired == 1


def test_tick_takes_the_time_given_or_the_clock_s(broker):
    q = broker.queue("x")
    q.put_message(msg(1, expires_at=broker.clock.now() + 1.5))
    q.put_message(msg(2, expires_at=broker.clock.now() + 3))
    broker.tick(broker.clock.now() + 2)
    assert [e.message.id for e in q.entries] == ["2"]
    broker.clock.advance(3)
    broker.tick()
    assert len(q) == 0


def test_tick_reaches_every_queue_when_one_raises(broker):
    """A queue whose tick raises (here an observer with a bug, told of an expiry) does
    not keep the queues after it from expiring and timing out acks: the failures come out
    together, once every queue and mailbox had its tick."""
    from mqksbridge.core import Entry

    def buggy(event, entry, consumer, reason, receipt):
        raise KeyError("an observer bug")
    first, second = broker.queue("first"), broker.queue("second", ack_timeout=1)
    first.put(Entry(msg(1, expires_at=broker.clock.now() + 1), observer=buggy))
    c, sink = consumer(broker, second, "c", manual=True)
    second.put_message(msg(2))
    box = broker.mailbox("box")
    box.send(msg(3, expires_at=broker.clock.now() + 1))
    broker.clock.advance(2)
    with pytest.raises(ExceptionGroup) as raised:
        broker.tick()
    assert [type(e) for e in raised.value.exceptions] == [KeyError]
    assert first.expired == 1 and len(first) == 0
    assert sink.got == [("2", 0), ("2", 1)]          # the ack timeout requeued it
    assert box.expired == 1
    broker.clock.advance(2)
    broker.tick()                                      # nothing left to fail


def test_stream_readers_exclude_writer_and_double_match(broker):
    s = broker.stream("weather")

    class Any:
        def search(self, s):
            return True
    writer, reader = Client("w", "m"), Client("r", "m")
    got = []
    s.add_reader(reader, "a", Any(), lambda name, m: got.append(("a", m.id)))
    s.add_reader(reader, "a", Any(), lambda name, m: got.append(("dup", m.id)))
    s.add_reader(reader, "b", Any(), lambda name, m: got.append(("b", m.id)))
    s.add_reader(writer, "a", Any(), lambda name, m: got.append(("self", m.id)))
    s.publish(msg(1, subject="temp"), writer)       # the publisher reads nothing back
    assert got == [("a", "1"), ("b", "1")]


def test_mailbox_store_flush_limit_expiry(broker):
    mb = broker.mailbox("alice")
    mb.limit_bytes = 20
    for i in range(5):
        mb.send(msg(i, body=b"x" * 10))
    assert len(mb.stored) == 2 and mb.dropped == 3
    owner = Client("alice", "m")
    got = []
    mb.attach(owner, lambda box, m: got.append(m.id))
    assert got == ["0", "1"]
    assert mb.send(msg(9)) == "delivered"
    mb.detach(owner)
    mb.send(msg(10, expires_at=broker.clock.now() + 1))
    broker.clock.advance(2)
    broker.tick()
    assert len(mb.stored) == 0 and mb.expired == 1


def test_mailbox_takeover(broker):
    mb = broker.mailbox("bob")
    first, second = Client("1", "m"), Client("2", "m")
    got = []
    mb.attach(first, lambda b, m: got.append(("first", m.id)))
    mb.attach(second, lambda b, m: got.append(("second", m.id)))
    mb.send(msg(1))
    assert got == [("second", "1")] and first.mailbox is None


def test_mailbox_restore_puts_a_failed_delivery_first(broker):
    mb = broker.mailbox("carol")
    owner = Client("carol", "m")
    failed = []
    mb.send(msg(1))
    mb.send(msg(2))

    def vanish(box, m):
        failed.append(m.id)
        box.detach(owner)
        box.restore(m)
    mb.attach(owner, vanish)
    assert failed == ["1"] and [m.id for m in mb.stored] == ["1", "2"]
    assert mb.bytes == 2 and mb.delivered == 0


def test_channel_members_consume_every_queue(broker):
    ch = broker.channel("ch")
    member = Client("m1", "twino")
    broker.connect(member)
    sinks = {}

    def make(queue):
        sinks[queue.name] = Sink()
        return Consumer(f"m1:{queue.name}", member, sinks[queue.name])
    ch.add_queue(1, broker.queue("ch/1", mode=qmod.PUSH_ALL))
    ch.join(member, make)
    ch.add_queue(2, broker.queue("ch/2", mode=qmod.PUSH_ALL))
    broker.queues["ch/1"].put_message(msg(1))
    broker.queues["ch/2"].put_message(msg(2))
    assert sinks["ch/1"].ids == ["1"] and sinks["ch/2"].ids == ["2"]
    broker.disconnect(member)
    assert ch.members == {} and broker.queues["ch/1"].consumers == []


def test_disconnect_requeues_and_detaches(broker):
    q = broker.queue("q")
    client = Client("c", "t")
    broker.connect(client)
    c, _ = consumer(broker, q, "c", manual=True, client=client)
    q.put_message(msg(1))
    mb = broker.mailbox("c")
    mb.attach(client, lambda b, m: None)
    broker.disconnect(client)
    assert len(q) == 1 and q.entries[0].retry == 1 and mb.owner is None
    assert "c" not in broker.clients


def test_events_are_emitted(broker):
    seen = []
    broker.subscribe(lambda ev, **d: seen.append(ev))
    broker.queue("a")
    broker.delete_queue("a")
    broker.channel("c")
    broker.remove_channel("c")
    assert seen == ["queue-created", "queue-removed", "channel-created", "channel-removed"]


def test_find_clients_oldest_first(broker):
    a, b = Client("a", "t", name="n"), Client("b", "t", name="n", type="x")
    broker.connect(a)
    broker.clock.advance(1)
    broker.connect(b)
    assert broker.find_clients(name="n") == [a, b]
    assert broker.find_clients(type="x") == [b]


def test_every_listener_hears_an_event_when_one_raises(broker):
    heard = []

    def buggy(event, **data):
        raise KeyError("a listener bug")
    broker.subscribe(buggy)
    broker.subscribe(lambda event, **data: heard.append(event))
    with pytest.raises(ExceptionGroup) as raised:
        broker.queue("q")
    assert heard == ["queue-created"] and "q" in broker.queues
    assert [type(e) for e in raised.value.exceptions] == [KeyError]


def test_disconnect_completes_when_a_step_raises(broker):
    """A listener that raises on client-left (a door's bug) does not leave the gone
    client's consumers in their queues: its unacked message goes to the other consumer,
    its reader and mailbox go, and every failure comes out afterwards."""
    def buggy(event, **data):
        if event == "client-left":
            raise KeyError("a listener bug")
    broker.subscribe(buggy)
    gone, stays = Client("gone", "test"), Client("stays", "test")
    broker.connect(gone)
    channel = broker.channel("ch")
    broker.join_channel(channel, gone, lambda queue: None)
    q = broker.queue("q")
    c, sink = consumer(broker, q, "c", manual=True, client=gone)
    q.put_message(msg(1))
    other, other_sink = consumer(broker, q, "o", manual=True, client=stays)
    s = broker.stream("s")
    s.add_reader(gone, "k", Any(), lambda name, m: None)
    gone.streams.add("s")
    broker.mailbox("gone").attach(gone, lambda box, m: None)
    with pytest.raises(ExceptionGroup):
        broker.disconnect(gone)
    assert q.consumers == [other] and other_sink.got == [("1", 1)]
    assert "gone" not in broker.clients and gone.id not in channel.members
    assert s.readers == [] and broker.mailboxes["gone"].owner is None



def test_disconnect_detaches_the_mailbox_when_a_stream_raises(broker):
    """Every step of a teardown runs: a stream that fails to drop a reader (a bug) does not
    keep the client's mailbox attached to a dead connection (losing what is sent to it)."""
    gone = Client("gone", "test")
    broker.connect(gone)
    s = broker.stream("s")
    s.add_reader(gone, "k", Any(), lambda name, m: None)
    gone.streams.add("s")

    def buggy(client):
        raise KeyError("a stream bug")
    s.remove_readers = buggy
    broker.mailbox("gone").attach(gone, lambda box, m: None)
    with pytest.raises(ExceptionGroup) as raised:
        broker.disconnect(gone)
    assert [type(e) for e in raised.value.exceptions] == [KeyError]
    assert broker.mailboxes["gone"].owner is None and "gone" not in broker.clients

class Any:
    @staticmethod
    def search(subject):
        return True
