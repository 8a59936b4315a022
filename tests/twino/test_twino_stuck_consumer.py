"""A Twino consumer of a push-all queue that never reads is cut off, over real sockets.

Push-all hands every consumer present its copy, paused or not (core.queue), so a consumer
that stopped reading made the broker keep every copy in its outbox: in the soak, 4 MB a
minute at 300 messages/s, for as long as it stayed. Past 8 x `twino.high_water` of unread
output with its transport full the connection is aborted (bridge.outbox), its copies let
go, and the other consumer keeps getting everything.
"""
import pytest_twisted
from twisted.internet.threads import deferToThread

from mqksbridge.bridge.outbox import OVER_LIMIT
from tests.support.waits import until

HIGH_WATER = 64 * 1024


@pytest_twisted.ensureDeferred
async def test_a_push_all_consumer_that_never_reads_is_cut_off(running):
    server = await running({"twino": {"high_water": HIGH_WATER}})
    door = server.doors["twino"]
    stuck = await server.twino()
    await stuck.join("soak")                 # then never reads again
    healthy = await server.twino()
    await healthy.join("soak")
    pusher = await server.twino()
    stuck_conn = next(c for c in door.connections if c.client.id == stuck.client_id)
    body, count = b"x" * 1024, 4000          # 4 MB: far past the stuck one's limit
    peak = 0

    def push_all():
        for _ in range(count):
            pusher.client.push("soak", 1, body)
    done = deferToThread(push_all)
    got = 0
    while got < count:
        frame = await healthy.recv(10)
        assert frame is not None, f"the healthy consumer got {got} of {count}"
        if frame.pending_ack:
            await healthy.ack(frame)
        got += 1
        peak = max(peak, stuck_conn.outbox.pending)
    await done
    await until(lambda: stuck_conn not in door.connections, what="the stuck one cut off")
    assert peak <= OVER_LIMIT * HIGH_WATER + len(body) + 1024
    assert stuck_conn.outbox.pending == 0 and stuck_conn.outbox.parts == []
