"""The inbox's file rules on a live broker: a writer still writing is never cut short, its
lock is respected, a flip waits for the disk, a restart publishes nothing marked, a file
replaced by an editor publishes nothing twice. Time is the door's task.Clock: each step
is explicit, nothing sleeps."""
import errno
import fcntl
import os
import subprocess

import pytest_twisted

from mqksbridge.bridge.textqueue import files, inbox, watch
from mqksbridge.core import Client, Consumer
from tests.support.textqueue import LogCapture, Spool, controls, records
from tests.support.waits import until


def bodies(queue):
    return [e.message.frames[0].decode() for e in queue.entries]


@pytest_twisted.ensureDeferred
async def test_a_slow_writer_keeping_the_file_open_is_never_cut_short(server, tmp_path):
    spool = Spool(server, tmp_path, grace=2.0)
    queue = server.broker.queue("jobs")
    try:
        with open(spool.path("jobs.tq"), "ab", buffering=0) as writer:
            writer.write(b"-done at once\n-line 1\n")
            spool.poll()
            assert bodies(queue) == ["done at once"]          # a later record followed
            file = spool.door.file(spool.path("jobs.tq"))
            for n in range(2, 6):
                polls = file.polls
                spool.advance(1.5)                            # a pause shorter than grace
                assert file.polls == polls + 3
                assert bodies(queue) == ["done at once"]
                writer.write(b" line %d\n" % n)
                spool.poll()
            writer.write(b"\\note=last line of the record\n")
            spool.advance(1.5)
            assert bodies(queue) == ["done at once"]
            assert controls(spool.path("jobs.tq")) == "=-"
            spool.advance(1.0)                                # grace passed: complete
        assert bodies(queue) == ["done at once", "line 1\nline 2\nline 3\nline 4\nline 5"]
        assert controls(spool.path("jobs.tq")) == "=="
        assert records(spool.path("jobs.tq"))[1].variable("note").value == "last line of the record"
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_a_blank_line_ends_the_last_record_at_once(server, tmp_path):
    spool = Spool(server, tmp_path, grace=3600.0)
    queue = server.broker.queue("jobs")
    try:
        spool.write("jobs.tq", "-ended by a blank line\n\n")
        spool.poll()
        assert bodies(queue) == ["ended by a blank line"]
        assert controls(spool.path("jobs.tq")) == "="
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_a_writer_that_closes_the_file_is_done_inotify(server, tmp_path):
    """With inotify, a writer closing the file (IN_CLOSE_WRITE) completes its last record
    without waiting for the grace time; one that keeps writing is still waited for."""
    spool = Spool(server, tmp_path, grace=3600.0, watch="inotify")
    queue = server.broker.queue("jobs")
    try:
        assert spool.door.watcher.mode == "inotify"
        writer = open(spool.path("jobs.tq"), "ab", buffering=0)
        writer.write(b"-still being written\n")
        await until(lambda: spool.door.file(spool.path("jobs.tq")) is not None
                    and spool.door.file(spool.path("jobs.tq")).pos > 0, between=spool.step,
                    what="the door to read the first line")
        writer.write(b" and more\n")
        await until(lambda: spool.door.file(spool.path("jobs.tq")).pos == 31, between=spool.step,
                    what="the door to read the second line")
        assert bodies(queue) == []
        writer.close()
        await until(lambda: bodies(queue), between=spool.step, what="the closed file's record")
        assert bodies(queue) == ["still being written\nand more"]
        await until(lambda: controls(spool.path("jobs.tq")) == "=", between=spool.step,
                    what="the flip")
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_a_writer_holding_the_lock_is_waited_for(server, tmp_path):
    """flock(1) style: while a writer holds the file's lock the door takes no last record
    and writes no flip; it tries again at each poll, never blocking."""
    spool = Spool(server, tmp_path, grace=1.0)
    queue = server.broker.queue("jobs")
    try:
        spool.write("jobs.tq", "")
        lock = os.open(spool.path("jobs.tq"), os.O_RDWR)
        fcntl.flock(lock, fcntl.LOCK_EX)
        spool.write("jobs.tq", "-first\n-second, last\n")
        spool.advance(5.0)
        assert bodies(queue) == ["first"]                    # complete: a record follows
        assert controls(spool.path("jobs.tq")) == "--"       # but not flipped: locked
        file = spool.door.file(spool.path("jobs.tq"))
        assert file.lock_busy >= 5
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
        spool.poll()
        assert bodies(queue) == ["first", "second, last"]
        assert controls(spool.path("jobs.tq")) == "=="
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_flips_wait_for_the_storage_barrier(server, tmp_path):
    """When a publish reached a durable queue (its journal took a record: the barrier's
    `appended` moved), the record is flipped only once the journal says it is stored."""
    broker = server.broker
    storage = broker.storage
    journal = Client("journal", "test")
    broker.connect(journal)

    def append_like_a_journal(consumer, entry):
        storage.append()
    broker.add_consumer(broker.queue("durable"), Consumer("j", journal, append_like_a_journal))
    spool = Spool(server, tmp_path)
    try:
        spool.write("durable.tq", "-one\n-two\n\n")
        spool.write("memory.tq", "-three\n")
        before = storage.appended
        spool.poll()
        assert storage.appended == before + 2               # one chunk: two records
        assert controls(spool.path("memory.tq")) == "="     # reached no durable queue
        assert controls(spool.path("durable.tq")) == "--"
        storage.stored(before + 1)                          # not every record of the chunk
        spool.step()
        assert controls(spool.path("durable.tq")) == "--"
        storage.stored(before + 2)
        spool.step()
        assert controls(spool.path("durable.tq")) == "=="
    finally:
        spool.stop()
        broker.disconnect(journal)


