"""`export` and `compact` round trips on real files: the Parquet export reads back as the
journals' rows, partitioned by day and queue; compaction keeps exactly what its rule says,
byte for byte, and a compaction killed with SIGKILL at any moment loses nothing."""
import datetime
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from mqksbridge.pipeline import compact, export
from mqksbridge.pipeline.session import read
from tests.pipeline import plain, traffic

UTC = datetime.timezone.utc
NOW = datetime.datetime(2024, 6, 14, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def journals(tmp_path_factory):
    """Two days of traffic."""
    root = tmp_path_factory.mktemp("export-journals")
    traffic.write_tree(str(root), traffic.envelopes(2000, seed=9, step_ms=60_000), segment_records=200)
    return root


def test_export_round_trip(spark, journals, tmp_path):
    out = str(tmp_path / "export")
    count = export.run(spark, [journals], out, show_progress=False)
    comments = sum(r.status == "comment" for r in plain.read_tree(journals))
    assert comments > 0 and count == 2000 - comments        # comment records are no messages
    days = sorted(d for d in os.listdir(out) if d.startswith("day="))
    assert days == ["day=2024-06-13", "day=2024-06-14", "day=2024-06-15"]
    assert sorted(os.listdir(os.path.join(out, "day=2024-06-14"))) == [
        "queue=audit%2F1", "queue=img", "queue=jobs", "queue=orders"]
    back = spark.read.parquet(out).select(*export.DEFAULT, "day").collect()
    source = [r for r in read(spark, [journals], export.DEFAULT).collect() if r.status != "comment"]
    assert sorted(tuple(row)[:-1] for row in back) == sorted(map(tuple, source))
    for row in back:
        assert row.day == row.created.astimezone(UTC).date()
    narrowed = export.run(spark, [journals], str(tmp_path / "errors"), where="status = 'error'",
                          columns=["id", "status", "retry"], show_progress=False)
    assert narrowed == sum(r.status == "error" for r in plain.read_tree(journals))
    everything = export.run(spark, [journals], str(tmp_path / "all"), columns=["id", "status"],
                            show_progress=False, with_comments=True)
    assert everything == 2000
    written = spark.read.parquet(str(tmp_path / "all")).where("status = 'comment'").count()
    assert written == comments


def _kept(root, keep_days):
    """What the retention rule keeps, by the plain reading: (file, raw bytes of record)."""
    cutoff = NOW.timestamp() - keep_days * 86400
    kept = set()
    for row in plain.read_tree(root):
        e = row.envelope
        if row.status == "comment" and e.settled and e.settled.reason == "moved":
            continue
        when = e.settled.at if e.settled else e.created_at
        if row.status in ("queued", "error") or when >= cutoff:
            kept.add((row.file, e.id, row.status))
    return kept


def _present(root):
    return {(r.file, r.envelope.id, r.status) for r in plain.read_tree(root)}


def test_compact_keeps_what_the_rule_says(journals, tmp_path):
    archive = tmp_path / "archive"
    traffic.write_tree(str(archive), traffic.envelopes(2000, seed=9, step_ms=60_000), segment_records=200)
    before = _present(archive)
    want = _kept(archive, 0.5)
    assert len(want) < len(before)
    dry = compact.run(str(archive), 0.5, now=NOW, dry_run=True, show_progress=False)
    assert _present(archive) == before and dry.dropped == len(before) - len(want)
    outcome = compact.run(str(archive), 0.5, now=NOW, show_progress=False)
    assert _present(archive) == want
    assert outcome.dropped == len(before) - len(want) and outcome.rewritten + outcome.removed > 0
    # kept records are byte for byte what they were; a second run changes nothing
    assert compact.run(str(archive), 0.5, now=NOW, show_progress=False).dropped == 0
    for folder, _, names in os.walk(archive):
        assert not [n for n in names if n.endswith(".tmp")]


def test_compact_leaves_a_segment_it_cannot_read_whole(tmp_path):
    archive = tmp_path / "archive"
    written = traffic.write_tree(str(archive), traffic.envelopes(300, seed=2), segment_records=100)
    torn = sorted(written)[0]
    with open(torn, "ab") as f:
        f.write(b"-torn record without its checksum\n\\i=x")
    data = open(torn, "rb").read()
    outcome = compact.run(str(archive), 0, now=NOW, show_progress=False)
    assert open(torn, "rb").read() == data
    assert any(torn in note for note in outcome.left_alone)


COMPACT = [sys.executable, "-m", "mqksbridge.pipeline.cli", "compact", "--keep-days", "0.5",
           "--now", NOW.isoformat(), "--quiet"]


def test_a_compaction_killed_at_random_moments_loses_nothing(tmp_path):
    """SIGKILL a real compaction process at random points (while a temporary file is
    being written, right after a rename, at random times): after each kill every record
    is either still in its segment or, if the rule drops it, gone; never a half
    segment, never a record lost that the rule keeps; a final run finishes the job."""
    archive = tmp_path / "archive"
    traffic.write_tree(str(archive), traffic.envelopes(24000, seed=4, step_ms=7_000),
                       segment_records=400)
    before = _present(archive)
    want = _kept(archive, 0.5)
    assert len(want) < len(before)
    rng = random.Random(15)
    kills = 0
    for round_ in range(6):
        process = subprocess.Popen(COMPACT + [str(archive)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        mode = round_ % 3
        deadline = time.monotonic() + 60
        seen_tmp = 0
        at = time.monotonic() + rng.uniform(0.05, 1.0)
        while process.poll() is None and time.monotonic() < deadline:
            tmps = [e for e in os.scandir(_deepest(archive)) if e.name.endswith(".tmp")] \
                if mode < 2 else []
            if mode == 0 and tmps and tmps[0].stat().st_size >= rng.randrange(1, 60_000):
                break                               # while a temporary file is written
            if mode == 1:
                seen_tmp += bool(tmps)
                if seen_tmp and not tmps:
                    break                           # right after a rename
            if mode == 2 and time.monotonic() >= at:
                break                               # at a random time
            os.sched_yield()
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait(30)
        rows = [(r.file, r.envelope.id, r.status) for r in plain.read_tree(archive)]
        assert len(rows) == len(set(rows)), round_
        present = set(rows)
        assert want <= present <= before, round_
        if present == want:
            break
    assert kills >= 2
    final = subprocess.run(COMPACT + [str(archive)], capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr
    assert _present(archive) == want


def _deepest(archive):
    """The directory compaction works in longest: the biggest queue's."""
    folders = [os.path.join(archive, "journal", d) for d in os.listdir(os.path.join(archive, "journal"))]
    return max(folders, key=lambda f: len(os.listdir(f)))
