"""The Twino door's timers on the fast layer (tests.support.wire): StringTransports and a
task.Clock, so every timeout is exact and no test waits for wall time. The real-socket
tests in test_twino_door_connect.py prove the same behaviour on the wire.
"""
import json

import pytest

from mqksbridge.protocols.twino.codec import (PING_BYTES, PONG_BYTES, ContentType, Frame,
                                              MessageType, new_id)
from tests.support.wire import Harness

QUICK = {"twino": {"ping_interval": 0.6, "ping_timeout": 0.6, "check_interval": 0.1,
                   "handshake_timeout": 0.6}}


@pytest.fixture
def quick():
    built = Harness(QUICK)
    yield built
    built.stop()


def create_queue(wire, channel, queue_id, status, **options):
    wire.send_frame(Frame(MessageType.SERVER, pending_response=True, message_id=new_id(),
                          target=channel, content_type=ContentType.CREATE_QUEUE,
                          headers=[("Channel-Name", channel), ("Queue-Id", str(queue_id)),
                                   ("Queue-Status", status)],
                          content=json.dumps(options).encode()))
    [answer] = wire.frames()
    assert answer.type == MessageType.RESPONSE and answer.content_type == 0, answer


def join(wire, channel):
    wire.send_frame(Frame(MessageType.SERVER, pending_response=True, message_id=new_id(),
                          target=channel, content_type=ContentType.JOIN))
    [answer] = wire.frames()
    assert answer.content_type == 0, answer


def test_a_silent_socket_is_closed_at_the_handshake_timeout(quick):
    silent = [quick.twino(hello=False) for _ in range(20)]
    half = quick.twino(hello=False)
    half.send(b"TMQP/2.0")                   # protocol bytes, but no hello
    quick.advance(0.6)
    assert not any(wire.closed for wire in silent + [half])
    quick.advance(0.1)
    assert all(wire.closed for wire in silent + [half])
    assert all(wire.take() == b"" for wire in silent + [half])
    for wire in silent + [half]:
        wire.close()
    assert not quick.doors["twino"].connections


def test_an_idle_client_is_pinged_then_closed_without_an_answer(quick):
    wire = quick.twino()
    assert wire.accepted.content_type == 202
    quick.advance(0.6)
    assert wire.take() == b""                # idle for exactly ping_interval: not yet
    quick.advance(0.1)
    assert wire.take() == PING_BYTES
    quick.advance(0.5)
    assert not wire.closed                   # ping_timeout is not over yet
    quick.advance(0.2)
    assert wire.closed and wire.take() == b""
    assert not wire.transport.disconnected   # a graceful close first, but a peer that does
    quick.advance(0.7)                       # not read would keep it waiting forever:
    assert wire.transport.disconnected       # aborted once ping_timeout has passed again
    wire.close()
    assert quick.broker.clients == {}


def test_a_client_that_answers_pings_stays_connected(quick):
    wire = quick.twino()
    for _ in range(5):                       # 3.5 s: far past interval + timeout
        quick.advance(0.7)                   # idle since the last answer: PINGed
        assert wire.take() == PING_BYTES and not wire.closed
        wire.send(PONG_BYTES)                # at the same instant as the PING: it counts
    quick.advance(0.5)
    assert not wire.closed
    assert wire.accepted.target in quick.broker.clients
    join(wire, "still-here")


def test_any_traffic_counts_as_an_answer_and_resets_the_idle_time(quick):
    wire = quick.twino()
    for _ in range(10):
        quick.advance(0.5)
        wire.send(PING_BYTES)                # the client's own PING, every 0.5 s
        assert wire.take() == PONG_BYTES     # answered, and never PINGed itself
    assert not wire.closed


def test_an_ack_timeout_nacks_a_waiting_producer():
    harness = Harness()
    try:
        p, c = harness.twino(), harness.twino()
        create_queue(p, "to", 1, "push", RequestAcknowledge=True, AcknowledgeTimeout=1500)
        join(c, "to")
        pushed = Frame(MessageType.QUEUE_MESSAGE, pending_ack=True, message_id=new_id(),
                       target="to", content_type=1, content=b"x")
        p.send_frame(pushed)
        [delivery] = c.frames()
        assert delivery.pending_ack and delivery.content == b"x"
        harness.advance(1)
        assert p.frames() == []              # within the timeout: nothing yet
        harness.advance(1)
        [nack] = p.frames()
        assert (nack.type, nack.message_id) == (MessageType.ACKNOWLEDGE, pushed.message_id)
        assert nack.header("Nack-Reason") == "timeout"
    finally:
        harness.stop()


def test_a_message_timeout_drops_what_nobody_took_in_time():
    harness = Harness()
    try:
        p = harness.twino()
        create_queue(p, "mt", 1, "push", RequestAcknowledge=False, MessageTimeout=2500)
        p.send_frame(Frame(MessageType.QUEUE_MESSAGE, message_id=new_id(), target="mt",
                           content_type=1, content=b"stale"))
        queue = harness.broker.queues["mt/1"]
        harness.advance(2)
        assert len(queue) == 1
        harness.advance(1)
        assert len(queue) == 0 and queue.expired == 1
        c = harness.twino()
        join(c, "mt")
        assert c.frames() == []
    finally:
        harness.stop()
