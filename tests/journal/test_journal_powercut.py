"""Power cuts at any point: what docs/durability.md promises for each fsync policy.

A workload hypothesis chooses (confirmed publishes, deliveries, acks of the newest so
that old stragglers get compacted, rejections up to dead-lettering, interval ticks) runs
on the real journal over real files in small segments (compaction and archiving at
nearly every roll), its every file change recorded (tests/journal/powercut.py). Then,
for crash points hypothesis chooses, the disk a power cut could leave there is built
(what was synced, plus any prefix of the rest per file and per directory, a write
perhaps torn) and a fresh broker recovers from it. Sometimes the crash is a kill -9
first (everything written survives) and the power cut comes during or after the
recovery that follows.

After each recovery: every message the policy promises is back (`always`: each one
confirmed before the cut and not settled by then; `interval`: each one confirmed before
the last interval sync that completed; `never`: none), a message comes back at most once
per queue, with its body, and only if it was published; every live segment reads as
valid TextQueue (no damage, the last record ended) and definitions.json, if there, is
whole JSON.
"""
import json
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mqksbridge.bridge.journal import layout
from mqksbridge.protocols.textqueue import scan
from tests.journal.powercut import Disk, Recording
from tests.support.journal import Harness

FOREVER = float("inf")


class Chooser:
    """How much of a file's or directory's unsynced changes a cut keeps: all, none or
    any prefix (hypothesis chooses), and how much of a write is torn."""

    def __init__(self, data):
        self.data = data

    def __call__(self, n):
        if n == 0:
            return 0
        return self.data.draw(st.one_of(st.just(0), st.just(n), st.integers(0, n)))

    def torn(self, size):
        return self.data.draw(st.one_of(st.none(), st.integers(0, size - 1)))


ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("publish"), st.integers(1, 12), st.integers(1, 120)),
    st.tuples(st.just("take"), st.integers(1, 12)),
    st.tuples(st.just("ack_newest"), st.integers(1, 12)),
    st.tuples(st.just("ack"), st.integers(0, 99)),
    st.tuples(st.just("reject"), st.integers(0, 99)),
    st.tuples(st.just("tick")),
), min_size=4, max_size=40)

SETTINGS = st.fixed_dictionaries({
    "segment_size": st.just(1024),
    "compact_live": st.sampled_from([0.25, 0.5, 0.9]),
    "archive_retention": st.sampled_from([0.0, 604800.0]),
    "max_deliveries": st.sampled_from([0, 2]),
})


class Workload:
    """The journal at work, with what each message was promised and when (as a length
    of the recorded log: a crash at k keeps the first k operations at most)."""

    def __init__(self, directory, policy, options):
        self.disk = Disk(directory)
        self.files = Recording(directory)
        self.settings = {"queues": ["jobs"], "fsync": policy, **options}
        self.h = Harness(directory, self.settings, files=self.files)
        self.consumer = self.h.consumer(manual_ack=True, credit=0)
        self.bodies = {}
        self.confirmed = {}             # id -> log length when its confirmation went out
        self.safe = {}                  # id -> log length when an interval sync covered it
        self.settled = {}               # id -> log length when a consumer acked it

    @property
    def now(self):
        return len(self.files.log)

    def held(self):
        return list(self.consumer.unacked)

    def run(self, action):
        kind = action[0]
        if kind == "publish":
            for _ in range(action[1]):
                n = len(self.bodies) + 1
                body = (b"m%d:" % n + b"x" * action[2])[:max(action[2], 4)]
                mid = "m%d" % n
                self.bodies[mid] = body
                self.h.publish(body=body, id=mid, confirmed=_Stamp(self, mid))
        elif kind == "take":
            self.consumer.add_credit(action[1])
        elif kind == "ack_newest":
            for mid in self.held()[-action[1]:]:
                self.settled[mid] = self.now
                self.consumer.ack(mid)
        elif kind in ("ack", "reject") and self.held():
            held = self.held()
            mid = held[action[1] % len(held)]
            if kind == "ack":
                self.settled[mid] = self.now
                self.consumer.ack(mid)
            else:
                self.consumer.reject(mid)       # requeued, or dead-lettered: kept either way
        elif kind == "tick":
            self.h.writer.sync_interval()
        self.h.commit()
        if kind == "tick":
            for mid in self.confirmed:
                self.safe.setdefault(mid, self.now)

    def required(self, k):
        """Ids a cut after the first k operations must not lose."""
        policy = self.settings["fsync"]
        since = self.confirmed if policy == "always" else self.safe if policy == "interval" \
            else {}
        return {mid for mid, at in since.items()
                if at <= k < self.settled.get(mid, FOREVER)}


