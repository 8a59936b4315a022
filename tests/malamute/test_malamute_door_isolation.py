"""One failure costs one session, never a stall, in the Malamute door (fast layer: ZMTP on
StringTransports, a task.Clock). Each test makes one peer's part fail, as a bug would, and
checks that the others go on: the delivery callbacks the core calls inside another client's
send (stream readers, mailbox owners, service workers), a session's teardown and the
expiry sweep. What could not be delivered is kept (mail, requests), never lost.
"""
from mqksbridge.protocols.malamute import codec
from mqksbridge.protocols.malamute.session import Session
from tests.support.wire import Harness

OK = [codec.Ok()]
E500 = [codec.Error(500, "")]


def break_output(harness, address, kind):
    """The next `kind` DELIVER written to this peer raises (a bug on its output path)."""
    door = harness.doors["malamute"]
    outbox = door.transport.peers[door.owners[address].rid].outbox
    write = outbox.write
    signature = b"\xaa\xa8" + bytes((kind.ID,))
    armed = [True]

    def broken(data):
        if armed[0] and signature in data:
            armed[0] = False
            raise RuntimeError("a bug on this peer's output")
        return write(data)
    outbox.write = broken


def test_a_failing_stream_reader_costs_its_session_not_the_writer_or_other_readers(
        harness, logged_failures):
    writer, bad, good = (harness.malamute(a) for a in ("writer", "bad", "good"))
    assert bad.call(codec.StreamRead("s", "")) == OK
    assert good.call(codec.StreamRead("s", "")) == OK
    assert writer.call(codec.StreamWrite("s")) == OK
    break_output(harness, "bad", codec.StreamDeliver)
    writer.send_commands(codec.StreamSend("one", (b"1",)), codec.StreamSend("two", (b"2",)))
    assert [c.subject for c in good.commands()] == ["one", "two"]
    assert writer.call(codec.ConnectionPing()) == [codec.ConnectionPong()]   # still open
    assert bad.commands() == E500 and "bad" not in harness.doors["malamute"].owners
    assert len(logged_failures) == 1


def test_a_failing_mailbox_delivery_keeps_the_mail_and_costs_only_that_session(
        harness, logged_failures):
    sender, bob = harness.malamute("alice"), harness.malamute("bob")
    break_output(harness, "bob", codec.MailboxDeliver)
    sender.send_commands(codec.MailboxSend("bob", "kept", "", 0, (b"1",)))
    assert sender.call(codec.ConnectionPing()) == [codec.ConnectionPong()]
    assert bob.commands() == E500                       # its session ended
    assert len(harness.broker.mailboxes["bob"].stored) == 1
    assert bob.call(codec.ConnectionOpen("bob")) == OK + [
        codec.MailboxDeliver("alice", "bob", "kept", "", (b"1",))]
    assert len(logged_failures) == 1


def test_a_failing_worker_costs_its_session_and_the_request_goes_to_another(
        harness, logged_failures):
    client, bad, good = (harness.malamute(a) for a in ("client", "bad", "good"))
    assert bad.call(codec.ServiceOffer("svc", "")) == OK
    assert good.call(codec.ServiceOffer("svc", "")) == OK
    break_output(harness, "bad", codec.ServiceDeliver)
    client.send_commands(*(codec.ServiceSend("svc", "r%d" % i, "", 0, (b"x",))
                           for i in range(3)))
    assert sorted(c.subject for c in good.commands()) == ["r0", "r1", "r2"]
    assert client.call(codec.ConnectionPing()) == [codec.ConnectionPong()]
    assert bad.commands() == E500
    assert [c.client.id for c in harness.broker.queues["svc"].consumers] == [
        harness.doors["malamute"].owners["good"].client.id]
    assert len(logged_failures) == 1


def test_a_vanishing_peer_whose_teardown_step_fails_is_still_cleaned_up(
        harness, logged_failures, monkeypatch):
    """A bug in ending the session state machine must not leave the gone peer as a
    worker: the requests sent afterwards go to the live one."""
    real = Session.expire

    def expire(self, reason="expired"):
        if self.address == "dead":
            raise RuntimeError("a teardown bug")
        return real(self, reason)
    monkeypatch.setattr(Session, "expire", expire)
    dead, live, client = (harness.malamute(a) for a in ("dead", "live", "client"))
    assert dead.call(codec.ServiceOffer("svc", "")) == OK
    assert live.call(codec.ServiceOffer("svc", "")) == OK
    dead.close()
    assert "dead" not in harness.doors["malamute"].owners
    client.send_commands(*(codec.ServiceSend("svc", "r%d" % i, "", 0, (b"x",))
                           for i in range(4)))
    assert [c.subject for c in live.commands()] == ["r0", "r1", "r2", "r3"]
    assert client.call(codec.ConnectionPing()) == [codec.ConnectionPong()]
    assert len(logged_failures) == 1


def test_a_peer_failing_in_the_expiry_sweep_leaves_the_others_expiring(
        logged_failures, monkeypatch):
    real = Session.expire

    def expire(self, reason="expired"):
        if self.address.startswith("bad"):
            raise RuntimeError("an expiry bug")
        return real(self, reason)
    monkeypatch.setattr(Session, "expire", expire)
    harness = Harness({"malamute": {"timeout": 0.5, "check_interval": 0.1}})
    try:
        for i in range(5):
            harness.malamute("bad%d" % i)
            harness.malamute("silent%d" % i)
        harness.advance(0.8)
        door = harness.doors["malamute"]
        assert door.owners == {} and door.counters["expired"] == 10
        assert len(logged_failures) == 5
    finally:
        harness.stop()
