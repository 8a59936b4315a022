"""Reading journals back at start: every durable queue's live records, in order.

For each queue directory under `<data_dir>/journal/`, its segments are read oldest
first (one read and one `scan_queued` each). What is kept:

- `-` records whose checksum verifies (or that an operator marked `\\c=-`), in the order
  of their original place: a compaction copy (`\\moved=S.O`) stands where its original
  stood, so a queue comes back in the order it was put in;
- their retry counters, read from the record (hand edits included); a dead letter an
  operator flipped back to `-` starts again at 0.

What is left out, and logged with the file and offset: `=`, `!` and `#` records; a
record whose checksum fails (a bit flip; it stays in the file as it is, for a person to
look at); a record a later copy supersedes (a crash between a compaction's copy and its
`#` flip leaves both: the copy wins, decided by place, never by id, since ids may
repeat); damaged lines. A torn tail (the record in progress at the end of a segment
when its last line is not terminated or it has no `\\c=` line yet: a crash mid-write) is
cut off with ftruncate and fsync, so the next append starts on a clean line; nothing
before it is touched. A last record that is complete but fails its checksum is not torn:
it is left out and left in the file, as anywhere else. Work files (`.*.tmp`) are
removed. A segment left with no record at all (its header torn) is removed. Every
segment is synced before it is read, and every directory read: what recovery decides
must rest on bytes on disk, not on a killed process's page cache (docs/durability.md).

This runs once at start, before any listener accepts, on the reactor thread: nothing
else runs yet. A million queued records must come back in seconds, so a segment whose
records are all fresh (as we wrote them, checksum verified: protocols.textqueue.queued)
becomes entries list by list, each message a LazyMessage decoded when it is first used;
every other record is checked and decoded one by one, as it always was.

A queue whose backlog is paged out past a window (core.window) needs only that window in
memory: with `keep`, recovery builds entries for that many records of each queue, and the rest of
a journal of fresh records comes back as *runs* (`Recovered.runs`: segment, offsets,
record sizes, retries, content bytes), their records' places only, which the queue's
pager reads back as consumers get there (bridge.spill.pagers.JournalPager). A segment
is then scanned and let go before the next is read, so memory at start is the window
and one segment's scan. A journal with compaction copies (`\\moved=`), whose order only
the whole journal settles, is read whole as before.
"""
from array import array
import os
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import repeat

from twisted.logger import Logger

from mqksbridge.bridge.journal import layout
from mqksbridge.bridge.journal.files import Files
from mqksbridge.bridge.journal.lazy import LazyMessage
from mqksbridge.bridge.journal.store import Slot
from mqksbridge.bridge.journal.writer import Segment
from mqksbridge.core import Message
from mqksbridge.core.message import Entry
from mqksbridge.protocols.textqueue import Record, TextQueueError, journal as records
from mqksbridge.protocols.textqueue.queued import scan_queued

log = Logger(namespace="mqksbridge.journal")

_PLUS_ONE = (1).__add__


@dataclass
class Recovered:
    """One queue's journal as found: `entries` are its core Entries in queue order, each
    with its Slot as `record`; `unplaced` those of them with no room for in-place edits."""
    name: str
    directory: str
    segments: list
    entries: list = field(default_factory=list)
    unplaced: list = field(default_factory=list)
    next_number: int = 1
    superseded: list = field(default_factory=list)   # (Segment, offset, size): flip to '#'
    runs: list = field(default_factory=list)         # behind `entries`, places only (above)
    problems: list = field(default_factory=list)      # what was left out, for logs and tests


def recover(root, policy_of, files=None, keep=None):
    """Every queue journal under `root` ({name: Recovered}); `policy_of(name)` is the
    fsync policy the queue's segments keep; `files` the file layer changes go through;
    `keep`: how many records of each to make entries of (module docstring; None: all)."""
    found = {}
    if not os.path.isdir(root):
        return found
    files = files or Files()
    for folder in (os.path.dirname(os.path.abspath(root)), root):
        files.sync_directory(folder)    # what is read below may rest on their entries
    for entry in sorted(os.listdir(root)):
        directory = os.path.join(root, entry)
        if os.path.isdir(directory):
            recovered = recover_queue(directory, policy_of, files, keep)
            if recovered is not None:
                if recovered.name in found:
                    log.error("journal {dir} names queue {name!r} as {other} does; left out",
                              dir=directory, name=recovered.name,
                              other=found[recovered.name].directory)
                    continue
                found[recovered.name] = recovered
    return found


def _files(directory, files):
    numbers = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith(".") and name.endswith(".tmp"):
            files.unlink(path)
            continue
        number = layout.segment_number(name)
        if number is not None and os.path.isfile(path):
            numbers.append(number)
    return sorted(numbers)


