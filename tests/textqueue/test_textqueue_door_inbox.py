"""The TextQueue door's inbox on a live broker: records written to files reach consumers
behind every door, are flipped in place, and the broker's refusals are reported."""
import base64
import os

import pytest
import pytest_twisted

from mqksbridge.bridge.clients import twino
from mqksbridge.protocols.textqueue import journal, scan
from mqksbridge.bridge.textqueue import files, inbox
from tests.support.textqueue import LogCapture, Spool, controls, records
from tests.twino.helpers import make_queue


@pytest.fixture
def spool(server, tmp_path):
    spool = Spool(server, tmp_path)
    yield spool
    spool.stop()


@pytest.fixture
def logs():
    capture = LogCapture()
    yield capture
    capture.close()


@pytest_twisted.ensureDeferred
async def test_a_record_reaches_an_mqks_a_malamute_and_a_twino_consumer(server, spool):
    mqks = await server.mqks()
    mqks.send("c1 consume --confirm jobs")
    assert await mqks.line() == "c1 ok "
    worker = await server.malamute("worker")
    await worker.set_worker("tasks")
    member = await server.twino(client_id="member")
    await make_queue(member, "ch", 0, status="round-robin")
    assert await member.join("ch") == 0
    spool.write("jobs.tq", "-one for mqks\n")
    spool.write("tasks.tq", "-one for malamute\n\\s=do.it\n")
    spool.write("ch.tq", "-one for twino\n\\i=my-id\n\\headers=k=v%26w\n")
    assert controls(spool.path("jobs.tq")) == "-"
    spool.poll()
    assert await mqks.line() == (f"c1 ok tq-{spool.door.file(spool.path('jobs.tq')).tag}-0 "
                                 "event=jobs,origin=textqueue,sender=jobs.tq one for mqks")
    got = await worker.recv(5)
    assert (got.command, got.subject, got.sender, got.frames) == (
        "SERVICE DELIVER", "do.it", "tasks.tq", (b"one for malamute",))
    frame = await member.recv(5)
    crossed = twino.crossed(frame)
    assert frame.message_id == "my-id"
    assert (crossed.subject, crossed.origin, crossed.sender, crossed.frames) == (
        "ch", "textqueue", "ch.tq", (b"one for twino",))
    assert dict(crossed.headers)["k"] == "v&w"
    for name in ("jobs.tq", "tasks.tq", "ch.tq"):
        assert controls(spool.path(name)) == "="


@pytest_twisted.ensureDeferred
async def test_streams_mailboxes_and_the_to_variable(server, spool):
    mqks = await server.mqks()
    mqks.send("c1 consume --confirm q1 ev.a", "c2 consume --confirm q2")
    assert await mqks.lines_n(2) == ["c1 ok ", "c2 ok "]
    alice = await server.malamute("alice")
    bob = await server.twino(client_id="bob")
    spool.write("stream.mqks.tq", "-on the stream\n\\subject=ev.a\n"
                                  "-routed elsewhere\n\\to=q2\n")
    spool.write("mailbox.alice.tq", "-mail for alice\n\\s=hello\n")
    spool.write("mailbox.bob.tq", "-mail for bob\n")
    spool.poll()
    lines = sorted(await mqks.lines_n(2))
    assert lines[0].startswith("c1 ok tq-") and lines[0].endswith(
        " event=ev.a,origin=textqueue,sender=stream.mqks.tq on the stream")
    assert lines[1].startswith("c2 ok tq-") and lines[1].endswith(
        " event=q2,origin=textqueue,sender=stream.mqks.tq routed elsewhere")
    mail = await alice.recv(5)
    assert (mail.command, mail.subject, mail.frames) == ("MAILBOX DELIVER", "hello",
                                                         (b"mail for alice",))
    direct = await bob.recv(5)
    assert twino.crossed(direct).frames == (b"mail for bob",)
    for name in ("stream.mqks.tq", "mailbox.alice.tq", "mailbox.bob.tq"):
        assert set(controls(spool.path(name))) == {"="}


