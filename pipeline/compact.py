"""`compact ARCHIVE`: rewrite archived journal segments, keeping what the retention rule
says, so that a crash at any moment loses nothing.

The rule: a record is kept when its status is one of `--keep-status` (default queued
and error: undelivered messages and dead letters stay until a person deals with
them), or when it was settled (or, never settled, created) less than `--keep-days`
before `--now`. Records moved forward by compaction of live segments (`#`, settle
code `m`) are dropped: their copy lives on in a newer segment. Other comments stay.

Each segment is rewritten on its own: the kept records (byte for byte, after the
segment's header) go to `.<name>.tmp` in the same directory, which is flushed and
fsynced, then renamed over the segment, and the directory is fsynced. At every moment
the segment's name holds either the old file or the whole new one; a leftover `.tmp`
(hidden: readers skip it) is removed by the next run. A segment with nothing left but
its header is removed. A segment whose bytes are not all whole records (a torn tail,
damage) is left as it is and reported: compaction never drops bytes it cannot read.

No Spark: segments are rewritten where they live (the rename must stay on one file
system), one at a time, by the machine that has the archive.
"""
import datetime
import os
import sys

from tqdm import tqdm

from mqksbridge.pipeline import files
from mqksbridge.protocols.textqueue.columns import decode_columns

TMP_PREFIX = "."
TMP_SUFFIX = ".tmp"
STATUS_CONTROLS = {"queued": "-", "done": "=", "error": "!", "comment": "#"}


class Rule:
    """Which records stay (see the module docstring)."""

    def __init__(self, keep_days, keep_status, now):
        self.keep_controls = {STATUS_CONTROLS.get(s, s) for s in keep_status}
        self.cutoff_ms = (now.timestamp() - keep_days * 86400) * 1000

    def keep(self, raws, controls, base_ms):
        columns = decode_columns(raws, ["created_ms", "settled_ms", "settle_reason"], base_ms)
        out = []
        for control, created, settled, reason in zip(
                controls.decode("latin-1"), columns["created_ms"], columns["settled_ms"],
                columns["settle_reason"]):
            if control == "#" and reason == "moved":
                out.append(False)
            elif control in self.keep_controls:
                out.append(True)
            else:
                out.append((settled if settled is not None else created) >= self.cutoff_ms)
        return out


class Outcome:
    def __init__(self):
        self.segments = self.rewritten = self.removed = self.records = self.dropped = 0
        self.bytes_before = self.bytes_after = 0
        self.left_alone = []

    def summary(self, dry_run):
        verb = "would drop" if dry_run else "dropped"
        text = (f"compact: {self.segments} segments, {verb} {self.dropped} of {self.records} "
                f"records; {self.rewritten} rewritten, {self.removed} removed, "
                f"{self.bytes_before - self.bytes_after} bytes freed")
        if self.left_alone:
            text += f"; left alone (not all whole records): {', '.join(self.left_alone)}"
        return text


def segments(archive):
    """The segment files under `archive` (a directory, read recursively, or a file);
    stale temporary files of an interrupted run are removed on the way."""
    if os.path.isfile(archive):
        return [os.path.abspath(archive)]
    if not os.path.isdir(archive):
        raise FileNotFoundError(f"no archive at {archive}")
    found = []
    for folder, dirs, names in os.walk(archive):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            if name.startswith(TMP_PREFIX) and name.endswith(TMP_SUFFIX):
                os.unlink(path)             # an interrupted run's: the segment is intact
                _fsync_dir(folder)
            elif not name.startswith((".", "_")):
                found.append(os.path.abspath(path))
    return found


def _fsync_dir(folder):
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compact_segment(path, rule, outcome, dry_run=False):
    size = os.path.getsize(path)
    header = files.read_header(path)
    if not header.journal:
        outcome.left_alone.append(f"{path} (no segment header)")
        return
    with open(path, "rb") as f:
        head = f.read(header.end)
    kept, covered, records, dropped = [], header.end, 0, 0
    for block in files.read_range(files.Range(path, 0, size, size), header):
        decisions = rule.keep(block.raws, block.controls, header.base_ms)
        for raw, offset, keep in zip(block.raws, block.offsets.tolist(), decisions):
            if offset != covered:
                break
            covered += len(raw) + 1
            records += 1
            if keep:
                kept.append(raw)
            else:
                dropped += 1
    if covered != size:
        outcome.left_alone.append(f"{path} (bytes {covered}-{size} are not whole records)")
        return
    outcome.segments += 1
    outcome.records += records
    outcome.dropped += dropped
    outcome.bytes_before += size
    if not dropped:
        outcome.bytes_after += size
        return
    folder, name = os.path.split(path)
    if not kept:
        outcome.removed += 1
        if not dry_run:
            os.unlink(path)
            _fsync_dir(folder)
        return
    data = head + b"".join(raw + b"\n" for raw in kept)
    outcome.rewritten += 1
    outcome.bytes_after += len(data)
    if dry_run:
        return
    tmp = os.path.join(folder, TMP_PREFIX + name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(folder)


def run(archive, keep_days=30.0, keep_status=("queued", "error"), now=None, dry_run=False,
        show_progress=None):
    now = now or datetime.datetime.now(datetime.timezone.utc)
    rule = Rule(keep_days, keep_status, now)
    outcome = Outcome()
    paths = segments(archive)
    for path in tqdm(paths, unit="segment", desc="compact", dynamic_ncols=True,
                     disable=None if show_progress is None else not show_progress):
        compact_segment(path, rule, outcome, dry_run)
    return outcome


def main(args):
    keep_days = 30.0 if args.keep_days is None else args.keep_days
    status = [s.strip() for s in args.keep_status.split(",") if s.strip()]
    try:
        outcome = run(args.archive, keep_days, status, args.now, args.dry_run,
                      False if args.quiet else None)
    except FileNotFoundError as e:
        print(f"mqksbridge-pipeline: {e}", file=sys.stderr)
        return 2
    print(outcome.summary(args.dry_run))
    return 0
