"""Hypothesis over inbox files: any mix of records (bodies of any text, comments, settled
records, variables, blank lines, a torn last line), written in any pieces with the door
looking in between: every complete `-` record is published exactly once and flipped to
`=`, and no other byte of the file changes."""
import os
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import encode_record, scan, variable
from tests.support.textqueue import Spool
from tests.textqueue.strategies import body_text, chunked

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
        os.makedirs(spool.inbox, exist_ok=True)
        path.write_bytes(b"")
        for piece in chunked(data, cuts):
            with open(path, "ab") as f:
                f.write(piece)
            spool.poll()                           # the door looks in between
        spool.advance(3.0)                         # the grace time passes
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
