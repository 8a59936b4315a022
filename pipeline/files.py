"""Finding journal files and reading them in byte ranges (no Spark here).

A path is a file, a directory (every file below it; live journals sit in
`<data_dir>/journal/<queue>/`, archived segments in an `archive/` directory beside them),
or a glob (`*`, `?`, `[...]`, and `**` for any depth). Hidden files and those whose name
starts with `_` or ends with `.tmp` are never read: they are the work files of writers
(compaction writes `.<name>.tmp` before it renames).

A file is read in ranges cut at arbitrary byte offsets: each range starts at the first
record start at or after its cut (`record_start_in`) and ends at the next range's start,
so every record lies in exactly one range (specs/textqueue.md, "Splitting a file into
byte ranges"). A file is read up to the size it had when the ranges were planned: a
journal still being appended to is read as it was then. The record in progress at that
size is taken only when it is whole: terminated and, for a journal, its checksum
verifies (a torn last record is never read); in a file that is not a journal (no
segment header: a TextQueue door's file) a terminated last record is whole.
"""
import fnmatch
import glob
import os
from dataclasses import dataclass
from typing import NamedTuple, Optional

from mqksbridge.pipeline.blocks import Block, split
from mqksbridge.protocols.textqueue import (
    Incomplete, Record, TextQueueError, record_start_in, scan)
from mqksbridge.protocols.textqueue import journal

BLOCK = 4 << 20                 # bytes read and scanned at a time
HEADER_PEEK = 64 << 10          # a segment header fits (a queue name is at most a few KiB)


class JournalFormatError(TextQueueError):
    """A file the pipeline cannot read as a TextQueue file (a layout it does not know)."""


def _hidden(name):
    return name.startswith((".", "_")) or name.endswith(".tmp")


def expand(paths, recursive=True, name_glob=None) -> list:
    """The files `paths` name, sorted, each once. A path that matches nothing raises
    FileNotFoundError (a typo should not read as an empty journal)."""
    found = set()
    for path in paths:
        path = os.path.expanduser(str(path))
        matches = sorted(glob.glob(path, recursive=True)) if glob.has_magic(path) else [path]
        if not matches or not os.path.exists(matches[0]):
            raise FileNotFoundError(f"no journal file or directory at {path}")
        for match in matches:
            if os.path.isdir(match):
                for folder, dirs, files in os.walk(match):
                    dirs[:] = sorted(d for d in dirs if not _hidden(d)) if recursive else []
                    found.update(os.path.join(folder, f) for f in files if not _hidden(f))
            elif os.path.isfile(match):
                found.add(match)
    if name_glob:
        found = {f for f in found if fnmatch.fnmatch(os.path.basename(f), name_glob)}
    return sorted(os.path.abspath(f) for f in found)


@dataclass(frozen=True)
class Header:
    """What a file's first record says about the file: the queue and time base of a
    journal segment; queue None and base 0 for a file that is no journal."""
    queue: Optional[str]
    base_ms: int
    journal: bool
    end: int                    # where the records after the header start


def read_header(path) -> Header:
    """The header of a file. A header cut short (a segment torn while it was being
    created: no record can follow it) reads as a journal with nothing after it."""
    with open(path, "rb") as f:
        data = f.read(HEADER_PEEK)
    result = scan(data)
    if result.offsets and result.offsets[0] == 0:
        first, torn = Record(0, result.raws[0]), False
    elif result.incomplete is not None and result.incomplete.offset == 0 and len(data) < HEADER_PEEK:
        first = result.incomplete.record()      # a segment with a header and no record yet
        torn = not result.incomplete.terminated
    else:
        return Header(None, 0, False, 0)
    header = journal.decode_header(first)
    if header is None:
        return Header(None, 0, False, 0)
    if torn or (header.layout != journal.LAYOUT and first.end == len(data)):
        return Header(header.queue, header.created_ms, True, len(data))
    if header.layout != journal.LAYOUT:
        raise JournalFormatError(f"{path}: journal layout {header.layout}, this reader knows "
                                 f"{journal.LAYOUT}")
    return Header(header.queue, header.created_ms, True, first.end)


class Range(NamedTuple):
    """Bytes [start, end) of a file cut at arbitrary offsets; `size` is the file's size
    when the range was planned (the last range ends there)."""
    path: str
    start: int
    end: int
    size: int


def balanced_split(files, split_bytes, cores=1, least=64 << 10) -> int:
    """The range size that cuts `files` into whole rounds of `cores` tasks of at most
    `split_bytes` each (about equal, at least `least` bytes: tiny ranges cost more to
    start than to read)."""
    total = sum(os.path.getsize(path) for path in files)
    tasks = -(-total // split_bytes)
    tasks = -(-tasks // cores) * cores
    return max(min(split_bytes, -(-total // max(tasks, 1))), min(least, split_bytes))


def plan(files, split_bytes) -> list:
    """Ranges of at most `split_bytes` over the files (an empty file gives none)."""
    ranges = []
    for path in files:
        size = os.path.getsize(path)
        for start in range(0, size, split_bytes):
            ranges.append(Range(path, start, min(start + split_bytes, size), size))
    return ranges


def read_range(r: Range, header: Header, block=BLOCK):
    """The records of range `r`, a `blocks.Block` at a time (at most about `block` bytes
    each)."""
    with open(r.path, "rb") as f:
        start = record_start_in(f, r.start) if r.start else 0
        end = record_start_in(f, r.end) if r.end < r.size else r.size
        end = min(end, r.size)
        if header.journal and start < header.end:
            start = header.end          # the segment header describes the file: not a row
        if start >= end:
            return
        f.seek(start)
        position = start
        carry = b""
        while position < end:
            data = f.read(min(block, end - position))
            if not data:
                break                   # the file shrank since planning: read what is there
            position += len(data)
            buffer = carry + data if carry else data
            records, tail = split(buffer, position - len(buffer))
            carry = b"" if tail is None else tail.data
            if len(records):
                yield records
        if carry:
            tail = Incomplete(position - len(carry), carry)
            cut = position < r.size and tail.terminated     # the next range starts here
            record = tail.record() if cut else _whole_tail(tail, header)
            if record is not None:
                yield Block.of_records(record.raw, record.offset, [record.offset], [record.raw])


def _whole_tail(tail, header):
    """The last record of a file when it is whole: in a journal, the journal's rule
    (terminated, checksum verifies); in a file with no segment header, terminated
    and not a journal record whose checksum fails."""
    if header.journal:
        return journal.whole_tail(tail)
    if not tail.terminated:
        return None
    record = tail.record()
    return record if journal.checksum_state(record) in ("ok", "edited", "missing") else None
