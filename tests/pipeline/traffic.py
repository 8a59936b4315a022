"""Realistic journals written with the journal encoder (protocols/textqueue/journal.py),
the way the broker lays them out: `<data>/journal/<queue>/<segment>.tq` live and
`<data>/journal/<queue>/archive/<segment>.tq` archived, one header per segment.

Traffic: several queues, every origin door, text, binary and multi-frame bodies,
headers, trackers, priorities, TTLs, retries, and every settle (acked by a consumer of
some door, dead-lettered, expired, removed, moved) beside queued records. Deterministic
for a seed. Used by the pipeline tests and bench/pipeline_bench.py.
"""
import math
import os
import random
import urllib.parse
from typing import NamedTuple

from mqksbridge.protocols.textqueue import journal
from mqksbridge.protocols.textqueue.journal import Envelope, Settle

BASE_MS = 1_718_306_771_923                     # 2024-06-13T19:26:11.923Z
QUEUES = ("orders", "jobs", "audit/1", "img")
ORIGINS = ("mqks", "malamute", "twino", "textqueue")
DOORS = ("mqks", "malamute", "twino", "textqueue")
# Mean milliseconds from publish to ack per queue: some queues are slower than others.
ACK_MS = {"orders": 300, "jobs": 2500, "audit/1": 60, "img": 20000}
SUBJECTS = {"orders": ("order.new", "order.paid", "order.shipped", "order.cancelled"),
            "jobs": ("job.resize", "job.mail"), "audit/1": ("audit.login", "audit.logout"),
            "img": ("img.png", "img.jpg")}


class Item(NamedTuple):
    """One journal record to write: the queue, the envelope (with its status, retry
    and settle) and the segment's time base."""
    queue: str
    envelope: Envelope


def _body(rng, origin, i):
    kind = rng.random()
    if origin == "malamute" and kind < 0.3:
        return (b"part-%d" % i, bytes(rng.getrandbits(8) for _ in range(6)), b"")
    if origin == "twino" and kind < 0.25:
        return (b"\x89PNG\r\n\x1a\n" + bytes(rng.getrandbits(8) for _ in range(12)),)
    if kind < 0.05:
        return ("line one\nline two\n-dash %d" % i).encode(),
    if kind < 0.08:
        return ("caf\u00e9 \U0001F600 %d" % i).encode(),
    return b"hello world, message %d" % i,


def envelopes(n, seed=1, start_ms=BASE_MS, step_ms=7, waves=0):
    """`n` Items, created `step_ms` apart on average from `start_ms`; with `waves` the
    rate rises and falls that many times over the run (busy and quiet hours)."""
    rng = random.Random(seed)
    period = n / waves if waves else 0
    for i in range(n):
        queue = QUEUES[rng.randrange(len(QUEUES))] if i % 5 else QUEUES[i % len(QUEUES)]
        origin = ORIGINS[rng.randrange(len(ORIGINS))]
        warp = 0.8 * period / (2 * math.pi) * math.sin(2 * math.pi * i / period) if period else 0
        created = start_ms + round((i + warp) * step_ms)
        headers = None
        if origin == "twino":
            headers = {"content-type": "application/json", "x-trace": "t%d" % i}
        roll = rng.random()
        status, retry, settled = "-", 0, None
        if roll < 0.55:
            wait = 1 + round(rng.expovariate(1 / ACK_MS[queue]))
            status, settled = "=", Settle("acked", (created + wait) / 1000,
                                          DOORS[rng.randrange(len(DOORS))])
            retry = 0 if rng.random() < 0.8 else rng.randrange(1, 4)
        elif roll < 0.62:
            status, retry = "!", 5
            settled = Settle("dead-lettered", (created + rng.randrange(1000, 90_000)) / 1000,
                             DOORS[rng.randrange(len(DOORS))])
        elif roll < 0.66:
            status, settled = "!", Settle("expired", (created + 60_000) / 1000)
        elif roll < 0.67:
            status, settled = "!", Settle("removed", (created + 120) / 1000)
        elif roll < 0.68:
            status, settled = "#", Settle("moved", (created + 3_600_000) / 1000)
        else:
            retry = 0 if rng.random() < 0.9 else rng.randrange(1, 3)
        yield Item(queue, Envelope(
            id="%016x" % rng.getrandbits(64),
            subject=SUBJECTS[queue][rng.randrange(len(SUBJECTS[queue]))],
            frames=_body(rng, origin, i), headers=headers,
            sender="127.0.0.1:%d.%d" % (40000 + rng.randrange(50), rng.randrange(9)),
            origin=origin, tracker="trk-%d" % i if origin == "malamute" and i % 3 == 0 else "",
            priority=origin == "twino" and i % 11 == 0, created_at=created / 1000,
            expires_at=(created + 60_000) / 1000 if roll >= 0.62 and roll < 0.66 else None,
            status=status, retry=retry, settled=settled))


def encode(item: Item, base_ms) -> bytes:
    e = item.envelope
    return journal.encode_message(e, base_ms=base_ms, status=e.status, retry=e.retry,
                                  settled=e.settled)


def queue_dir(root, queue):
    return os.path.join(root, "journal", urllib.parse.quote(queue, safe=""))


def write_tree(root, items, segment_records=200, archive_fraction=0.5):
    """Write `items` as segment files (each queue's records in order, a new segment
    every `segment_records`); the first `archive_fraction` of each queue's segments go
    to its archive/. Returns {path: [Item, ...]} of what each file holds."""
    per_queue = {}
    for item in items:
        per_queue.setdefault(item.queue, []).append(item)
    written = {}
    for queue, queued in per_queue.items():
        folder = queue_dir(root, queue)
        chunks = [queued[i:i + segment_records] for i in range(0, len(queued), segment_records)]
        archived = int(len(chunks) * archive_fraction)
        for number, chunk in enumerate(chunks, 1):
            where = os.path.join(folder, "archive") if number <= archived else folder
            os.makedirs(where, exist_ok=True)
            path = os.path.join(where, "%08d.tq" % number)
            base = round(chunk[0].envelope.created_at * 1000)
            with open(path, "wb") as f:
                f.write(journal.encode_header(queue, number, base))
                for item in chunk:
                    f.write(encode(item, base))
            written[path] = chunk
    return written


def stream_file(path, queue, n, seed=1, buffer_records=20000):
    """A single segment of `n` records streamed to `path` (for big benchmark files);
    returns its size."""
    base = BASE_MS
    with open(path, "wb") as f:
        f.write(journal.encode_header(queue, 1, base))
        out = []
        for item in envelopes(n, seed):
            out.append(encode(item._replace(queue=queue), base))
            if len(out) >= buffer_records:
                f.write(b"".join(out))
                out.clear()
        f.write(b"".join(out))
        return f.tell()
