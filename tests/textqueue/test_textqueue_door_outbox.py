"""The TextQueue door's outbox on a live broker: deliveries appended as records, a worker's
marks taken as acks and rejects (by hand, with dd, sed -i or the reference `textqueue`
package), credit, fair competition with other doors, rotation, replacement, restart."""
import locale
import os
import subprocess

import pytest
import pytest_twisted
import textqueue

from mqksbridge.bridge.textqueue import outbox
from mqksbridge.protocols.textqueue import flip, journal, rewrite
from tests.support.textqueue import LogCapture, Spool, records
from tests.support.waits import until
from tests.textqueue.strategies import apply_edits


def outbox_spool(server, tmp_path, queue="jobs", **settings):
    path = tmp_path / "outbox" / f"{queue}.tq"
    spool = Spool(server, tmp_path, outbox={queue: str(path)}, **settings)
    spool.out = path
    spool.file = spool.door.file(path)
    return spool


def deliveries(path):
    """The message records of an outbox file (its header comment left out)."""
    return [r for r in records(path) if r.control != "#"]


def mark(path, record, control, reason=None):
    """A worker's in-place mark (what `dd conv=notrunc` does): one byte, and the reason."""
    edits = [flip(record, control)]
    if reason is not None:
        edits.append(rewrite(record.variable("error"), reason))
    apply_edits(path, edits)


@pytest.fixture
def spool(server, tmp_path):
    spool = outbox_spool(server, tmp_path)
    yield spool
    spool.stop()


async def published(spool, n):
    """Wait until the outbox file holds `n` deliveries (the broker appends them)."""
    await until(lambda: len(deliveries(spool.out)) >= n, between=spool.step,
                what=f"{n} records in the outbox")
    return deliveries(spool.out)


@pytest_twisted.ensureDeferred
async def test_deliveries_are_appended_as_records_with_their_variables(server, spool):
    assert records(spool.out)[0].control == "#"          # the header says what the file is
    assert records(spool.out)[0].variable("queue").value == "jobs"
    producer = await server.twino(client_id="maker")
    await producer.push("jobs", 0, b"line 1\nline 2", headers=[("Subject", "work.a"),
                                                                 ("X-Trace", "t 1")])
    await producer.push("jobs", 0, b"\x00\x01binary", headers=[("Subject", "work.b")])
    mqks = await server.mqks()
    mqks.send("r1 rebind jobs --add ev.c", "m1 publish ev.c from mqks")
    first, second, third = await published(spool, 3)
    envs = [journal.decode(r) for r in (first, second, third)]
    assert [(e.subject, e.frames, e.origin, e.sender, e.retry) for e in envs] == [
        ("work.a", (b"line 1\nline 2",), "twino", "maker", 0),
        ("work.b", (b"\x00\x01binary",), "twino", "maker", 0),
        ("ev.c", (b"from mqks",), "mqks", envs[2].sender, 0)]
    assert envs[0].headers == {"Subject": "work.a", "X-Trace": "t 1"}
    assert first.body == "line 1\nline 2"                 # text stays text for the worker
    assert second.variable("enc").value == "base64"
    assert envs[2].id == "m1"
    for record in (first, second, third):
        error = record.variable("error")
        assert (error.value, error.width) == ("", spool.door.error_width)


@pytest.mark.skipif(locale.getpreferredencoding(False).lower().replace("-", "") != "utf8",
                    reason="the reference reads files with the locale's encoding")
