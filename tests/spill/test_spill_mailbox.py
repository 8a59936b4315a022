"""Mail for an absent owner pages out past the window as a queue's backlog does
(core.mailbox, bridge.spill): scratch files for a plain mailbox, the journal for a
durable one; the owner gets it all, in order. Real files; writes run inline as the
task.Clock turns."""
import os

from twisted.internet import defer, task

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.clock import ReactorClock
from mqksbridge.bridge.journal import Durability
from mqksbridge.bridge.spill import Spill
from mqksbridge.core import Broker, Client, FakeClock, Message
from tests.support.journal import inline

WINDOW = 10


class Seconds:
    seconds = staticmethod(lambda: 1_700_000_000.0)


def files(root):
    return [n for _, _, names in os.walk(root) for n in names]


def mail(n, start=0):
    return [Message(f"m{i}", "s", (b"body %d" % i,), created_at=1_700_000_000.0)
            for i in range(start, start + n)]


def owner(mailbox, got, client=None):
    client = client or Client("o", "malamute")
    mailbox.attach(client, lambda box, message: got.append(message.id))
    return client


def test_mail_for_an_absent_owner_pages_out_and_comes_back_in_order(tmp_path):
    broker = Broker(FakeClock(1_700_000_000.0))
    reactor = task.Clock()
    spill = Spill(str(tmp_path), broker, reactor, Seconds(), 1 << 20, WINDOW, None,
                  run=lambda work, *args: defer.maybeDeferred(work, *args))
    spill.install()
    box = broker.mailbox("alice")
    for message in mail(1_000):
        box.send(message)
    reactor.advance(0)
    assert len(box.stored) == WINDOW and len(box) == 1_000 and box.window.paged == 990
    assert files(tmp_path) and box.bytes == sum(m.size for m in mail(1_000))
    got = []
    client = Client("o", "malamute")

    def deliver(box, message):
        got.append(message.id)
        if len(got) == 500:
            client.pause()                 # its socket fills
    box.attach(client, deliver)
    assert len(got) == 500
    for message in mail(5, 1_000):         # behind what is paged out
        box.send(message)
    client.resume()
    box.flush()
    assert got == [f"m{i}" for i in range(1_005)]
    assert len(box) == 0 and box.bytes == 0
    reactor.advance(0)
    assert files(tmp_path) == [], "a drained mailbox kept its spill segment"


def test_a_durable_mailbox_pages_to_its_journal_and_recovers(tmp_path):
    clock = task.Clock()
    clock.advance(1_700_000_000)

    def node():
        broker = Broker(ReactorClock(clock))
        spill = Spill(str(tmp_path / "spill"), broker, clock, clock, 1 << 20, WINDOW, None,
                      run=lambda work, *args: defer.maybeDeferred(work, *args))
        spill.install()
        config = configuration.load(overrides={"data_dir": str(tmp_path), "durability": {
            "mailboxes": ["*"], "fsync": "never"}})
        durability = Durability(config["durability"], str(tmp_path), broker, clock, clock,
                                run=inline)
        durability.recover()
        return broker, durability

    broker, durability = node()
    box = broker.mailbox("bob")
    for message in mail(500):
        box.send(message)
    writer = durability.writer
    while writer.pending or writer.in_flight is not None:
        clock.advance(0)
    clock.advance(0)
    assert len(box.stored) == WINDOW and box.window.paged == 490
    assert files(tmp_path / "spill") == []        # its pages are its journal
    broker, durability = node()                   # a restart
    box = broker.mailbox("bob")
    assert len(box) == 500 and len(box.stored) == WINDOW
    got = []
    owner(box, got)
    assert got == [f"m{i}" for i in range(500)]
