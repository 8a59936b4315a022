"""Segment roll, archive and compaction on a live broker, over real sockets: consumers
keep acking while the journal rolls small segments, an old unacknowledged message is
copied forward instead of pinning them, settled segments go to archive/, and a restart
brings back exactly what was unacknowledged, once."""
import pathlib

import pytest_twisted

from mqksbridge.bridge.journal import layout
from tests.conftest import RunningBroker

SETTINGS = {"durability": {"queues": ["jobs"], "segment_size": 4096, "compact_live": 0.25}}


def live_segments(data_dir):
    folder = pathlib.Path(data_dir, layout.JOURNAL, "jobs")
    return sorted(p for p in folder.iterdir() if layout.segment_number(p.name) is not None)


@pytest_twisted.ensureDeferred
async def test_segments_roll_archive_and_compact_under_live_consumers(tmp_path):
    running = RunningBroker(SETTINGS, data_dir=tmp_path)
    await running.start()
    try:
        worker = await running.mqks()           # acks everything but the first message
        assert await worker.request("w1 consume --confirm jobs ev --manual-ack") == "w1 ok "
        publisher = await running.mqks()
        assert await publisher.request("p0 publish --confirm ev straggler") == "p0 ok "
        assert await worker.line() == "w1 ok p0 event=ev straggler"
        for batch in range(10):                 # ~1.5 segments a batch, acked as they come
            ids = [f"b{batch}m{i}" for i in range(60)]
            publisher.send(*(f"{mid} publish --confirm ev {'x' * 40}" for mid in ids))
            assert await publisher.lines_n(len(ids)) == [f"{mid} ok " for mid in ids]
            lines = await worker.lines_n(len(ids))
            for line in lines:
                mid = line.split()[2]
                worker.send(f"a-{mid} ack --confirm w1 {mid}")
            await worker.lines_n(len(ids))
        journal = running.broker.queues["jobs"].journal
        assert journal.compactions >= 1 and journal.moved >= 1
        assert len(live_segments(tmp_path)) <= 3     # the straggler pins no old segment
        archive = pathlib.Path(tmp_path, layout.JOURNAL, "jobs", layout.ARCHIVE)
        assert len(list(archive.iterdir())) >= 5
    finally:
        await running.stop()
    again = RunningBroker(SETTINGS, data_dir=tmp_path)
    await again.start()
    try:
        assert [e.message.id for e in again.broker.queues["jobs"].entries] == ["p0"]
    finally:
        await again.stop()
