"""Hypothesis over inbox files: any mix of records (bodies of any text, comments, settled
records, variables, blank lines, a torn last line), written in any pieces with the door
looking in between: every complete `-` record is published exactly once and flipped to
`=`, and no other byte of the file changes."""
import os
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.bridge.textqueue import files
from mqksbridge.protocols.textqueue import (
    TOO_LONG, Damage, Parser, Record, encode_record, scan, variable)
from tests.support.textqueue import Spool
from tests.textqueue.strategies import body_text, chunked, soup

VARIABLES = st.lists(st.sampled_from([
    "note=x", variable("error", "", 12), "s=a%20subject", "headers=k=v", "x", "f=:someone",
    variable("room", "", 3)]), max_size=3, unique=True)
ITEMS = st.lists(st.tuples(st.sampled_from("--=!#\n"), body_text, VARIABLES), max_size=12)


def build(items, torn):
    """The file, and the bodies of the records the door must publish (marked with their
    index so each is told apart)."""
    data, expected = b"", []
    for k, (control, body, variables) in enumerate(items):
        if control == "\n":
            data += b"\n"
            continue
        body = f"{k}:{body}"
        data += encode_record(control, body, variables)
        if control == "-":
            expected.append(body)
    if torn:
        data += b"-a torn line that never ends"
    return data, expected


def starts(data):
    """(offset, control, complete) of every record, the last one included."""
    found = scan(data)
    out = [(r.offset, r.control, True) for r in found.records()]
    tail = found.incomplete
    if tail is not None:
        out.append((tail.offset, tail.record().control, tail.terminated))
    return out


def append_in_pieces(spool, path, pieces):
    """A writer appending to a new inbox file piece by piece, the door looking in between;
    then the grace time passes."""
    os.makedirs(spool.inbox, exist_ok=True)
    path.write_bytes(b"")
    for piece in pieces:
        with open(path, "ab") as f:
            f.write(piece)
        spool.poll()
    spool.advance(3.0)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(items=ITEMS, torn=st.booleans(), cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_every_queued_record_is_published_once_and_flipped(server, tmp_path, items, torn,
                                                           cuts):
    name = f"q{uuid.uuid4().hex[:8]}"
    directory = tmp_path / name
    spool = Spool(server, directory, grace=2.0)
    queue = server.broker.queue(name)
    path = spool.path(f"{name}.tq")
    data, expected = build(items, torn)
    try:
        append_in_pieces(spool, path, chunked(data, cuts))
        published = [e.message.frames[0].decode("utf-8", "surrogateescape")
                     for e in queue.entries]
        assert published == expected
        after = path.read_bytes()
        assert len(after) == len(data)
        queued = {offset for offset, control, whole in starts(data) if control == "-" and whole}
        settled = {offset for offset, control, _ in starts(data) if control == "="}
        assert {offset for offset, control, _ in starts(after) if control == "="} == (
            queued | settled)
        changed = [i for i, (a, b) in enumerate(zip(data, after)) if a != b]
        assert set(changed) == queued
    finally:
        spool.stop()
        server.broker.delete_queue(name)


def expected_flips(data, max_record):
    """Offsets of the `-` records the door must flip (published or refused), of the
    over-long `-` records it must refuse, and of every record start, by the incremental
    parser over the whole file (its last record counts when its last line ended: the
    grace time passes)."""
    parser = Parser(0, max_record)
    items = parser.feed(data)
    tail = parser.incomplete()
    starts = sorted({i.offset for i in items if isinstance(i, Record) or i.kind == TOO_LONG}
                    | ({tail.offset} if tail is not None else set()))
    if tail is not None and tail.data.endswith(b"\n"):
        items.append(tail.record())
    queued = {i.offset for i in items if isinstance(i, Record) and i.control == "-"}
    too_long = {i.offset for i in items
                if isinstance(i, Damage) and i.kind == TOO_LONG and data[i.offset] == 0x2D}
    return queued, too_long, starts


def error_rooms(data, too_long, starts, reason):
    """What the `\\error=` room of each over-long record that a record follows must hold
    once refused: its last `\\error=` line before a blank line (ASCII only), the reason
    cut to the room and padded; {(start, end): bytes}."""
    rooms = {}
    for offset in too_long:
        end = next((s for s in starts if s > offset), None)
        if end is None:
            continue
        region = data[offset:end]
        blank = min(i for i in (region.find(b"\n\n"), region.find(b"\n\r\n"), len(region))
                    if i >= 0)
        at = region.rfind(b"\n\\error=", 0, blank)
        if at < 0:
            continue
        line_end = region.index(b"\n", at + 1)
        value = region[at + 8:line_end].rstrip(b"\r")
        if value.isascii():
            at += offset + 8
            rooms[(at, at + len(value))] = reason[:len(value)].rstrip(b" ").ljust(len(value))
    return rooms


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=ITEMS.map(lambda items: build(items, False)[0]) | soup, at=st.integers(0, 2000),
       long=st.sampled_from([b"", b"-" + b"y-" * 40 + b"\n", b"-" + b"y-" * 40 + b"\n -y-\n",
                             b"-y\n -" + b"-y" * 40 + b"\n\\-=y\n", b"-" + b"y-" * 40]),
       chunk=st.integers(8, 160), cuts=st.lists(st.integers(0, 2000), max_size=4))
def test_chunks_cut_anywhere_and_over_long_records(server, tmp_path, data, at, long, chunk,
                                                   cuts):
    """Chunks of any size (cut inside lines, inside over-long records, inside orphan
    lines): every `-` record is flipped once, each over-long one to `!`, and no other byte
    changes; as many messages are published as records are flipped `=`."""
    max_record = 64
    starts = [o for o in (0, *(i + 1 for i, b in enumerate(data) if b == 0x0A)) if o <= at]
    data = data[:starts[-1]] + long + data[starts[-1]:]     # at a line start before `at`
    name = f"q{uuid.uuid4().hex[:8]}"
    spool = Spool(server, tmp_path / name, grace=2.0, max_record=max_record)
    queue = server.broker.queue(name)
    path = spool.path(f"{name}.tq")
    saved, files.CHUNK = files.CHUNK, chunk
    try:
        append_in_pieces(spool, path, chunked(data, cuts))
        after = path.read_bytes()
        assert len(after) == len(data) < 4096                 # (room is looked for in 4 KiB)
        queued, too_long, starts = expected_flips(data, max_record)
        rooms = error_rooms(data, too_long, starts, b"record over 64 bytes")
        for (start, end), value in rooms.items():
            assert after[start:end] == value
        in_rooms = {i for start, end in rooms for i in range(start, end)}
        changed = {i for i, (a, b) in enumerate(zip(data, after)) if a != b} - in_rooms
        assert changed == queued | too_long
        assert all(after[i] == 0x21 for i in too_long)
        assert all(after[i] in b"=!" for i in changed)
        assert len(queue.entries) == sum(after[i] == 0x3D for i in changed)
    finally:
        files.CHUNK = saved
        spool.stop()
        server.broker.delete_queue(name)