def recover_queue(directory, policy_of, files=None, keep=None):
    """The Recovered journal of one queue directory, or None when it holds no segment."""
    files = files or Files()
    numbers = _files(directory, files)
    files.sync_directory(directory)
    if not numbers:
        return None
    result = Recovered(None, directory, [], next_number=numbers[-1] + 1)
    room = keep             # records still to make entries of (None: every one)
    blocks = []             # (Segment, base, QueuedScan) of each segment taken
    copies = {}             # origin -> (segment number, offset) of the newest copy
    moved = {}              # (segment number, offset) of a queued copy -> its origin
    for number in numbers:
        path = os.path.join(directory, layout.segment_name(number))
        data = _read_synced(files, path)
        queued = scan_queued(data)
        found = queued.scan
        offsets, raws = found.offsets, found.raws
        end = len(data)
        if queued.tail is not None:
            offsets, raws = offsets + [queued.tail.offset], raws + [queued.tail.raw]
        elif records.complete_tail(found.incomplete) is not None:
            last = found.incomplete
            offsets, raws = offsets + [last.offset], raws + [last.data[:-1]]
            if last.data[:1] == b"-":
                result.problems.append(f"{path}:{last.offset}: checksum "
                                       f"{records.checksum_state(last.data[:-1])}, left out")
        elif found.incomplete is not None:
            end = found.incomplete.offset
            _truncate(files, path, end, result)
        for damage in found.damages:
            result.problems.append(f"{path}:{damage.offset}: damaged ({damage.kind}), skipped")
        header = records.decode_header(Record(offsets[0], raws[0])) if raws else None
        if header is None:
            if not raws:
                result.problems.append(f"{path}: no header (torn at creation), removed")
                files.unlink(path)
                files.sync_directory(directory)
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
        segment = Segment(directory, number, base, None, end=end)
        result.segments.append(segment)
        if b"\\moved=" in data:
            if result.runs:                 # the whole journal decides its order
                return recover_queue(directory, policy_of, files)
            room = None
        if room is not None and None not in queued.retries and len(queued.raws) > room:
            queued = _run(result, segment, queued, room)
            room = 0
        elif room is not None:
            if result.runs:                 # a record that is not fresh, behind runs
                return recover_queue(directory, policy_of, files)
            room = max(0, room - len(queued.raws))
        blocks.append((segment, base, queued._replace(scan=None)))
        if b"\\moved=" in data:
            for i in range(first, len(raws)):
                raw = raws[i]
                if b"\\moved=" in raw:
                    origin = records.moved_from(raw)
                    place = (number, offsets[i])
                    if copies.get(origin, (0, -1)) < place:
                        copies[origin] = place
                    if raw[:1] == b"-":
                        moved[place] = origin
        # this segment's bytes and scan go before the next is read
        data = found = raws = offsets = queued = None
    if result.name is None:
        result.problems.append(f"{directory}: no segment names its queue; left out")
        _log(result)
        return None
    policy = policy_of(result.name)
    for segment in result.segments:
        segment.policy = policy
    touched = {place[0] for place in copies} | {place[0] for place in moved}
    kept, copied = [], []
    for block in blocks:
        if block[0].number in touched:
            kept.append(_admit_one_by_one(result, block, copies, moved, copied))
        else:
            kept.append(_admit(result, block))
    result.entries = _in_order(kept, copied)
    _log(result)
    return result


def _run(result, segment, queued, room):
    """Records `room` on of a segment of fresh records become a run (module docstring);
    returns the scan of the records before them."""
    raws = queued.raws
    record_sizes = array("I", map(_PLUS_ONE, map(len, raws[room:])))
    result.runs.append((segment, array("Q", queued.offsets[room:]), record_sizes,
                        array("I", queued.retries[room:]), sum(queued.sizes[room:])))
    segment.live += len(record_sizes)
    segment.live_bytes += sum(record_sizes)
    return queued._replace(offsets=queued.offsets[:room], raws=raws[:room],
                           retries=queued.retries[:room], sizes=queued.sizes[:room])


def _admit(result, block):
    """(segment number, offsets, entries) of one segment's queued records that come back,
    in file order, for a segment no compaction copy involves."""
    segment, base, queued = block
    offsets, raws, retries, sizes = queued.offsets, queued.raws, queued.retries, queued.sizes
    if None in retries:
        return _admit_one_by_one(result, block, {}, {}, [])
    # Every record fresh: lists in, lists out, no Python code per record but __init__s.
    entries = list(map(Entry, map(LazyMessage, raws, repeat(base), sizes), retries))
    record_sizes = list(map(_PLUS_ONE, map(len, raws)))
    for entry, slot in zip(entries, map(Slot, repeat(segment), offsets, record_sizes)):
        entry.record = slot
    segment.live += len(entries)
    segment.live_bytes += sum(record_sizes)
    return segment.number, offsets, entries