@pytest_twisted.ensureDeferred
async def test_journal_variables_are_honoured(server, spool):
    """A record in our journal layout (what an outbox file or a journal holds) publishes
    the message it describes: several frames, headers, priority, tracker, id, sender."""
    mqks = await server.mqks()
    mqks.send("c1 consume --confirm jobs")
    assert await mqks.line() == "c1 ok "
    frames = (b"head", b"", b"\x00\xff")
    body = " ".join(base64.b64encode(f).decode() for f in frames)
    spool.write("jobs.tq", f"-{body}\n\\i=m%201\n\\s=multi\n\\f=ignored:me\n\\tracker=t9\n"
                           "\\priority=1\n\\headers=a=1&b=x%3Dy\n\\enc=base64\n\\frames=3\n")
    spool.write("jobs.tq", "-second line\n follows\n\\id=readable-id\n\\subject=readable\n")
    spool.write("jobs.tq", journal.encode_message(journal.Envelope(      # what a replay of
        "j1", "from.a.journal", (b"kept",), {"h": "1"}, "w-7", "twino",   # journals writes
        created_at=spool.clock.seconds()), retry=3))
    spool.poll()
    first = await mqks.line()
    assert first == ("c1 ok m%201 event=multi,origin=textqueue,sender=me,enc=base64,frames=3,"
                     "h.a=1,h.b=x%3Dy " + body)
    second = await mqks.line()
    assert second == ("c1 ok readable-id event=readable,origin=textqueue,sender=jobs.tq,"
                      "enc=base64 " + base64.b64encode(b"second line\nfollows").decode())
    assert await mqks.line() == ("c1 ok j1 event=from.a.journal,origin=textqueue,sender=w-7,"
                                 "h.h=1 kept")
    assert controls(spool.path("jobs.tq")) == "==="


@pytest_twisted.ensureDeferred
async def test_an_assigned_id_goes_into_reserved_room_and_stays_the_same(server, spool):
    """A record without an id gets tq-<tag>-<offset>: written into an empty `\\i=` with
    room, never inserted; the same for the same file incarnation after a restart."""
    queue = server.broker.queue("jobs")
    spool.write("jobs.tq", "-no room\n-room\n\\i=" + " " * 40 + "\n-too little room\n\\i=  \n")
    size = os.path.getsize(spool.path("jobs.tq"))
    spool.poll()
    file = spool.door.file(spool.path("jobs.tq"))
    ids = [e.message.id for e in queue.entries]
    assert ids == [f"tq-{file.tag}-{r.offset}" for r in records(spool.path("jobs.tq"))]
    assert os.path.getsize(spool.path("jobs.tq")) == size
    first, second, third = records(spool.path("jobs.tq"))
    assert second.variable("i").value == ids[1] and second.variable("i").width == 40
    assert third.variable("i").value == ""
    tag = file.tag
    spool.stop()
    again = Spool(server, spool.directory)
    try:
        again.write("jobs.tq", "-later\n")
        again.poll()
        assert again.door.file(spool.path("jobs.tq")).tag == tag
    finally:
        again.stop()


@pytest_twisted.ensureDeferred
async def test_refused_records_are_flipped_with_their_reason(server, tmp_path, logs):
    spool = Spool(server, tmp_path, auto_create=False)
    try:
        small = server.broker.queue("small")
        small.configure(max_message_size=10, max_messages=1)
        spool.write("small.tq", "-fits\n\\error=" + " " * 20 + "\n"
                                "-this body is too large\n\\error=" + " " * 20 + "\n"
                                "-fits too but the queue is full\n"
                                "-ok\n\\error=  \n")
        spool.write("missing.tq", "-nobody made this queue\n\\error=" + " " * 30 + "\n")
        spool.write("mailbox.nobody.tq", "-to nobody\n\\error=" + " " * 5 + "\n")
        spool.write("bad.tq", "-!!!not base64\n\\enc=base64\n\\error=" + " " * 60 + "\n")
        spool.write("small2.tq", "#a comment\n=done already\n!failed already\n")
        sizes = {name: os.path.getsize(spool.path(name))
                 for name in os.listdir(spool.inbox)}
        before = open(spool.path("small2.tq"), "rb").read()
        spool.poll()
        assert [e.message.frames for e in small.entries] == [(b"fits",)]
        got = {r.body: (r.control, r.variable("error") and r.variable("error").value)
               for r in records(spool.path("small.tq"))}
        assert got == {"fits": ("=", ""), "this body is too large": ("!", "queue too-large"),
                       "fits too but the queue is full": ("!", None), "ok": ("!", "qu")}
        (missing,) = records(spool.path("missing.tq"))
        assert (missing.control, missing.variable("error").value) == ("!", "no such queue")
        (nobody,) = records(spool.path("mailbox.nobody.tq"))
        assert (nobody.control, nobody.variable("error").value) == ("!", "unkno")
        (bad,) = records(spool.path("bad.tq"))
        assert bad.control == "!" and bad.variable("error").value.startswith("bad record: ")
        assert open(spool.path("small2.tq"), "rb").read() == before
        assert {name: os.path.getsize(spool.path(name))
                for name in os.listdir(spool.inbox)} == sizes         # nothing inserted
        texts = logs.texts()
        offset = records(spool.path("small.tq"))[1].offset
        assert any(f"small.tq at {offset}: refused, queue too-large" in t for t in texts)
        assert any("missing.tq at 0: refused, no such queue" in t for t in texts)
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_a_large_file_is_read_a_chunk_per_turn(server, spool, monkeypatch):
    """The door never reads more than a chunk of a file per step, one step per file per
    reactor turn: a 3 MiB file takes a dozen turns, and every record arrives once, in
    order."""
    queue = server.broker.queue("big")
    data = b"".join(b"-record %06d %s\n" % (i, b"x" * 80) for i in range(30_000))
    spool.write("big.tq", data)
    reads, turns = [], []
    real_pread, real_work = os.pread, spool.door._work
    monkeypatch.setattr(inbox.os, "pread", lambda fd, n, at: (
        n > 1024 and reads.append(n)) or real_pread(fd, n, at))
    monkeypatch.setattr(spool.door, "_work", lambda: turns.append(len(reads)) or real_work())
    spool.poll()
    assert max(reads) == files.CHUNK
    assert len(turns) > len(data) // files.CHUNK
    assert max(b - a for a, b in zip(turns, turns[1:] + [len(reads)])) <= 1
    assert [e.message.frames[0][7:13] for e in queue.entries] == [
        b"%06d" % i for i in range(30_000)]
    assert set(controls(spool.path("big.tq"))) == {"="}
    assert not scan(open(spool.path("big.tq"), "rb").read()).damages


