"""One failure costs one connection, never a stall, in the Twino door (fast layer:
StringTransports and a task.Clock). Each test makes one connection's part fail, as a bug
would, and checks that the others go on: the callbacks the core calls inside another
client's request (consumer deliveries, producer-ack observers, mailbox deliveries, event
notifications), the teardown of a connection and the keep-alive sweep.
"""
from mqksbridge.bridge.twino import events as twino_events
from mqksbridge.bridge.twino import queues as twino_queues
from mqksbridge.protocols.twino.codec import (PING_BYTES, ContentType, Frame, MessageType,
                                              encode, new_id)
from tests.support.wire import Harness
from tests.twino.test_twino_door_timers import QUICK, create_queue, join


def break_writes(wire, when=lambda data: True):
    """The door's writes to this connection raise (a bug on its output path) when `when`."""
    write = wire.protocol.write

    def broken(data):
        if when(data):
            raise RuntimeError("a bug on this connection's output")
        return write(data)
    wire.protocol.write = broken


def push(wire, channel, queue_id, body, ack=False):
    frame = Frame(MessageType.QUEUE_MESSAGE, pending_ack=ack, message_id=new_id(),
                  target=channel, content_type=queue_id, content=body)
    wire.send_frame(frame)
    return frame


def test_a_failing_delivery_costs_that_member_not_the_pusher_or_the_others(
        harness, logged_failures):
    p, bad, good = harness.twino(), harness.twino(), harness.twino()
    create_queue(p, "ch", 1, "push", RequestAcknowledge=False)
    join(bad, "ch")
    join(good, "ch")
    break_writes(bad)
    push(p, "ch", 1, b"one")
    push(p, "ch", 1, b"two")
    assert [f.content for f in good.frames()] == [b"one", b"two"]
    assert p.frames() == []                  # the pusher is not answered 500
    assert bad.closed and len(logged_failures) == 1


def test_a_failing_producer_ack_costs_that_producer_not_the_dispatch(
        harness, logged_failures):
    """Stored pushes of two producers waiting for 'sent' acks: a member joins and the
    queue hands it the backlog; the first producer's ack fails, which must neither stop
    the rest of the backlog nor fail the join."""
    bad, other, member = harness.twino(), harness.twino(), harness.twino()
    create_queue(other, "rr", 1, "round-robin", RequestAcknowledge=False,
                 MessageDeliveryHandler="sent")
    push(bad, "rr", 1, b"from-bad", ack=True)
    pushed = [push(other, "rr", 1, b"from-other-%d" % i, ack=True) for i in range(2)]
    break_writes(bad, lambda data: data[0] & 0x3F == MessageType.ACKNOWLEDGE)
    member.send_frame(Frame(MessageType.SERVER, pending_response=True, message_id=new_id(),
                            target="rr", content_type=ContentType.JOIN))
    answer, *got = member.frames()
    assert (answer.type, answer.content_type) == (MessageType.RESPONSE, 0)
    assert [f.content for f in got] == [b"from-bad", b"from-other-0", b"from-other-1"]
    acks = other.frames()
    assert [(f.type, f.message_id) for f in acks] == [(MessageType.ACKNOWLEDGE, f.message_id)
                                                      for f in pushed]
    assert bad.closed and len(logged_failures) == 1


def test_a_failing_direct_delivery_costs_that_receiver_not_the_sender_or_the_others(
        harness, logged_failures):
    sender = harness.twino()
    workers = [harness.twino(extra="Client-Name: w\r\n") for _ in range(3)]
    break_writes(workers[0])
    sender.send_frame(Frame(MessageType.DIRECT_MESSAGE, message_id=new_id(), target="@name:w",
                            content=b"all"))
    assert [[f.content for f in w.frames()] for w in workers[1:]] == [[b"all"], [b"all"]]
    assert sender.frames() == []
    assert workers[0].closed and len(logged_failures) == 1


