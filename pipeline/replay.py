"""`replay`: republish messages selected from the journals through a door of a running
broker (or append them to a TextQueue inbox file).

Messages go out one at a time from the driver, in journal order (publish time, then
file and offset), through the project's blocking clients (bridge/clients/), each
keeping what its protocol has a place for (docs/mapping.md):

| target | id | subject | headers | frames |
|---|---|---|---|---|
| `mqks://host:port/EVENT` | the MQKS request id, when the id is one token | EVENT (empty path: each message's own subject) | no place | one line: a body with LF, TAB, trailing whitespace or several frames cannot go |
| `twino://host:port/CHANNEL/QUEUE` | the Twino message id (1-255 bytes) | header `Subject` | as headers | joined, with `Frame-Lengths` |
| `malamute://tcp://host:port/SERVICE` (`?stream` for a stream) | no place | subject | no place | as frames; tracker kept |
| a file path | `\\i` | `\\s` | `\\headers` | all, as the journal stores them |

A message its target cannot carry is skipped and counted with the reason; the exit
status says so. Each target ends with a round trip on the same connection (MQKS and
Malamute ping, Twino ping) so "sent" means the broker has read every message; a file
is fsynced.
"""
import os
import re
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field

from pyspark.sql import functions as F
from tqdm import tqdm

from mqksbridge.pipeline.schema import COLUMNS
from mqksbridge.pipeline.session import read

FIELDS = ["file", "offset", "created", "id", "subject", "headers", "frames", "sender", "origin",
          "tracker", "priority", "expires", "size"]
_SPACE = b" \t\n\r\x0b\x0c"


def columns_for(where, needed):
    """The columns to declare: `needed` plus every column the predicate may name."""
    named = {c for c in COLUMNS if where and re.search(rf"\b{c}\b", where)}
    return list(needed) + sorted(named - set(needed))


@dataclass
class Result:
    target: str
    selected: int = 0
    sent: int = 0
    skipped: Counter = field(default_factory=Counter)
    dry_run: bool = False
    seconds: float = 0.0

    def summary(self):
        verb = "would replay" if self.dry_run else "replayed"
        text = f"replay: {verb} {self.sent} of {self.selected} selected messages to {self.target}"
        if self.seconds and self.sent and not self.dry_run:
            text += f" in {self.seconds:.1f} s ({self.sent / self.seconds:.0f} msg/s)"
        if self.skipped:
            reasons = ", ".join(f"{n} {reason}" for reason, n in self.skipped.most_common())
            text += f"; skipped {sum(self.skipped.values())}: {reasons}"
        return text


class Message:
    """A selected row, as the targets use it."""
    __slots__ = ("id", "subject", "headers", "frames", "sender", "origin", "tracker", "priority",
                 "created_at", "expires_at")

    def __init__(self, row):
        self.id = row["id"] or ""
        self.subject = row["subject"] or ""
        self.headers = dict(row["headers"]) if row["headers"] else None
        self.frames = tuple(bytes(f) for f in row["frames"])
        self.sender = row["sender"] or ""
        self.origin = row["origin"] or ""
        self.tracker = row["tracker"] or ""
        self.priority = bool(row["priority"])
        self.created_at = row["created"].timestamp()
        self.expires_at = row["expires"].timestamp() if row["expires"] is not None else None


# -- targets ---------------------------------------------------------------------------


