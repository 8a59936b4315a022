"""A last record that is complete but fails its checksum stays in the file: only a torn
tail is cut off. A real broker over real sockets and files, stopped and started again."""
import os
import pathlib

import pytest_twisted

from mqksbridge.bridge.journal import layout
from tests.conftest import RunningBroker

SETTINGS = {"durability": {"queues": ["jobs"]}}


def segment(data_dir):
    folder = pathlib.Path(data_dir, layout.JOURNAL, "jobs")
    return max(p for p in folder.iterdir() if layout.segment_number(p.name) is not None)


async def publish(running, *bodies):
    client = await running.mqks()
    ids = [f"p{i}" for i in range(len(bodies))]
    client.send(*(f"{mid} publish --confirm ev {body}" for mid, body in zip(ids, bodies)))
    assert await client.lines_n(len(ids)) == [f"{mid} ok " for mid in ids]


async def bound(data_dir):
    """A broker whose durable queue `jobs` takes event `ev` (bound by a consumer that
    never acks: what it is handed stays in the journal, and the binding in the
    definitions file)."""
    running = RunningBroker(SETTINGS, data_dir=data_dir)
    await running.start()
    client = await running.mqks()
    assert await client.request("w1 consume --confirm jobs ev --manual-ack") == "w1 ok "
    return running


def queued(running):
    return [e.message.frames[0] for e in running.broker.queues["jobs"].entries]


@pytest_twisted.ensureDeferred
async def test_an_edited_last_record_is_left_out_and_left_in_the_file(tmp_path):
    running = await bound(tmp_path)
    try:
        await publish(running, "first", "second", "third")
    finally:
        await running.stop()
    path = segment(tmp_path)
    data = bytearray(path.read_bytes())
    at = data.rindex(b"third")
    data[at] = ord("T")                         # the last record, edited: checksum fails
    path.write_bytes(bytes(data))

    again = RunningBroker(SETTINGS, data_dir=tmp_path)
    await again.start()
    try:
        assert queued(again) == [b"first", b"second"]
        problems = again.top.durability.problems
        assert any(f"{path}:{at - 1}: checksum mismatch, left out" == p for p in problems)
        assert not any("cut off" in p for p in problems)
        assert path.read_bytes() == bytes(data)  # left for a person to look at
        await publish(again, "fourth")           # appended after it, on a clean line
    finally:
        await again.stop()

    third = RunningBroker(SETTINGS, data_dir=tmp_path)
    await third.start()
    try:
        assert queued(third) == [b"first", b"second", b"fourth"]
        # the new segment took `fourth` and compacted the old one forward, which then was
        # archived: the edited record goes with it, unchanged
        kept = path if path.exists() else path.parent / layout.ARCHIVE / path.name
        assert kept.read_bytes()[at - 1:] == bytes(data)[at - 1:]
    finally:
        await third.stop()


@pytest_twisted.ensureDeferred
async def test_a_torn_last_record_is_still_cut_off(tmp_path):
    running = await bound(tmp_path)
    try:
        await publish(running, "first", "second")
    finally:
        await running.stop()
    path = segment(tmp_path)
    whole = path.read_bytes()
    cut = whole.rindex(b"\\c=")                 # the last record without its checksum line
    path.write_bytes(whole[:cut])

    again = RunningBroker(SETTINGS, data_dir=tmp_path)
    await again.start()
    try:
        assert queued(again) == [b"first"]
        assert any("torn last record, cut off" in p for p in again.top.durability.problems)
        assert os.path.getsize(path) == whole.rindex(b"-second")
    finally:
        await again.stop()