@pytest_twisted.ensureDeferred
async def test_a_restart_mid_file_publishes_nothing_already_marked(server, tmp_path):
    queue = server.broker.queue("jobs")
    spool = Spool(server, tmp_path)
    spool.write("jobs.tq", "".join(f"-record {i}\n" for i in range(5)))
    spool.poll()
    first_ids = [e.message.id for e in queue.entries]
    spool.stop()
    assert controls(spool.path("jobs.tq")) == "====="
    # a crash between publish and flip: the writer's lock keeps the flips from landing
    spool = Spool(server, tmp_path)
    spool.write("jobs.tq", "".join(f"-record {i}\n" for i in range(5, 8)))
    lock = os.open(spool.path("jobs.tq"), os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)
    spool.poll()
    crashed_ids = [e.message.id for e in queue.entries][5:]
    for file in spool.door.files():
        file.abortConnection()                          # gone before writing its flips
    for service in spool.services:
        service.stopService()
    fcntl.flock(lock, fcntl.LOCK_UN)
    os.close(lock)
    assert controls(spool.path("jobs.tq")) == "=====---"
    spool = Spool(server, tmp_path)
    try:
        spool.poll()
        # 5 and 6 were published, and again now (at least once, with the same ids); the
        # lock kept the door from taking 7, the last record, before the crash
        assert bodies(queue) == [f"record {i}" for i in range(7)] + [
            f"record {i}" for i in range(5, 8)]
        assert [e.message.id for e in queue.entries][7:9] == crashed_ids
        assert len(set(first_ids + crashed_ids)) == 7
        assert controls(spool.path("jobs.tq")) == "========"
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_sed_in_place_publishes_nothing_twice(server, tmp_path):
    """`sed -i` writes a new file and renames it over the old one: the door reads the new
    inode from its start; settled records stay settled, nothing is published again."""
    queue = server.broker.queue("jobs")
    spool = Spool(server, tmp_path)
    try:
        spool.write("jobs.tq", "-a\n-b\n#note\n-c\n")
        spool.poll()
        inode = os.stat(spool.path("jobs.tq")).st_ino
        subprocess.run(["sed", "-i", "s/^#note$/#a longer note/", str(spool.path("jobs.tq"))],
                       check=True)
        assert os.stat(spool.path("jobs.tq")).st_ino != inode
        spool.write("jobs.tq", "-d\n")
        spool.poll(2)
        assert bodies(queue) == ["a", "b", "c", "d"]
        assert controls(spool.path("jobs.tq")) == "==#=="
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_an_editor_copy_taken_before_the_flips_publishes_nothing_twice(server, tmp_path):
    """The race an editor runs: it read the file while the records were `-`, the door then
    published and flipped them, the editor saves its copy (a new inode) with one record
    added. The door matches the copy's records to what it settled: the old ones get their
    marks (the refused one its reason too), only the new one is published."""
    queue = server.broker.queue("jobs")
    spool = Spool(server, tmp_path)
    try:
        error = "\\error=" + " " * 16 + "\n"
        spool.write("jobs.tq", f"-a\n-b\n-c\n\\to=mailbox.nobody\n{error}-b\n")
        copy = open(spool.path("jobs.tq"), "rb").read()
        spool.poll()
        assert bodies(queue) == ["a", "b", "b"]
        assert controls(spool.path("jobs.tq")) == "==!="
        saved = tmp_path / "inbox" / "jobs.tq.swp"
        saved.write_bytes(copy + b"-new\n")
        os.rename(saved, spool.path("jobs.tq"))
        spool.poll(2)
        assert bodies(queue) == ["a", "b", "b", "new"]
        got = records(spool.path("jobs.tq"))
        assert "".join(r.control for r in got) == "==!=="
        assert got[2].variable("error").value == "unknown mailbox"
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_settled_files_are_archived_or_deleted_by_policy(server, tmp_path):
    for policy in ("archive", "delete"):
        directory = tmp_path / policy
        spool = Spool(server, directory, settled=policy, settled_after=10.0)
        try:
            spool.write("jobs.tq", "-x\n")
            spool.write("later.tq", "-y\n")
            spool.poll()
            spool.advance(8.0)
            spool.write("later.tq", "-z\n")               # still being written to
            spool.advance(4.0)
            assert not spool.path("jobs.tq").exists()
            assert spool.path("later.tq").exists()
            archived = os.listdir(spool.inbox / "archive") if policy == "archive" else []
            assert [name.split(".tq.")[0] for name in archived] == (
                ["jobs"] if policy == "archive" else [])
            if archived:
                assert controls(spool.inbox / "archive" / archived[0]) == "="
        finally:
            spool.stop()