class MqksTarget:
    """MQKS publish: `{id} publish {event} {body}` on one connection."""

    def __init__(self, host, port, event):
        self.host, self.port, self.event = host, port, event
        self.client = None
        self.generated = 0

    def unfit(self, m):
        event = (self.event or m.subject).encode("utf-8", "surrogateescape")
        if not event or any(c in event for c in b" \t\n\r"):
            return "subject not an MQKS event (empty or with spaces)"
        if len(m.frames) != 1:
            return "not one frame (MQKS bodies are one line)"
        body = m.frames[0]
        if not body or b"\n" in body or b"\t" in body or body[-1:] in (b" ", b"\t", b"\r", b"\x0b", b"\x0c"):
            return "body not one MQKS line (empty, LF, TAB or trailing whitespace)"
        return None

    def open(self):
        from mqksbridge.bridge.clients.mqks import MqksClient
        self.client = MqksClient(self.host, self.port, timeout=30)

    def send(self, m):
        mid = m.id.encode("utf-8", "surrogateescape")
        if not mid or any(c in mid for c in _SPACE):
            self.generated += 1
            mid = b"replay-%d" % self.generated
        event = (self.event or m.subject).encode("utf-8", "surrogateescape")
        self.client.send_line(b"%s publish %s %s" % (mid, event, m.frames[0]))

    def close(self):
        """The number of publishes the broker refused (`{id} error` lines)."""
        if self.client is None:
            return 0
        self.client.ping("replay-done")           # the door has read every publish before it
        refused = sum(1 for line in self.client._pending if line.split(b" ", 2)[1:2] == [b"error"])
        self.client.close()
        return refused


class TwinoTarget:
    """Twino push to (channel, queue), id, Subject and headers kept."""

    def __init__(self, host, port, channel, queue_id):
        self.host, self.port, self.channel, self.queue_id = host, port, channel, queue_id
        self.client = None

    def unfit(self, m):
        for key, value in [("Subject", m.subject), *(m.headers or {}).items()]:
            for text in (key, value):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    return "header not UTF-8 (Twino headers are text)"
                if "\r" in text or "\n" in text:
                    return "header with CR or LF (Twino headers are lines)"
        return None

    def open(self):
        from mqksbridge.bridge.clients import twino
        self.client = twino.connect(self.host, self.port, timeout=30)

    def send(self, m):
        from mqksbridge.protocols.twino.codec import Frame, MessageType, new_id
        headers = [("Subject", m.subject)] if m.subject else []
        if len(m.frames) != 1:
            headers.append(("Frame-Lengths", ",".join(str(len(f)) for f in m.frames)))
        headers += [(k, v) for k, v in (m.headers or {}).items()
                    if k.lower() not in ("subject", "frame-lengths")]
        mid = m.id if 0 < len(m.id.encode("utf-8", "surrogateescape")) <= 255 and m.id.isprintable() \
            else new_id()
        self.client.send_frame(Frame(
            MessageType.QUEUE_MESSAGE, high_priority=m.priority, message_id=mid,
            source=self.client.client_id, target=self.channel, content_type=self.queue_id,
            headers=headers or None, content=b"".join(m.frames)))

    def close(self):
        if self.client is not None:
            self.client.ping(timeout=30)
            self.client.close()


class MalamuteTarget:
    """Malamute SERVICE-SEND (or STREAM-SEND with `?stream`): subject, tracker, frames."""

    def __init__(self, endpoint, name, stream):
        self.endpoint, self.name, self.stream = endpoint, name, stream
        self.client = None

    def unfit(self, m):
        for what, text in (("subject", m.subject), ("tracker", m.tracker)):
            data = text.encode("utf-8", "surrogateescape")
            if len(data) > 255 or b"\x00" in data:
                return f"{what} not a Malamute string (over 255 bytes or NUL)"
        return None

    def open(self):
        from mqksbridge.bridge.clients.malamute import MalamuteClient
        self.client = MalamuteClient(self.endpoint, timeout=30, hwm=0)
        self.client.connect()
        if self.stream:
            self.client.set_producer(self.name)

    def send(self, m):
        if self.stream:
            self.client.send(m.subject, *m.frames)
        else:
            self.client.sendfor(self.name, m.subject, *m.frames, tracker=m.tracker)

    def close(self):
        if self.client is not None:
            self.client.ping()
            self.client.close()


class InboxTarget:
    """Journal records appended to a TextQueue file (absolute times: no header)."""

    def __init__(self, path):
        self.path = path
        self.file = None
        self.pending = []

    def unfit(self, m):
        return None

    def open(self):
        self.file = open(self.path, "ab")

    def send(self, m):
        from mqksbridge.protocols.textqueue import journal
        self.pending.append(journal.encode_message(m))
        if len(self.pending) >= 1000:
            self._flush()

    def _flush(self):
        self.file.write(b"".join(self.pending))
        self.pending.clear()

    def close(self):
        if self.file is not None:
            self._flush()
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()


