"""Where journals live under the data directory (specs/textqueue.md, section 8).

    <data_dir>/journal/<queue dir>/00000001.tq        live segments, numbered from 1
    <data_dir>/journal/<queue dir>/archive/00000001.tq   segments whose records are all settled
    <data_dir>/journal/<queue dir>/.00000001.tq.tmp   work files (never read; removed at start)
    <data_dir>/mailboxes/<mailbox dir>/...            durable mailboxes, laid out the same
    <data_dir>/definitions.json                       durable queue definitions

A queue name becomes a directory name that any file system takes: letters, digits, `-`,
`_` and `.` stay, every other byte of its UTF-8 is `%XX`, a leading `.` is `%2E` (no
hidden or `..` directories) and a name past 200 bytes is cut and ends with a hash of the
whole. The mapping is one-way on purpose: each segment's header holds the real name.
"""
import hashlib
import os
import re

JOURNAL = "journal"
MAILBOXES = "mailboxes"
ARCHIVE = "archive"
DEFINITIONS = "definitions.json"
SEGMENT_NAME = re.compile(r"^(\d{8,})\.tq$")
_SAFE = re.compile(rb"[^A-Za-z0-9._-]")
_MAX = 200


def queue_directory(name: str) -> str:
    """The directory name of a queue (module docstring)."""
    raw = name.encode("utf-8", "surrogateescape")
    safe = _SAFE.sub(lambda m: b"%%%02X" % m.group()[0], raw)
    if safe.startswith(b"."):
        safe = b"%2E" + safe[1:]
    if not safe:
        safe = b"%"
    if len(safe) > _MAX:
        digest = hashlib.sha256(raw).hexdigest()[:16].encode()
        safe = safe[:_MAX - 17].rstrip(b"%0123456789ABCDEF") + b"~" + digest
    return safe.decode("ascii")


def segment_number(filename: str):
    """The number of a segment file name, or None for any other file."""
    match = SEGMENT_NAME.match(filename)
    return int(match.group(1)) if match else None


def segment_name(number: int) -> str:
    return "%08d.tq" % number


def work_file(path: str) -> str:
    """The temporary name a file is written under before its atomic rename."""
    head, tail = os.path.split(path)
    return os.path.join(head, "." + tail + ".tmp")
