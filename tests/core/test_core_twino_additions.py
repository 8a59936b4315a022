"""Core additions the Twino door relies on: pull clear lanes and Info counts, only-first
broadcast, channel join/leave events, channel attrs."""
from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.core.message import Entry


def put(queue, i, priority=False):
    queue.put(Entry(Message(str(i), "s", (b"d",), priority=priority)))


def test_pull_clear_lanes_and_left_counts():
    broker = Broker(FakeClock())
    for lanes, left_after in (("priority", (0, 2)), ("regular", (1, 0)), ("all", (0, 0))):
        queue = broker.queue("q-" + lanes, mode="pull")
        for i in range(5):
            put(queue, i, priority=i < 3)
        consumer = Consumer("c", Client("cl", "t"), lambda c, e: None)
        left = []
        taken = queue.pull(consumer, 2, clear=lanes, left=left)
        assert [e.message.id for e in taken] == ["0", "1"]
        assert left[0] == (2, 2) and left[1] == left_after
        assert (len(queue.priority), len(queue.entries)) == left_after


def test_pull_takes_exactly_count_and_clear_waits_for_the_last():
    broker = Broker(FakeClock())
    queue = broker.queue("q", mode="pull")
    for i in range(3):
        put(queue, i)
    consumer = Consumer("c", Client("cl", "t"), lambda c, e: None)
    assert [e.message.id for e in queue.pull(consumer, 2)] == ["0", "1"]
    assert [e.message.id for e in queue.pull(consumer, 5, clear=True)] == ["2"]
    assert len(queue) == 0


def test_broadcast_with_only_first_hands_one_consumer():
    broker = Broker(FakeClock())
    queue = broker.queue("b", mode="broadcast", only_first=True)
    got = []
    for name in ("a", "b", "c"):
        broker.add_consumer(queue, Consumer(name, Client(name, "t"), lambda c, e: got.append(c.id)))
    put(queue, 1)
    assert got == ["a"]


def test_join_and_leave_emit_events_and_channel_keeps_attrs():
    broker = Broker(FakeClock())
    seen = []
    broker.subscribe(lambda event, **data: seen.append(event))
    channel = broker.channel("ch", attrs={"door": 1})
    assert channel.attrs == {"door": 1}
    client = Client("x", "t")
    broker.connect(client)
    make = lambda queue: Consumer(queue.name, client, lambda c, e: None)
    assert broker.join_channel(channel, client, make) is True
    assert broker.join_channel(channel, client, make) is False
    broker.disconnect(client)
    assert seen == ["channel-created", "client-connected", "client-joined", "client-left",
                    "client-disconnected"]