def target(url):
    """The target a --to URL names; ValueError for a URL it cannot be."""
    if url.startswith("malamute://"):
        rest = url[len("malamute://"):]
        endpoint, _, name = rest.rpartition("/")
        name, _, query = name.partition("?")
        if not endpoint.startswith(("tcp://", "ipc://")) or not name:
            raise ValueError(f"malamute target is malamute://tcp://HOST:PORT/SERVICE[?stream]: {url}")
        if query not in ("", "stream"):
            raise ValueError(f"malamute target query is ?stream or nothing: {url}")
        return MalamuteTarget(endpoint, urllib.parse.unquote(name), query == "stream")
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "mqks":
        if not parsed.hostname or not parsed.port:
            raise ValueError(f"mqks target is mqks://HOST:PORT/EVENT: {url}")
        return MqksTarget(parsed.hostname, parsed.port, urllib.parse.unquote(parsed.path[1:]))
    if parsed.scheme == "twino":
        parts = parsed.path[1:].split("/")
        if not parsed.hostname or not parsed.port or len(parts) != 2 or not parts[1].isdigit():
            raise ValueError(f"twino target is twino://HOST:PORT/CHANNEL/QUEUE-ID: {url}")
        return TwinoTarget(parsed.hostname, parsed.port, urllib.parse.unquote(parts[0]), int(parts[1]))
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme == "file" else url
        if os.path.isdir(path):
            raise ValueError(f"an inbox target is a file, not a directory: {path}")
        return InboxTarget(path)
    raise ValueError(f"no replay target for {url}: mqks://, twino://, malamute://tcp://, or a file")


# -- the job ---------------------------------------------------------------------------


class _Pace:
    """At most `rate` messages per second (0: no limit), without drifting."""

    def __init__(self, rate):
        self.interval = 1 / rate if rate else 0
        self.next = time.monotonic()

    def wait(self):
        if self.interval:
            delay = self.next - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.next = max(self.next, time.monotonic() - 1) + self.interval


def selection(spark, paths, where):
    """The selected messages in journal order (comments are never messages)."""
    # pushFilters: safe here, every query of the selection pushes the same filters
    df = read(spark, paths, columns_for(where, FIELDS + ["status"]), pushFilters=True)
    df = df.where(F.col("status") != "comment")
    if where:
        df = df.where(where)
    return df.select(*FIELDS).orderBy("created", "file", "offset")


def run(spark, paths, where, to, rate=0, dry_run=False, show_progress=None, url=None):
    """Replay the selection to `to` (a target); returns a Result."""
    df = selection(spark, paths, where)
    result = Result(url or _describe(to), dry_run=dry_run)
    result.selected = df.count()
    if not dry_run:
        to.open()
    pace = _Pace(rate)
    started = time.monotonic()
    bar = tqdm(total=result.selected, unit="msg", desc="replay", dynamic_ncols=True,
               disable=None if show_progress is None else not show_progress)
    try:
        for row in df.toLocalIterator(prefetchPartitions=True):
            m = Message(row)
            reason = to.unfit(m)
            if reason:
                result.skipped[reason] += 1
            elif not dry_run:
                pace.wait()
                to.send(m)
                result.sent += 1
            else:
                result.sent += 1
            bar.update()
    finally:
        bar.close()
        if not dry_run:
            refused = to.close()
            if refused:
                result.skipped["refused by the broker"] += refused
                result.sent -= refused
    result.seconds = time.monotonic() - started
    return result


def _describe(to):
    if isinstance(to, MqksTarget):
        return f"mqks://{to.host}:{to.port}/{to.event}"
    if isinstance(to, TwinoTarget):
        return f"twino://{to.host}:{to.port}/{to.channel}/{to.queue_id}"
    if isinstance(to, MalamuteTarget):
        return f"malamute://{to.endpoint}/{to.name}" + ("?stream" if to.stream else "")
    return to.path