def _admit_one_by_one(result, block, copies, moved, copied):
    """_admit for any segment: records superseded by a copy are left out (and flipped to
    '#' later), copies go to `copied` as (origin, place, entry), records that are not
    fresh are decoded now."""
    segment, base, queued = block
    number = segment.number
    kept_offsets, entries = [], []
    for offset, raw, retry, size in zip(queued.offsets, queued.raws, queued.retries,
                                        queued.sizes):
        place = (number, offset)
        origin = moved.get(place)
        newest = copies.get(origin or place)
        if newest is not None and newest != place:
            result.superseded.append((segment, offset, len(raw) + 1))
            result.problems.append(f"{segment.path}:{offset}: superseded by the copy at "
                                   f"{newest[0]}:{newest[1]}, flipped to '#'")
            continue
        if retry is None:
            entry = _decoded(result, segment, base, offset, raw, origin)
            if entry is None:
                continue
        else:
            entry = Entry(LazyMessage(raw, base, size), retry)
            entry.record = Slot(segment, offset, len(raw) + 1, None, origin)
        segment.live += 1
        segment.live_bytes += entry.record.size
        if origin is None:
            kept_offsets.append(offset)
            entries.append(entry)
        else:
            copied.append((origin, place, entry))
    return number, kept_offsets, entries


def _decoded(result, segment, base, offset, raw, origin):
    """The Entry of a queued record that is not fresh (hand edited, a body of many lines
    or frames, priority, ttl, a damaged checksum), decoded now; None when it is left out."""
    state = records.checksum_state(raw)
    if state not in ("ok", "edited"):
        result.problems.append(f"{segment.path}:{offset}: checksum {state}, left out")
        return None
    try:
        env = records.decode(raw, base)
    except TextQueueError as exc:
        result.problems.append(f"{segment.path}:{offset}: {exc}, left out")
        return None
    size = len(raw) + 1
    places, room = _places(offset, raw)
    message = Message(env.id, env.subject, env.frames, env.headers, env.sender, env.origin,
                      env.tracker, env.priority, env.expires_at, env.created_at)
    entry = Entry(message, 0 if _retried_dead_letter(env) else env.retry)
    entry.record = Slot(segment, offset, size, places, origin)
    if not room:
        result.unplaced.append(entry)
    return entry


def _retried_dead_letter(env):
    """A dead letter an operator flipped back to `-` (docs/guide.md): it starts a new
    count of hand-backs, so it gets max_deliveries more tries (its old count stays in
    the record until the next hand-back, and in the dead-letter queue's copy)."""
    return env.settled is not None and env.settled.reason == "dead-lettered"


def _in_order(kept, copied):
    """Every segment's entries in queue order: each compaction copy stands where its
    original stood (by that place: segment number, offset), the rest in file order."""
    entries = []
    if not copied:
        for _, _, block in kept:
            entries += block
        return entries
    copied.sort(key=_places_of_copy)
    blocks = iter(kept)
    number, offsets, block = next(blocks, (None, [], []))
    at = 0
    for (origin_number, origin_offset), _, entry in copied:
        while number is not None and number < origin_number:
            entries += block[at:]
            number, offsets, block = next(blocks, (None, [], []))
            at = 0
        if number == origin_number:
            stop = bisect_left(offsets, origin_offset, at)
            entries += block[at:stop]
            at = stop
        entries.append(entry)
    while number is not None:
        entries += block[at:]
        number, offsets, block = next(blocks, (None, [], []))
        at = 0
    return entries


def _places_of_copy(copy):
    return copy[0], copy[1]


def _places(offset, raw):
    """(places, room) of a record read back: None for the fixed tail of a record we
    wrote (worked out on its first edit, as for a record just appended), else the places
    a full parse finds (hand edits may have changed widths); `room` is False when it has
    no \\r or \\e to edit (recovery then copies it forward: journal.adopt)."""
    if records.fresh_tail(raw):
        return None, True
    try:
        return records.places_of(Record(offset, raw)), True
    except TextQueueError:
        return None, False


def _read_synced(files, path):
    """The bytes of a segment, synced first: after a kill -9 they may be in the page
    cache only, and what recovery decides from them (a copy supersedes its original,
    which is flipped to `#`) must not rest on bytes a power cut could still take."""
    fd = files.open(path)
    try:
        files.fdatasync(fd)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        files.close(fd)


def _truncate(files, path, offset, result):
    """Cut a torn tail off, durably."""
    result.problems.append(f"{path}:{offset}: torn last record, cut off")
    fd = files.open(path)
    try:
        files.ftruncate(fd, offset)
        files.fsync(fd)
    finally:
        files.close(fd)


def _log(result):
    for problem in result.problems:
        log.warn("journal recovery: {problem}", problem=problem)