class _Stamp:
    """Harness.publish's `confirmed` list: records when the confirmation went out."""

    def __init__(self, workload, mid):
        self.workload, self.mid = workload, mid

    def append(self, mid):
        self.workload.confirmed[mid] = self.workload.now


def recover_and_check(workload, directory, required, files=None):
    """A fresh broker on `directory`: check what came back (module docstring)."""
    h = Harness(directory, workload.settings, files=files)
    h.commit()                          # recovery's own writes: flips, archiving
    back = set()
    for name, queue in h.broker.queues.items():
        ids = [e.message.id for e in (*queue.priority, *queue.entries)]
        assert len(ids) == len(set(ids)), f"{name}: a message came back twice: {ids}"
        for entry in (*queue.priority, *queue.entries):
            mid = entry.message.id
            assert workload.bodies.get(mid) == entry.message.frames[0], mid
        back.update(ids)
    lost = required - back
    assert not lost, f"lost {sorted(lost)}; problems: {h.durability.problems}"
    _valid(directory)
    return h


def _valid(directory):
    for root, dirs, names in os.walk(os.path.join(directory, layout.JOURNAL)):
        dirs[:] = [d for d in dirs if d != layout.ARCHIVE]      # the broker never reads it
        for name in names:
            if layout.segment_number(name) is None:
                continue
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            found = scan(data)
            assert not found.damages, (name, found.damages)
            assert data.endswith(b"\n"), (name, data[-80:])
    definitions = os.path.join(directory, layout.DEFINITIONS)
    if os.path.exists(definitions):
        with open(definitions, "rb") as f:
            json.loads(f.read())


def crash_points(data, log):
    """Crash points: anywhere, or right after a sync, rename or removal."""
    after = [i + 1 for i, op in enumerate(log) if op[0] in ("sync", "syncdir", "rename",
                                                            "unlink")]
    point = st.integers(0, len(log))
    if after:
        point = st.one_of(point, st.sampled_from(after))
    return data.draw(st.lists(point, min_size=1, max_size=4, unique=True))


# The disks a cut leaves are written to memory when there is a tmpfs (their fsyncs cost
# nothing there); the workload itself runs on the disk of the temporary directory.
IMAGES = "/dev/shm" if os.path.isdir("/dev/shm") else None


def power_cuts(policy, data, actions, options):
    scratch = tempfile.mkdtemp(prefix="powercut-")
    images = tempfile.mkdtemp(prefix="powercut-", dir=IMAGES)
    try:
        live = os.path.join(scratch, "live")
        os.mkdir(live)
        workload = Workload(live, policy, options)
        for action in actions:
            workload.run(action)
        log = workload.files.log
        for i, k in enumerate(crash_points(data, log)):
            disk = workload.disk.copy()
            disk.replay(log[:k])
            cut = os.path.join(images, "cut%d" % i)
            if data.draw(st.booleans()):                 # a power cut at k
                disk.image(cut, Chooser(data))
                recover_and_check(workload, cut, workload.required(k))
                continue
            disk.page_cache(cut)                         # a kill -9 at k, then recovery,
            files = Recording(cut)                       # then a power cut in or after it
            recover_and_check(workload, cut, workload.required(k), files)
            later = data.draw(st.integers(0, len(files.log)))
            disk.replay(files.log[:later])
            again = os.path.join(images, "again%d" % i)
            disk.image(again, Chooser(data))
            recover_and_check(workload, again, workload.required(k))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(images, ignore_errors=True)