def test_a_notification_that_cannot_be_made_costs_only_that_notification(
        harness, logged_failures, monkeypatch):
    """Core events are told inside whatever any door's client did: a watcher's
    notification failing must not fail a Malamute OPEN or an MQKS connect."""
    watcher = harness.twino()
    watcher.send_frame(Frame(MessageType.EVENT, pending_response=True, message_id=new_id(),
                             target="ClientConnected", content_type=1))
    assert [f.content_type for f in watcher.frames()] == [0]
    heard = []
    harness.broker.subscribe(lambda event, **data: heard.append(event))

    def broken(**fields):
        raise RuntimeError("a notification bug")
    monkeypatch.setattr(twino_events, "client_event", broken)
    peer = harness.malamute("someone")           # asserts its OK
    assert "someone" in harness.doors["malamute"].owners
    mqks = harness.mqks()
    assert mqks.request("p ping x") == ["p ok x"]
    assert [e for e in heard if e.startswith("client-")] == ["client-connected"] * 2
    assert watcher.frames() == [] and not peer.closed
    assert len(logged_failures) == 2


def test_a_failing_teardown_step_skips_none_of_the_others(
        harness, logged_failures, monkeypatch):
    """A bug in forgetting a connection's event subscriptions must not leave the gone
    client registered (its id taken for good) or its consumers in their queues."""
    p, gone, stays = harness.twino(), harness.twino(client_id="gone-one"), harness.twino()
    create_queue(p, "rr", 1, "round-robin", RequestAcknowledge=False)
    join(gone, "rr")
    join(stays, "rr")

    def broken(conn):
        raise RuntimeError("a teardown bug")
    monkeypatch.setattr(harness.doors["twino"].events, "forget", broken)
    gone.close()
    assert "gone-one" not in harness.broker.clients
    assert [c.client.id for c in harness.broker.queues["rr/1"].consumers] == [
        stays.accepted.target]
    push(p, "rr", 1, b"a")
    push(p, "rr", 1, b"b")
    assert [f.content for f in stays.frames()] == [b"a", b"b"]
    again = harness.twino(client_id="gone-one")
    assert again.accepted.content_type == 202
    assert len(logged_failures) == 1


def test_a_connection_failing_in_the_keep_alive_sweep_leaves_the_others_swept(
        logged_failures):
    harness = Harness(QUICK)
    try:
        wires = [harness.twino() for _ in range(10)]
        bad, idle = wires[::2], wires[1::2]  # the sweep meets them in no set order
        for wire in bad:
            break_writes(wire, lambda data: data == PING_BYTES)
        harness.advance(0.7)
        assert [wire.take() for wire in idle] == [PING_BYTES] * 5   # whatever came first
        harness.advance(0.7)
        assert all(wire.closed for wire in idle)                    # closed, no answer
        assert len(logged_failures) == 5
    finally:
        harness.stop()


def test_a_frame_whose_handler_fails_is_answered_500_and_the_read_goes_on(
        harness, logged_failures, monkeypatch):
    """The door's own guard (door.failed): a bug costs that frame, not the connection
    or the frames after it in the same read."""
    c = harness.twino()
    handlers = harness.doors["twino"].handlers
    server = handlers[MessageType.SERVER]

    def buggy(conn, frame):
        if frame.target == "boom":
            raise RuntimeError("a handler bug")
        return server(conn, frame)
    monkeypatch.setitem(handlers, MessageType.SERVER, buggy)
    boom, fine = (Frame(MessageType.SERVER, pending_response=True, message_id=new_id(),
                        target=name, content_type=ContentType.JOIN) for name in ("boom", "fine"))
    c.send(encode(boom) + encode(fine))      # one read
    assert [(f.message_id, f.content_type) for f in c.frames()] == [
        (boom.message_id, 500), (fine.message_id, 0)]
    assert not c.closed and len(logged_failures) == 1


def test_a_push_that_fails_costs_that_push_not_the_rest_of_its_run(
        harness, logged_failures, monkeypatch):
    p, member = harness.twino(), harness.twino()
    create_queue(p, "run", 1, "push", RequestAcknowledge=False)
    join(member, "run")
    real = twino_queues.from_frame

    def buggy(frame, *args):
        if frame.content == b"boom":
            raise RuntimeError("a conversion bug")
        return real(frame, *args)
    monkeypatch.setattr(twino_queues, "from_frame", buggy)
    p.send(b"".join(encode(Frame(MessageType.QUEUE_MESSAGE, message_id=new_id(), target="run",
                                 content_type=1, content=body))
                    for body in (b"one", b"boom", b"two")))
    assert [f.content for f in member.frames()] == [b"one", b"two"]
    assert not p.closed and len(logged_failures) == 1
