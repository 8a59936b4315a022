"""One failure costs one connection, never a stall, for MQKS clients (fast layer:
StringTransports, a task.Clock). A consumer's teardown hands its unacknowledged messages to
other consumers, of any door; one of those failing must not keep the rest of the teardown
from running. (test_mqks_robustness.py shows a failing conversion over real sockets.)
"""
from mqksbridge.protocols.malamute import codec
from tests.malamute.test_malamute_door_isolation import break_output


def test_a_teardown_that_meets_a_failing_consumer_of_another_door_still_completes(
        harness, logged_failures):
    """`gone` holds one unacked message on q1 and one on q2. When it goes, q1's message
    is handed to a Malamute worker whose output fails: that costs the worker's session,
    and q2's message still goes back to q2 and on to its other consumer."""
    gone, good, p = harness.mqks(), harness.mqks(), harness.mqks()
    assert gone.request("g1 consume --confirm q1 e1 --manual-ack",
                        "g2 consume --confirm q2 e2 --manual-ack") == ["g1 ok ", "g2 ok "]
    assert p.request("m1 publish --confirm e1 one", "m2 publish --confirm e2 two") == [
        "m1 ok ", "m2 ok "]
    assert gone.lines() == ["g1 ok m1 event=e1 one", "g2 ok m2 event=e2 two"]
    worker = harness.malamute("worker")
    assert worker.call(codec.ServiceOffer("q1", "")) == [codec.Ok()]
    assert good.request("k consume --confirm q2 e2 --manual-ack") == ["k ok "]
    break_output(harness, "worker", codec.ServiceDeliver)
    gone.close()
    assert good.lines() == ["k ok m2 event=e2,retry=1 two"]
    assert worker.commands() == [codec.Error(500, "")]       # its session ended
    assert len(harness.broker.queues["q1"]) == 1             # the request kept for later
    assert len(harness.broker.clients) == 2                  # good and p
    assert len(logged_failures) == 1


def test_a_request_whose_handler_fails_is_answered_with_an_error_and_the_read_goes_on(
        harness, logged_failures, monkeypatch):
    """The door's own guard: a bug costs that request (an error reply), not the connection
    or the lines after it in the same read."""
    c = harness.mqks()
    door = harness.doors["mqks"]

    def buggy(conn, req_id, data, confirm):
        raise RuntimeError("a handler bug")
    monkeypatch.setitem(door._actions, b"rebind", buggy)
    replies = c.request("r1 rebind --confirm q e", "p1 ping after")
    assert len(replies) == 2 and replies[0].startswith("r1 error ") and replies[1] == "p1 ok after"
    assert not c.closed and len(logged_failures) == 1
