"""A full queue with the overflow policy `reject` must tell every publisher, not only Twino
(482) and TextQueue (`!`) ones. An MQKS publish with --confirm gets the door's error line in
place of the `ok` (which says every copy is queued), and every publisher the full queue
refuses, among them those whose protocol has no negative answer (an MQKS publish without
--confirm, a Malamute STREAM-SEND), is not read while the queue is full: flow control
(core.flow), until the queue is back under half its limit or `broker.flow_max_hold` passes. Over real sockets, the broker in the test reactor."""
import pytest_twisted

from mqksbridge.protocols.malamute import codec
from tests.conftest import RunningBroker
from tests.support.waits import until

LIMITS = {"broker": {"queue_length_limit": [["capped", 2]], "queue_overflow": "reject"}}


async def capped_queue(running):
    """`capped` (2 messages) and `free` (no limit) bound to event `ev`, nobody consuming
    `capped` (its consumer came and went)."""
    admin, other = await running.mqks(), await running.mqks()
    assert await admin.request("c1 consume --confirm capped ev") == "c1 ok "
    assert await admin.request("d delete_consumer --confirm c1") == "d ok "
    assert await other.request("f consume --confirm free ev") == "f ok "
    return other


@pytest_twisted.ensureDeferred
async def test_a_confirmed_mqks_publish_into_a_full_queue_gets_the_error_line():
    running = await RunningBroker(LIMITS).start()
    try:
        free = await capped_queue(running)
        publisher = await running.mqks()
        assert await publisher.request("m1 publish --confirm ev a") == "m1 ok "
        assert await publisher.request("m2 publish --confirm ev b") == "m2 ok "
        refused = await publisher.request("m3 publish --confirm ev c")
        assert refused.startswith("m3 error ") and len(refused.split(" ")[2]) == 24
        assert len(running.broker.queues["capped"]) == 2
        # the other bound queue took its copy: error means "not every copy"
        assert [(await free.line()).rsplit(" ", 1)[1] for _ in range(3)] == ["a", "b", "c"]
        # told, and held like every publisher the full queue refused (until it has room
        # or flow_max_hold passes); then a publish nowhere full is answered as before
        assert running.broker.flow.holds == 1
        running.advance(running.config["broker"]["flow_max_hold"])
        assert await publisher.request("m4 publish --confirm other x") == "m4 ok "
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_an_unconfirmed_mqks_publisher_is_not_read_while_the_queue_is_full():
    running = await RunningBroker(LIMITS).start()
    try:
        await capped_queue(running)
        publisher = await running.mqks()
        publisher.send("m1 publish ev a", "m2 publish ev b", "m3 publish ev c")
        await until(lambda: running.broker.flow.holds == 1, what="the publisher held")
        assert running.broker.queues["capped"].dropped == 1
        publisher.send("p ping x")                     # not read while held (the rest of
        consumer = await running.mqks()                # a read is served, as for flow)
        await consumer.sync()
        assert not publisher.lines
        consumer.send("c2 consume capped")
        assert [(await consumer.line()).rsplit(" ", 1)[1] for _ in range(2)] == ["a", "b"]
        assert await publisher.line() == "p ok x"      # the queue has room: read again
        assert running.broker.flow.held == {}
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_held_publisher_goes_on_after_flow_max_hold_when_the_queue_never_moves():
    """A queue nobody drains holds its publisher for `flow_max_hold` at most; it is then
    stalled and its later refusals are only counted (core.flow)."""
    running = await RunningBroker(LIMITS).start()
    try:
        await capped_queue(running)
        publisher = await running.mqks()
        publisher.send("m1 publish ev a", "m2 publish ev b", "m3 publish ev c")
        await until(lambda: running.broker.flow.holds == 1, what="the publisher held")
        publisher.send("p ping x")
        running.advance(running.config["broker"]["flow_max_hold"])
        assert await publisher.line() == "p ok x"
        publisher.send("m4 publish ev d", "p ping y")
        assert await publisher.line() == "p ok y"
        assert running.broker.flow.holds == 1 and running.broker.queues["capped"].dropped == 2
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_malamute_stream_send_into_a_full_queue_holds_the_writer():
    """STREAM-SEND has no answer in Malamute: the writer is not read (its PING waits)
    until an MQKS consumer makes room in the queue its event fills."""
    running = await RunningBroker(LIMITS).start()
    try:
        await capped_queue(running)
        writer = await running.malamute_raw("writer")
        assert await writer.call(codec.StreamWrite("mqks")) == codec.Ok()
        writer.send(*(codec.StreamSend("ev", (body,)) for body in (b"a", b"b", b"c")))
        await until(lambda: running.broker.flow.holds == 1, what="the writer held")
        writer.send(codec.ConnectionPing())
        consumer = await running.mqks()
        consumer.send("c2 consume capped")
        assert [(await consumer.line()).rsplit(" ", 1)[1] for _ in range(2)] == ["a", "b"]
        assert await writer.recv() == codec.ConnectionPong()
        assert running.broker.queues["capped"].dropped == 1
    finally:
        await running.stop()
