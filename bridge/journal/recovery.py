"""Reading journals back at start: every durable queue's live records, in order.

For each queue directory under `<data_dir>/journal/`, its segments are read oldest
first (one read and one `scan` each). What is kept:

- `-` records whose checksum verifies (or that an operator marked `\\c=-`), in the order
  of their original place: a compaction copy (`\\moved=S.O`) stands where its original
  stood, so a queue comes back in the order it was put in;
- their retry counters, read from the record (hand edits included).

What is left out, and logged with the file and offset: `=`, `!` and `#` records; a
record whose checksum fails (a bit flip; it stays in the file as it is, for a person to
look at); a record a later copy supersedes (a crash between a compaction's copy and its
`#` flip leaves both: the copy wins, decided by place, never by id, since ids may
repeat); damaged lines. A torn tail (the record in progress at the end of a segment that
is not terminated or whose checksum fails: a kill -9 mid-write) is cut off with
ftruncate and fsync, so the next append starts on a clean line; nothing before it is
touched. Work files (`.*.tmp`) are removed. A segment left with no record at all (its
header torn) is removed.

This runs once at start, before any listener accepts, on the reactor thread: nothing
else runs yet.
"""
import os
from dataclasses import dataclass, field

from twisted.logger import Logger

from mqksbridge.bridge.journal import layout
from mqksbridge.bridge.journal.store import Slot
from mqksbridge.bridge.journal.writer import Segment
from mqksbridge.core import Message
from mqksbridge.protocols.textqueue import Record, TextQueueError, journal as records, scan

log = Logger(namespace="mqksbridge.journal")

_TAIL = b"\\r="


@dataclass
class Recovered:
    """One queue's journal as found: `items` are (Message, retry, Slot) in queue order."""
    name: str
    directory: str
    segments: list
    items: list = field(default_factory=list)
    next_number: int = 1
    superseded: list = field(default_factory=list)   # (Segment, offset, size): flip to '#'
    problems: list = field(default_factory=list)      # what was left out, for logs and tests


def recover(root, policy_of):
    """Every queue journal under `root` ({name: Recovered}); `policy_of(name)` is the
    fsync policy the queue's segments keep."""
    found = {}
    if not os.path.isdir(root):
        return found
    for entry in sorted(os.listdir(root)):
        directory = os.path.join(root, entry)
        if os.path.isdir(directory):
            recovered = recover_queue(directory, policy_of)
            if recovered is not None:
                if recovered.name in found:
                    log.error("journal {dir} names queue {name!r} as {other} does; left out",
                              dir=directory, name=recovered.name,
                              other=found[recovered.name].directory)
                    continue
                found[recovered.name] = recovered
    return found


def _files(directory):
    numbers = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith(".") and name.endswith(".tmp"):
            os.unlink(path)
            continue
        number = layout.segment_number(name)
        if number is not None and os.path.isfile(path):
            numbers.append(number)
    return sorted(numbers)


def recover_queue(directory, policy_of):
    """The Recovered journal of one queue directory, or None when it holds no segment."""
    numbers = _files(directory)
    if not numbers:
        return None
    result = Recovered(None, directory, [], next_number=numbers[-1] + 1)
    candidates = []         # (origin, Segment, offset, raw, moved)
    copies = {}             # origin -> (segment number, offset) of the newest copy
    for number in numbers:
        path = os.path.join(directory, layout.segment_name(number))
        with open(path, "rb") as f:
            data = f.read()
        found = scan(data)
        offsets, raws = found.offsets, found.raws
        tail = found.incomplete
        if tail is not None:
            whole = records.whole_tail(tail)
            if whole is None:
                _truncate(path, tail.offset, result)
                data = data[:tail.offset]
            else:
                offsets, raws = offsets + [whole.offset], raws + [whole.raw]
        for damage in found.damages:
            result.problems.append(f"{path}:{damage.offset}: damaged ({damage.kind}), skipped")
        header = records.decode_header(Record(offsets[0], raws[0])) if raws else None
        if header is None:
            if not raws:
                result.problems.append(f"{path}: no header (torn at creation), removed")
                os.unlink(path)
                continue
            result.problems.append(f"{path}: no segment header, times read as absolute")
            base, first = 0, 0
        else:
            base, first = header.created_ms, 1
            if result.name is None:
                result.name = header.queue
            if header.layout != records.LAYOUT:
                result.problems.append(f"{path}: layout {header.layout} unknown, left out")
                continue
        segment = Segment(directory, number, base, None, end=len(data))
        result.segments.append((segment, base))
        has_copies = b"\\moved=" in data
        for i in range(first, len(raws)):
            raw = raws[i]
            moved = None
            if has_copies and b"\\moved=" in raw:
                moved = records.moved_from(raw)
                place = (number, offsets[i])
                if copies.get(moved, (0, -1)) < place:
                    copies[moved] = place
            if raw[:1] == b"-":
                candidates.append((moved or (number, offsets[i]), segment, offsets[i], raw,
                                   moved))
    if result.name is None:
        result.problems.append(f"{directory}: no segment names its queue; left out")
        _log(result)
        return None
    policy = policy_of(result.name)
    bases = {}
    for segment, base in result.segments:
        segment.policy = policy
        bases[segment.number] = base
    result.segments = [s for s, _ in result.segments]
    if copies:                  # only copies stand elsewhere than in file order
        candidates.sort(key=_origin)
    for origin, segment, offset, raw, moved in candidates:
        newest = copies.get(origin)
        if newest is not None and newest != (segment.number, offset):
            result.superseded.append((segment, offset, len(raw) + 1))
            result.problems.append(f"{segment.path}:{offset}: superseded by the copy at "
                                   f"{newest[0]}:{newest[1]}, flipped to '#'")
            continue
        state = records.checksum_state(raw)
        if state not in ("ok", "edited"):
            result.problems.append(f"{segment.path}:{offset}: checksum {state}, left out")
            continue
        try:
            env = records.decode(raw, bases[segment.number])
        except TextQueueError as exc:
            result.problems.append(f"{segment.path}:{offset}: {exc}, left out")
            continue
        size = len(raw) + 1
        slot = Slot(segment, offset, size, _places(offset, raw, size), moved)
        message = Message(env.id, env.subject, env.frames, env.headers, env.sender,
                          env.origin, env.tracker, env.priority, env.expires_at,
                          env.created_at)
        result.items.append((message, env.retry, slot))
        segment.live += 1
        segment.live_bytes += size
    _log(result)
    return result


def _origin(candidate):
    return candidate[0]


def _places(offset, raw, size):
    """The Places of a record read back: the fixed tail of a record we wrote, else the
    places a full parse finds (hand edits may have changed widths)."""
    places = records.fresh_places(offset, size)
    if (raw[places.retry - offset - 3:places.retry - offset] == _TAIL
            and raw[places.settle - offset - 3:places.settle - offset] == b"\\e="
            and raw[places.settle - offset + places.settle_width:][:4] == b"\n\\c="):
        return places
    try:
        return records.places_of(Record(offset, raw))
    except TextQueueError:
        return None


def _truncate(path, offset, result):
    """Cut a torn tail off, durably."""
    result.problems.append(f"{path}:{offset}: torn last record, cut off")
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def _log(result):
    for problem in result.problems:
        log.warn("journal recovery: {problem}", problem=problem)
