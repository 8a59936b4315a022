"""The Malamute door's timers on the fast layer (tests.support.wire): ZMTP over
StringTransports and a task.Clock, so session expiry and message timeouts are exact and
no test waits for wall time. test_malamute_door_sessions.py and _mailbox.py prove the
same over real ZeroMQ sockets.
"""
import pytest

from mqksbridge.protocols.malamute import codec
from tests.support.wire import Harness

OK = [codec.Ok()]


@pytest.fixture
def quick():
    """Sessions expire after 0.5 s of silence, checked every 0.1 s."""
    built = Harness({"malamute": {"timeout": 0.5, "check_interval": 0.1}})
    yield built
    built.stop()


def test_silent_sessions_expire_and_pinging_ones_stay(quick):
    silent = quick.malamute("silent")
    assert silent.call(codec.ServiceOffer("svc", "")) == OK
    alive = quick.malamute("alive")
    door = quick.doors["malamute"]
    for _ in range(8):
        quick.advance(0.1)
        assert alive.call(codec.ConnectionPing()) == [codec.ConnectionPong()]
    assert list(door.owners) == ["alive"] and door.counters["expired"] == 1
    assert quick.broker.queues["svc"].consumers == []
    assert silent.commands() == [] and silent.closed    # no command, the connection closes
    silent.close()
    again = quick.malamute()                 # what libzmq does: reconnect, and the next
    assert again.call(codec.ConnectionPing()) == [codec.Error(500, "")]   # command finds
    # no session


def test_a_session_lives_exactly_its_timeout_of_silence(quick):
    peer = quick.malamute("p")
    door = quick.doors["malamute"]
    quick.advance(0.45)
    assert "p" in door.owners
    assert peer.call(codec.ConnectionPing()) == [codec.ConnectionPong()]   # seen again
    quick.advance(0.45)
    assert "p" in door.owners
    quick.advance(0.3)
    assert "p" not in door.owners and door.counters["expired"] == 1


def test_expired_sessions_keep_their_mail_and_replay_restores_everything(quick):
    worker = quick.malamute("worker")
    replay = [codec.StreamWrite("out"), codec.StreamRead("in", ""),
              codec.ServiceOffer("svc", "")]
    assert worker.call(*replay) == OK * 3
    quick.advance(0.8)                       # expired meanwhile
    sender = quick.malamute("alice")
    assert sender.call(codec.MailboxSend("worker", "later", "", 0, (b"1",))) == []
    assert len(quick.broker.mailboxes["worker"].stored) == 1
    assert worker.closed
    worker.close()
    worker = quick.malamute()                # reconnected
    assert worker.call(codec.ConnectionPing()) == [codec.Error(500, "")]
    got = worker.call(codec.ConnectionOpen("worker"), *replay)
    assert got == OK + [codec.MailboxDeliver("alice", "worker", "later", "", (b"1",))] + OK * 3


def test_expired_mail_is_dropped_and_counted_by_the_broker_sweep():
    harness = Harness({"broker": {"mailbox_size_limit": 20}, "malamute": {"timeout": 10.0}})
    try:
        alice = harness.malamute("alice")
        alice.send_commands(codec.MailboxSend("bob", "late", "", 1500, (b"1",)),
                            codec.MailboxSend("bob", "keep", "", 0, (b"2",)))
        harness.advance(1)
        assert harness.broker.mailboxes["bob"].expired == 0
        harness.advance(1)                   # the sweep at 2 s finds it expired
        assert harness.broker.mailboxes["bob"].expired == 1
        bob = harness.malamute()
        assert bob.call(codec.ConnectionOpen("bob")) == [
            codec.Ok(), codec.MailboxDeliver("alice", "bob", "keep", "", (b"2",))]
    finally:
        harness.stop()


def test_expired_requests_are_dropped_before_a_worker_comes():
    harness = Harness()
    try:
        client = harness.malamute("client")
        client.send_commands(codec.ServiceSend("svc", "stale", "", 500, (b"1",)),
                             codec.ServiceSend("svc", "fresh", "", 0, (b"2",)))
        harness.advance(1)
        assert harness.broker.queues["svc"].expired == 1
        worker = harness.malamute("worker")
        assert worker.call(codec.ServiceOffer("svc", "")) == [
            codec.Ok(), codec.ServiceDeliver("client", "svc", "fresh", "", (b"2",))]
    finally:
        harness.stop()