@pytest_twisted.ensureDeferred
async def test_a_mark_made_with_the_reference_package_acks_a_waiting_twino_producer(
        server, spool):
    """Twino producer-ack policy relay (the default): the producer's ack comes when the
    worker marks the record `=` with the textqueue package from PyPI."""
    # (jobs, 0) is the outbox's queue: Twino takes it with its defaults (member acks on)
    producer = await server.twino(client_id="waiting")
    answer = producer.push("jobs", 0, b"please do", wait_ack=True, timeout=30)
    (record,) = await published(spool, 1)
    assert not answer.called
    worker = textqueue.TextQueue()
    worker.add_input(str(spool.out))
    item = worker.get_next()
    assert item.value == "please do"
    item.mark_as_cleared()
    worker.close()
    spool.poll()
    ack = await answer
    assert ack.ok and ack.frame.message_id == journal.decode(record).id
    assert ack.frame.source == spool.file.client.id
    assert spool.file.acked == 1 and not spool.file.pending


@pytest_twisted.ensureDeferred
async def test_a_failed_mark_sends_the_message_back_with_retry_plus_one(server, spool):
    logs = LogCapture()
    try:
        mqks = await server.mqks()
        mqks.send("r1 rebind jobs --add ev", "m1 publish ev do it")
        (record,) = await published(spool, 1)
        mark(spool.out, record, "!", "disk full")
        spool.poll()
        first, again = await published(spool, 2)
        assert (first.control, again.control) == ("!", "-")
        env = journal.decode(again)
        assert (env.id, env.frames, env.retry) == ("m1", (b"do it",), 1)
        assert again.variable("r").value == "1"
        assert any("'m1' failed (disk full)" in text for text in logs.texts())
        offset = again.offset                      # the mark of a real `dd conv=notrunc`
        subprocess.run(f"printf = | dd of={spool.out} bs=1 seek={offset} conv=notrunc "
                       "status=none", shell=True, check=True)
        spool.poll()
        assert spool.file.acked == 1 and spool.file.rejected == 1 and not spool.file.pending
    finally:
        logs.close()


@pytest_twisted.ensureDeferred
async def test_credit_bounds_the_unsettled_records_and_consumers_compete_fairly(
        server, tmp_path):
    spool = outbox_spool(server, tmp_path, credit=3)
    try:
        mqks = await server.mqks()
        mqks.send("c1 consume --confirm jobs ev")
        assert await mqks.line() == "c1 ok "
        mqks.send(*[f"m{i} publish ev {i}" for i in range(6)])
        mqks_got = [line.split()[-1] for line in await mqks.lines_n(3)]
        file_got = [journal.decode(r).frames[0].decode() for r in await published(spool, 3)]
        assert sorted(mqks_got + file_got) == [str(i) for i in range(6)]
        assert file_got == ["0", "2", "4"] and mqks_got == ["1", "3", "5"]   # in turn
        mqks.send(*[f"n{i} publish ev {i}" for i in range(6, 9)])
        assert [line.split()[-1] for line in await mqks.lines_n(3)] == ["6", "7", "8"]
        assert len(deliveries(spool.out)) == 3         # no credit left: the file waits
        for record in deliveries(spool.out)[:2]:
            mark(spool.out, record, "=")
        spool.poll()
        mqks.send(*[f"o{i} publish ev {i}" for i in range(9, 13)])
        await published(spool, 5)
        await mqks.lines_n(2)
        assert [journal.decode(r).frames[0] for r in deliveries(spool.out)[3:]] == [
            b"9", b"11"]
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_a_large_settled_file_rotates_and_old_ones_are_retained(server, tmp_path):
    spool = outbox_spool(server, tmp_path, rotate_size=4096, retain=1, credit=100)
    try:
        queue = server.broker.queue("jobs")
        for round_ in range(2):
            mqks = await server.mqks()
            mqks.send("r1 rebind jobs --add ev",
                      *[f"m{round_}-{i} publish ev {'x' * 100}" for i in range(40)])
            got = await published(spool, 40)
            assert len(got) == 40
            spool.poll()
            assert len(deliveries(spool.out)) == 40      # rotating waits for the marks
            for record in got:
                mark(spool.out, record, "=")
            spool.poll(2)
            assert deliveries(spool.out) == []
            assert records(spool.out)[0].variable("queue").value == "jobs"
            await mqks.close()
        names = sorted(os.listdir(spool.out.parent))
        assert names == ["jobs.tq", "jobs.tq.000002"]            # retain = 1
        assert len(deliveries(spool.out.parent / "jobs.tq.000002")) == 40
        assert len(queue) == 0 and spool.file.acked == 80
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_marks_made_with_sed_in_place_are_taken_and_nothing_appended_twice(
        server, spool):
    mqks = await server.mqks()
    mqks.send("r1 rebind jobs --add ev", *[f"m{i} publish ev job {i}" for i in range(4)])
    await published(spool, 4)
    inode = os.stat(spool.out).st_ino
    subprocess.run(["sed", "-i", "s/^-job [02]$/=&/; s/^=-/=/", str(spool.out)], check=True)
    assert os.stat(spool.out).st_ino != inode
    spool.poll(2)
    assert spool.file.acked == 2
    assert [r.control for r in deliveries(spool.out)] == ["=", "-", "=", "-"]
    mqks.send("m9 publish ev job 9")
    got = await published(spool, 5)
    assert [journal.decode(r).id for r in got] == ["m0", "m1", "m2", "m3", "m9"]
    # an editor's copy that lost a record: the delivery is appended again
    data = open(spool.out, "rb").read()
    lost = deliveries(spool.out)[1]
    copy = spool.out.parent / "copy"
    copy.write_bytes(data[:lost.offset] + data[lost.end:])
    os.rename(copy, spool.out)
    spool.poll(2)
    got = await published(spool, 5)
    assert [journal.decode(r).id for r in got] == ["m0", "m2", "m3", "m9", "m1"]
    assert len(spool.file.pending) == 3