@pytest_twisted.ensureDeferred
async def test_a_record_over_max_record_is_refused_and_skipped_to_the_next_record(
        server, tmp_path, logs):
    """A record that outgrows `max_record` across chunks is flipped `!` and its bytes are
    skipped up to the next record: the next chunk begins inside its line, and a `-` there
    is not a record (nothing published for it, no byte of it flipped)."""
    spool = Spool(server, tmp_path, max_record=64)
    queue = server.broker.queue("jobs")
    try:
        long_line = b"-" + b"x" * (files.CHUNK - 1) + b"-inside the long line"
        data = long_line + b"\n continued\n\\note=x\n-next\n\n"
        spool.write("jobs.tq", data)
        spool.poll()
        assert [e.message.frames for e in queue.entries] == [(b"next",)]
        after = open(spool.path("jobs.tq"), "rb").read()
        assert after == b"!" + data[1:data.rindex(b"-next")] + b"=next\n\n"
        texts = logs.texts()
        assert any("jobs.tq at 0: refused, record over 64 bytes" in t for t in texts)
        assert not any("belong to no record" in t for t in texts)
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_a_record_over_max_record_gets_its_reason_in_reserved_room(server, tmp_path):
    """The reason of a record refused for its size goes into its `\\error=` too (room the
    writer left at its end), whether the record lay whole in one chunk or was dropped
    across chunks; nothing is inserted."""
    spool = Spool(server, tmp_path, max_record=64)
    queue = server.broker.queue("jobs")
    room = "\\error=" + " " * 24 + "\n"
    try:
        small = f"-{'x' * 80}\n continued\n{room}-small ok\n\n"
        large = "-" + "y" * (files.CHUNK + 10) + f"\n continued\n{room}-large ok\n\n"
        spool.write("jobs.tq", small + large)
        size = os.path.getsize(spool.path("jobs.tq"))
        spool.poll()
        assert [e.message.frames for e in queue.entries] == [(b"small ok",), (b"large ok",)]
        assert os.path.getsize(spool.path("jobs.tq")) == size
        got = [(r.control, r.variable("error") and r.variable("error").value)
               for r in records(spool.path("jobs.tq"))]
        assert got == [("!", "record over 64 bytes"), ("=", None),
                       ("!", "record over 64 bytes"), ("=", None)]
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_every_inbox_directory_is_read(server, tmp_path):
    """`textqueue.inbox` is a list: a file in each directory is published."""
    first, second = tmp_path / "a", tmp_path / "b"
    spool = Spool(server, tmp_path, inbox=[str(first), str(second)])
    queue = server.broker.queue("jobs")
    try:
        (first / "jobs.tq").write_bytes(b"-from a\n\n")
        (second / "jobs.tq").write_bytes(b"-from b\n\n")
        spool.poll()
        assert sorted(e.message.frames[0] for e in queue.entries) == [b"from a", b"from b"]
        assert controls(first / "jobs.tq") == controls(second / "jobs.tq") == "="
    finally:
        spool.stop()