@pytest_twisted.ensureDeferred
async def test_a_file_filling_a_queue_faster_than_its_consumer_is_held(server, tmp_path):
    """Flow control holds the file like any publisher (core.flow): reading stops once the
    queue, which has a consumer, holds broker.flow_limit messages, and goes on when the
    consumer catches up. The file is never read ahead into memory."""
    broker = server.broker
    limit = broker.flow.limit
    reader = Client("slow", "test")
    broker.connect(reader)
    got = []
    broker.add_consumer(broker.queue("jobs"), Consumer("slow", reader,
                                                       lambda c, e: got.append(e)))
    reader.pause()                                   # its socket is full, say
    spool = Spool(server, tmp_path)
    try:
        total = 3 * limit
        spool.write("jobs.tq", "".join(f"-{i:<99}\n" for i in range(total)))   # 12 chunks
        spool.poll(3)
        file = spool.door.file(spool.path("jobs.tq"))
        queue = broker.queues["jobs"]
        assert file.paused and limit <= len(queue) < limit + files.CHUNK // 100
        held = file.pos
        assert held < os.path.getsize(spool.path("jobs.tq"))
        spool.poll(3)
        assert file.pos == held                      # nothing more read while held
        reader.resume()                              # it catches up: the hold ends
        spool.step()
        spool.poll(3)
        assert [int(e.message.frames[0]) for e in got] == list(range(total))
        assert set(controls(spool.path("jobs.tq"))) == {"="}
    finally:
        spool.stop()
        broker.disconnect(reader)