@pytest_twisted.ensureDeferred
async def test_a_restarted_door_matches_redeliveries_to_their_records(server, tmp_path):
    """The door goes (its unsettled deliveries return to the queue, behind one that was
    waiting for credit), a worker marks one meanwhile; the door comes back on the same
    file: the marked one is acked, the others are taken to be their records again, the
    waiting one is appended. Nothing is appended twice."""
    spool = outbox_spool(server, tmp_path, credit=3)
    mqks = await server.mqks()
    mqks.send("r1 rebind jobs --add ev", *[f"m{i} publish ev job {i}" for i in range(4)])
    first = await published(spool, 3)
    queue = server.broker.queue("jobs")
    assert [e.message.id for e in queue.entries] == ["m3"]
    spool.stop()
    assert [(e.message.id, e.retry) for e in queue.entries] == [
        ("m3", 0), ("m0", 1), ("m1", 1), ("m2", 1)]
    mark(spool.out, first[0], "=")
    spool = outbox_spool(server, tmp_path, credit=3)
    try:
        await until(lambda: len(spool.file.pending) == 3, between=spool.step, what="the redeliveries")
        assert spool.file.acked == 1 and len(queue) == 0
        assert [journal.decode(r).id for r in deliveries(spool.out)] == ["m0", "m1", "m2", "m3"]
        for record in deliveries(spool.out)[1:]:
            mark(spool.out, record, "=")
        spool.poll()
        assert spool.file.acked == 4 and not spool.file.pending
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_a_file_made_in_an_outbox_directory_consumes_its_queue(server, tmp_path):
    spool = Spool(server, tmp_path, outbox_dirs=[str(tmp_path / "out")])
    try:
        one, two = tmp_path / "out" / "work@1.tq", tmp_path / "out" / "work@2.tq"
        one.write_bytes(b"")
        two.write_bytes(b"")
        spool.poll()
        assert records(one)[0].variable("queue").value == "work"    # subscribed
        queue = server.broker.queue("work")
        assert len(queue.consumers) == 2
        mqks = await server.mqks()
        mqks.send("r1 rebind work --add ev", *[f"m{i} publish ev {i}" for i in range(4)])
        await until(lambda: len(deliveries(one)) + len(deliveries(two)) == 4, between=spool.step)
        assert [journal.decode(r).id for r in deliveries(one)] == ["m0", "m2"]
        os.unlink(two)                              # unsubscribes: its records go back
        spool.poll()
        await until(lambda: len(deliveries(one)) == 4, between=spool.step)
        assert [journal.decode(r).id for r in deliveries(one)] == ["m0", "m2", "m1", "m3"]
        assert [journal.decode(r).retry for r in deliveries(one)] == [0, 0, 1, 1]
        assert len(queue.consumers) == 1
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_an_outbox_that_cannot_be_opened_is_tried_again(server, tmp_path):
    """A configured outbox whose directory cannot be made is logged once and tried at
    every poll, without stopping the broker; once possible, it consumes its queue."""
    blocker = tmp_path / "outbox"
    blocker.write_bytes(b"a file where the directory should be")
    logs = LogCapture()
    spool = outbox_spool(server, tmp_path)
    try:
        spool.poll(3)
        assert sum("cannot open outbox" in t for t in logs.texts()) == 1
        assert not server.broker.queues.get("jobs") or not server.broker.queues["jobs"].consumers
        blocker.unlink()
        spool.poll()
        assert records(spool.out)[0].variable("queue").value == "jobs"
        assert len(server.broker.queues["jobs"].consumers) == 1
    finally:
        logs.close()
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_finding_the_marks_reads_only_the_unsettled_records(server, tmp_path,
                                                                  monkeypatch):
    """The door looks for flips at the offsets of the records still unsettled: behind a
    thousand settled records, a look reads none of their bytes (no re-read of the file)."""
    spool = outbox_spool(server, tmp_path, credit=50)
    try:
        for round_ in range(20):
            spool.write("jobs.tq", "".join(f"-job {round_}-{i} {'x' * 60}\n"
                                           for i in range(50)) + "\n")
            spool.poll()
            got = deliveries(spool.out)
            assert len(got) == 50 * (round_ + 1)
            if round_ < 19:
                for record in got[-50:]:
                    mark(spool.out, record, "=")
                spool.poll()
        unsettled = got[-50].offset
        assert spool.file.acked == 950 and unsettled > 100_000
        reads, real_pread, fd = [], os.pread, spool.file.fd
        monkeypatch.setattr(os, "pread", lambda f, n, at: (
            f == fd and reads.append((at, n))) or real_pread(f, n, at))
        mark(spool.out, got[-1], "=")
        spool.poll()
        assert spool.file.acked == 951 and len(spool.file.pending) == 49
        assert reads and min(at for at, _ in reads) >= unsettled
        assert sum(n for _, n in reads) <= os.path.getsize(spool.out) - unsettled
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_an_over_long_record_in_a_file_it_starts_on_adopts_nothing(server, tmp_path,
                                                                         monkeypatch):
    """An outbox file the door starts on holds a record too long to read (over
    MAX_RECORD, 1 MiB here: a line of `=`): its bytes are skipped to the next record,
    never read as records of their own. Bytes in the middle of its line that look like a
    settled record with a redelivered message's id do not acknowledge that message."""
    monkeypatch.setattr(outbox, "MAX_RECORD", 1 << 20)
    path = tmp_path / "outbox" / "jobs.tq"
    os.makedirs(path.parent)
    path.write_bytes(b"#an outbox file\n=" + b"=" * (5 << 19) + b"\n\\i=m-7\n-next\n\\i=m-8\n")
    spool = outbox_spool(server, tmp_path)
    try:
        await until(lambda: spool.file.state == "open", between=spool.step, what="the file loaded")
        assert set(spool.file.known) == {"m-8"}
        spool.write("jobs.tq", "-do it\n\\i=m-7\n\n")
        spool.poll()
        assert spool.file.acked == 0 and len(spool.file.pending) == 1
        (offset,) = spool.file.pending
        assert records(spool.out)[-1].offset == offset
    finally:
        spool.stop()
