"""Durable mailboxes ([durability] mailboxes): mail kept for an absent owner survives a
crash, mail handed over does not come back, expiry settles with its own reason; and over
real sockets, Malamute mailbox mail and Twino direct mail come back after a restart."""
import os
import pathlib

import pytest_twisted

from mqksbridge.bridge.journal import layout
from mqksbridge.core import Client, Message
from mqksbridge.protocols.textqueue import journal, scan
from tests.conftest import RunningBroker
from tests.support.journal import Harness


def mail(h, name, body, **fields):
    h.sent += 1
    message = Message("m%d" % h.sent, "s", (body,), created_at=h.clock.seconds(), **fields)
    return h.broker.mailbox(name).send(message)


def owner(h, name, door="malamute"):
    got = []
    client = Client(name, door)
    h.broker.mailbox(name).attach(client, lambda mailbox, message: got.append(message))
    return got


def stamps(data_dir):
    found = {}
    for path in pathlib.Path(data_dir, layout.MAILBOXES).rglob("*.tq"):
        scanned = scan(path.read_bytes())
        header, *rest = [*scanned.records(), journal.whole_tail(scanned.incomplete)]
        base = journal.decode_header(header).created_ms
        for record in rest:
            env = journal.decode(record.raw, base)
            found[env.id] = (record.raw[:1], env.settled and (env.settled.reason,
                                                              env.settled.door))
    return found


def test_mail_for_an_absent_owner_survives_a_crash_in_order(tmp_path):
    h = Harness(tmp_path, {"queues": [], "mailboxes": ["alice", "team.*"]})
    for body in (b"one", b"two\nlines", bytes([0, 255])):
        mail(h, "alice", body)
    mail(h, "bob", b"not durable")
    h.commit()
    after = h.restart()                         # a crash: only the files remain
    assert "bob" not in after.broker.mailboxes
    got = owner(after, "alice")
    assert [m.frames for m in got] == [(b"one",), (b"two\nlines",), (bytes([0, 255]),)]
    after.commit()
    assert "alice" not in after.restart().broker.mailboxes     # handed over: settled
    assert {v for v in stamps(tmp_path).values()} == {(b"=", ("acked", "malamute"))}


def test_mail_handed_over_at_once_is_written_settled_and_stays_out(tmp_path):
    h = Harness(tmp_path, {"queues": [], "mailboxes": ["*"]})
    got = owner(h, "carol", door="twino")
    mail(h, "carol", b"now")
    h.commit()
    assert [m.frames for m in got] == [(b"now",)]
    assert stamps(tmp_path) == {"m1": (b"=", ("acked", "twino"))}
    assert "carol" not in h.restart().broker.mailboxes


def test_mail_a_door_gives_back_keeps_its_record(tmp_path):
    """The owner's connection vanished while the mail was being handed over: the door
    restores it, and it is still in the journal (not settled) after a crash."""
    h = Harness(tmp_path, {"queues": [], "mailboxes": ["*"]})
    box = h.broker.mailbox("dave")
    box.attach(Client("dave", "malamute"), lambda mailbox, message: mailbox.restore(message))
    mail(h, "dave", b"again")
    box.detach(box.owner)
    h.commit()
    assert [m.frames for m in box.stored] == [(b"again",)]
    after = h.restart()
    assert [m.frames for m in after.broker.mailboxes["dave"].stored] == [(b"again",)]


def test_expired_mail_is_settled_as_expired(tmp_path):
    h = Harness(tmp_path, {"queues": [], "mailboxes": ["*"]})
    mail(h, "erin", b"soon gone", expires_at=h.clock.seconds() + 5)
    mail(h, "erin", b"kept")
    h.clock.advance(10)
    h.broker.tick()
    h.commit()
    assert stamps(tmp_path)["m1"] == (b"!", ("expired", None))
    after = h.restart()
    assert [m.frames for m in after.broker.mailboxes["erin"].stored] == [(b"kept",)]


@pytest_twisted.ensureDeferred
async def test_malamute_and_twino_mail_survive_a_restart(tmp_path):
    """Real sockets, real files: mail to an absent Malamute mailbox, from a Malamute
    sender and as Twino direct mail, is stored; the broker stops, a new one starts on the
    same data directory, and the owner gets both, in order, on arrival."""
    settings = {"durability": {"queues": [], "mailboxes": ["alice"]}}
    running = RunningBroker(settings, data_dir=tmp_path)
    await running.start()
    try:
        alice = await running.malamute("alice")
        await alice.close()
        sender = await running.malamute("sender")
        await sender.sendto("alice", "greeting", b"hello", b"alice")
        await sender.ping()
        twino = await running.twino()
        await twino.send_direct("alice", b"from twino")
        await twino.ping()
        assert len(running.broker.mailboxes["alice"].stored) == 2
    finally:
        await running.stop()
    assert os.listdir(os.path.join(tmp_path, layout.MAILBOXES)) == ["alice"]
    again = RunningBroker(settings, data_dir=tmp_path)
    await again.start()
    try:
        assert len(again.broker.mailboxes["alice"].stored) == 2
        alice = await again.malamute("alice")
        first, second = await alice.recv(10), await alice.recv(10)
        assert first == ("MAILBOX DELIVER", "alice", "sender", "greeting", "", (b"hello", b"alice"))
        assert second[0] == "MAILBOX DELIVER" and second[-1][-1] == b"from twino", second
    finally:
        await again.stop()
