"""A burst of frames in one read is handled exactly as the same frames one read each.

The door takes runs of pushes to one queue together (TwinoQueues.push_run); this
checks it against frame-by-frame handling over real sockets: same deliveries, same
producer acks and nacks, same refusals, same order, whatever the mix in the burst.
"""
import pytest_twisted

from mqksbridge.protocols.twino.codec import Frame, MessageType, encode
from tests.twino.helpers import make_queue, receive_all


def script(prefix):
    """Frames: pushes to a joined queue, a limited queue that refuses the third, a pull
    queue, a second joined queue and a stopped one, with headers, acks, a priority push, a
    push without id, a CC copy and a PING in between (labels make ids unique per run but
    comparable across runs)."""
    def push(channel, queue_id, body, ack=False, headers=None, mid=True, high=False):
        return Frame(MessageType.QUEUE_MESSAGE, high_priority=high, pending_ack=ack,
                     message_id=f"{prefix}-{body}" if mid else None, target=f"{prefix}-{channel}",
                     content_type=queue_id, headers=headers, content=body.encode())
    return [
        push("a", 1, "a1"), push("a", 1, "a2", ack=True), push("a", 1, "a3", mid=False),
        push("a", 1, "a4", headers=[("X-App", "1"), ("CC", f"{prefix}-a;2;{prefix}-cc")]),
        push("lim", 1, "l1", ack=True), push("lim", 1, "l2", ack=True),
        push("lim", 1, "l3", ack=True), push("lim", 1, "l4"), push("a", 1, "a5", high=True),
        Frame(MessageType.PING),
        push("pull", 1, "p1", ack=True), push("a", 2, "b1"), push("a", 2, "b2", ack=True),
        push("a", 1, "a6"), push("nowhere", 9, "n1", ack=True), push("a", 1, "a7", ack=True),
        push("stop", 1, "s1"),
    ]


async def setup(server, prefix):
    producer, member = await server.twino(), await server.twino()
    await make_queue(producer, f"{prefix}-a", 1, "push", handler="sent")
    await make_queue(producer, f"{prefix}-a", 2, "push", ack=False)
    await make_queue(producer, f"{prefix}-lim", 1, "push", limit=2)
    await make_queue(producer, f"{prefix}-pull", 1, "pull")
    await make_queue(producer, f"{prefix}-stop", 1, "stopped")
    assert await member.join(f"{prefix}-a") == 0
    return producer, member


def seen(frames, prefix):
    """What a client got, with the run's prefix taken out of ids and names (and ids the
    broker made up, being random, shown as such)."""
    def plain(text):
        return text.replace(prefix, "*") if text else text

    def made_up(mid):
        return "new" if mid and len(mid) == 32 and prefix not in mid else plain(mid)
    return [(f.type, made_up(f.message_id), plain(f.target), f.content_type, f.content,
             f.high_priority, f.header("X-App"), f.header("Nack-Reason"))
            for f in frames]


@pytest_twisted.ensureDeferred
async def test_a_burst_in_one_read_matches_one_frame_per_read(server):
    outcomes = []
    for prefix, burst in (("single", False), ("burst", True)):
        producer, member = await setup(server, prefix)
        frames = script(prefix)
        if burst:
            await producer.send_frame(b"".join(encode(f) for f in frames))
        else:
            for frame in frames:
                await producer.send_frame(frame)
                await producer.ping()            # its PONG: the frame was handled alone
        await producer.ping()
        outcomes.append((seen(await receive_all(member), prefix),
                         seen(await receive_all(producer), prefix),
                         len(server.broker.queues[f"{prefix}-lim/1"]),
                         len(server.broker.queues[f"{prefix}-pull/1"]),
                         [server.broker.queues[f"{prefix}-{q}/1"].attrs["twino"].last_received
                          > 0 for q in ("a", "lim", "stop")]))
    single, burst = outcomes
    assert burst == single
    delivered, answers, kept, pulled, received = burst
    assert [(d[1], d[3], d[4], d[5], d[6]) for d in delivered] == [
        ("*-a1", 1, b"a1", False, None), ("*-a2", 1, b"a2", False, None),
        ("new", 1, b"a3", False, None), ("*-a4", 1, b"a4", False, "1"),
        ("*-cc", 2, b"a4", False, "1"), ("*-a5", 1, b"a5", True, None),
        ("*-b1", 2, b"b1", False, None), ("*-b2", 2, b"b2", False, None),
        ("*-a6", 1, b"a6", False, None), ("*-a7", 1, b"a7", False, None)]
    ack, response = MessageType.ACKNOWLEDGE, MessageType.RESPONSE
    assert [(a[0], a[1], a[3], a[7]) for a in answers] == [
        (ack, "*-a2", 1, None), (ack, "*-l3", 1, "full"), (response, "*-l4", 482, None),
        (ack, "*-a7", 1, None), (response, "*-s1", 401, None)]
    assert (kept, pulled, received) == (2, 1, [True, True, False])
