"""Young collections on the broker's clock (bridge.service.collect_young): a queue in a
steady state (a new message in, an old one out) keeps Python's allocation count low, so
the collector never runs by itself while the young generation grows by every message;
the next collection then held the soak's reactor for 190-280 ms. The broker collects the
young generation every `broker.gc_young_interval` seconds instead."""
import gc
from collections import deque


class Held:
    """A queued message's stand-in: a tracked object holding a tracked list."""
    __slots__ = ("n", "frames")

    def __init__(self, n):
        self.n, self.frames = n, [n]


def churn(queue, n):
    for i in range(n):
        queue.append(Held(i))
        queue.popleft()


def test_a_steady_queue_grows_the_young_generation_until_the_broker_collects_it(server):
    assert server.config["broker"]["gc_young_interval"] == 1.0
    queue = deque(Held(i) for i in range(50_000))
    server.clock.advance(1.0)                        # a young collection: they are older
    churn(queue, 100_000)
    assert gc.get_count()[0] < 1000                  # Python's own trigger is far off
    assert len(gc.get_objects(0)) >= 100_000         # while every new message is young
    server.clock.advance(1.0)
    assert len(gc.get_objects(0)) < 1000