@pytest_twisted.ensureDeferred
async def test_without_inotify_the_poll_picks_files_up_within_a_second(server, tmp_path,
                                                                       monkeypatch):
    """watch = auto where inotify cannot be had (no such platform, or the per-user limit
    of instances reached): a warning, then polling alone; a file written meanwhile is
    published at the next poll (default poll_interval 0.5 s), and its last record, which
    no close can be seen to end, once the grace time passed."""
    def unavailable(reactor):
        raise OSError(errno.EMFILE, "Too many open files")
    monkeypatch.setattr(watch.inotify, "INotify", unavailable)
    logs = LogCapture()
    spool = Spool(server, tmp_path, watch="auto", poll_interval=0.5, grace=2.0)
    queue = server.broker.queue("jobs")
    try:
        assert spool.door.watcher.mode == "poll"
        assert any("inotify unavailable" in t for t in logs.texts())
        spool.write("jobs.tq", "-first\n-second\n")
        spool.clock.advance(0.5)                       # one poll: the file is found
        await until(lambda: bodies(queue) == ["first"], what="the first record")
        await until(lambda: controls(spool.path("jobs.tq")) == "=-", what="its flip")
        spool.clock.advance(1.0)
        assert bodies(queue) == ["first"]              # the last one: grace not yet passed
        spool.clock.advance(1.0)
        await until(lambda: bodies(queue) == ["first", "second"], what="the last record")
    finally:
        logs.close()
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_matching_a_replaced_file_reads_the_old_one_from_a_record_start(
        server, tmp_path, monkeypatch):
    """The old file's settled records are read back for matching from at most
    MAX_MATCH_BYTES before its end; a cut inside a record starts at the next record, so
    its bytes after the cut (`=dup` here) are no settled record that a record of the new
    file (`-dup`) could take its mark from without being published."""
    monkeypatch.setattr(inbox, "MAX_MATCH_BYTES", 8)          # the cut: at `=dup`
    queue = server.broker.queue("jobs")
    spool = Spool(server, tmp_path)
    try:
        spool.write("jobs.tq", "-key=dup\n-b\n")
        spool.poll()
        assert controls(spool.path("jobs.tq")) == "=="
        copy = tmp_path / "inbox" / "jobs.tq.new"
        copy.write_bytes(open(spool.path("jobs.tq"), "rb").read() + b"-dup\n-last\n")
        os.rename(copy, spool.path("jobs.tq"))
        spool.poll(2)
        assert bodies(queue) == ["key=dup", "b", "dup", "last"]
        assert controls(spool.path("jobs.tq")) == "===="
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_an_editor_copy_ending_in_a_settled_record_publishes_it_not_again(
        server, tmp_path):
    """The editor's copy was taken before the flips and adds nothing: its last record,
    taken once complete like any file's last record, is matched too (it was published
    and flipped in the old file)."""
    queue = server.broker.queue("jobs")
    spool = Spool(server, tmp_path)
    try:
        spool.write("jobs.tq", "-a\n-b\n")
        copy = open(spool.path("jobs.tq"), "rb").read()
        spool.poll()
        assert bodies(queue) == ["a", "b"] and controls(spool.path("jobs.tq")) == "=="
        saved = tmp_path / "inbox" / "jobs.tq.swp"
        saved.write_bytes(copy)
        os.rename(saved, spool.path("jobs.tq"))
        spool.poll(2)
        assert bodies(queue) == ["a", "b"]
        assert controls(spool.path("jobs.tq")) == "=="
    finally:
        spool.stop()


@pytest_twisted.ensureDeferred
async def test_records_appended_after_a_replaced_file_was_read_are_not_matched(
        server, tmp_path):
    """Matching ends with the replaced file as it was first read to its end (its last
    record, still in progress then, included): a record a writer appends later is a new
    message even when it looks like an old settled one the copy lost."""
    queue = server.broker.queue("jobs")
    spool = Spool(server, tmp_path, grace=3600.0)
    try:
        spool.write("jobs.tq", "-p\n-p\n-q\n\n")
        spool.poll()
        assert controls(spool.path("jobs.tq")) == "==="
        saved = tmp_path / "inbox" / "jobs.tq.swp"
        saved.write_bytes(b"-p\n-q\n")                # a copy that lost one `-p`
        os.rename(saved, spool.path("jobs.tq"))
        spool.poll(2)
        assert controls(spool.path("jobs.tq")) == "=-"  # `-q`: not known complete yet
        spool.write("jobs.tq", "-p\n\n")              # a new message, and `-q` complete
        spool.poll()
        assert bodies(queue) == ["p", "p", "q", "p"]
        assert controls(spool.path("jobs.tq")) == "==="
    finally:
        spool.stop()
