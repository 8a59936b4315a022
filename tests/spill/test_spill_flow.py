"""Flow control counts a queue's whole backlog, paged-out messages too: a window smaller
than `broker.flow_limit` must not leave a fast publisher unpaced (core.flow)."""
from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from tests.support.inputs import Input
from tests.support.pager import tiny_windows

LIMIT = 10


def test_a_publisher_is_held_by_the_backlog_not_the_resident_part():
    broker = Broker(FakeClock(), flow_limit=LIMIT, flow_max_hold=1.0)
    broker.windows = tiny_windows(messages=2)
    queue = broker.queue("q")
    reader = Client("slow", "test")
    got = []
    broker.add_consumer(queue, Consumer("c", reader, lambda c, e: got.append(e.message.id)))
    reader.pause()
    pub = Client("pub", "test")
    pub.input = Input()
    for i in range(LIMIT - 1):
        queue.put_message(Message(str(i), "e", (b"x",)), None, pub)
    assert queue.window.paged == LIMIT - 3 and pub.input.calls == []
    queue.put_message(Message("last", "e", (b"x",)), None, pub)
    assert len(queue.entries) == 2 and pub.input.calls == ["pause"]   # 2 resident, 10 queued
    reader.paused = False
    queue.dispatch()                    # the consumer drains it: back under half, let go
    assert len(got) == LIMIT and pub.input.calls == ["pause", "resume"]