class Lose:
    """A cut that takes every unsynced change (`keep`: none of them)."""

    def __init__(self, keep=False):
        self.keep = keep

    def __call__(self, n):
        return n if self.keep else 0

    def torn(self, size):
        return None


# Stragglers compacted forward at rolls of full segments, the rest acked, a message
# rejected until it is dead-lettered, interval ticks between.
STRAGGLERS = [("publish", 8, 117), ("take", 8), ("tick",), ("ack_newest", 6),
              ("publish", 8, 117), ("take", 8), ("ack_newest", 8), ("publish", 8, 117),
              ("reject", 0), ("take", 1), ("reject", 0), ("publish", 8, 117), ("tick",),
              ("publish", 4, 60),
              ("take", 9), ("ack_newest", 9), ("publish", 8, 117), ("tick",)]


@pytest.mark.parametrize("policy", ["always", "interval"])
@pytest.mark.parametrize("retention", [0.0, 604800.0])
def test_every_crash_point_of_compaction_and_dead_lettering(tmp_path, policy, retention):
    """Every crash point of one workload, the cut taking every unsynced change: the
    shape of the losses LazyFS found (copies unsynced, flips and archiving synced)."""
    options = {"segment_size": 1024, "compact_live": 0.9, "archive_retention": retention,
               "max_deliveries": 1}
    live = tmp_path / "live"
    live.mkdir()
    workload = Workload(str(live), policy, options)
    for action in STRAGGLERS:
        workload.run(action)
    journal = workload.h.broker.queues["jobs"].journal
    assert journal.moved and workload.h.broker.queues["jobs.dlq"].entries
    log = workload.files.log
    images = tempfile.mkdtemp(prefix="powercut-", dir=IMAGES)
    try:
        for k in range(len(log) + 1):
            disk = workload.disk.copy()
            disk.replay(log[:k])
            cut = os.path.join(images, "cut%d" % k)
            disk.image(cut, Lose())
            recover_and_check(workload, cut, workload.required(k))
    finally:
        shutil.rmtree(images, ignore_errors=True)


CUTS = settings(max_examples=int(os.environ.get("POWERCUT_EXAMPLES", 50)), deadline=None, suppress_health_check=list(HealthCheck))


@CUTS
@given(st.data(), ACTIONS, SETTINGS)
def test_always_loses_nothing_confirmed(data, actions, options):
    power_cuts("always", data, actions, options)


@CUTS
@given(st.data(), ACTIONS, SETTINGS)
def test_interval_loses_only_what_was_confirmed_since_the_last_sync(data, actions, options):
    power_cuts("interval", data, actions, options)


@CUTS
@given(st.data(), ACTIONS, SETTINGS)
def test_never_still_recovers_a_valid_journal(data, actions, options):
    power_cuts("never", data, actions, options)


class Script:
    """`st.data()` played from a list: a case hypothesis once found, replayed exactly."""

    def __init__(self, values):
        self.values = list(values)

    def draw(self, strategy):
        return self.values.pop(0) if self.values else 0


def test_a_first_segment_compacted_away_leaves_its_queue_folder_synced():
    """Found by hypothesis: under `interval` the first segment of a new queue was
    compacted away (its records moved to the second) before any interval sync, and its
    retirement synced the segment but not the folders made with it, so a power cut after
    everything was confirmed and synced dropped `journal/<queue>` from `journal/` and the
    whole queue with it. Every cut point after that, power cut or kill -9, drops nothing
    unsynced (the Script draws 0: every unsynced change is lost)."""
    actions = [("publish", 2, 1), ("take", 1), ("take", 1), ("take", 1), ("take", 1),
               ("take", 2), ("publish", 5, 84), ("ack_newest", 6), ("tick",)]
    options = {"segment_size": 1024, "compact_live": 0.25, "archive_retention": 0.0,
               "max_deliveries": 0}
    for k in range(14, 22):
        for power in (True, False):
            power_cuts("interval", Script([[k], power]), actions, options)
