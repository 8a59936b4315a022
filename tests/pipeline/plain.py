"""The plain-Python reading of the same files, to check the data source and the jobs
against: the incremental Parser fed in small chunks, journal.decode per record, and the
journal's own rules for the header and the last record (specs/textqueue.md). Nothing
here is shared with pipeline/ but the codec."""
import os
from typing import NamedTuple, Optional

from mqksbridge.protocols.textqueue import Damage, Parser, journal

STATUS = {"-": "queued", "=": "done", "!": "error", "#": "comment"}


class Row(NamedTuple):
    file: str
    offset: int
    queue: Optional[str]
    envelope: journal.Envelope
    checksum: str

    @property
    def status(self):
        return STATUS.get(self.envelope.status, self.envelope.status)


def read_file(path, chunk=997) -> list:
    records = []
    parser = Parser()
    with open(path, "rb") as f:
        while data := f.read(chunk):
            records += [r for r in parser.feed(data) if not isinstance(r, Damage)]
    tail = parser.incomplete()
    header = journal.decode_header(records[0]) if records and records[0].offset == 0 else None
    if header is None and tail is not None and tail.offset == 0 and not records:
        header = journal.decode_header(tail.record()) if tail.terminated else None
        if header is not None:
            tail = None
    if tail is not None and tail.terminated:
        last = tail.record()
        state = journal.checksum_state(last)
        if state in ("ok", "edited") or (state == "missing" and header is None):
            records.append(last)
    if header is not None:
        records = records[1:]
    base = header.created_ms if header else 0
    queue = header.queue if header else None
    return [Row(os.path.abspath(path), r.offset, queue, journal.decode(r, base),
                journal.checksum_state(r)) for r in records]


def read_tree(root) -> list:
    rows = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if not name.startswith((".", "_")) and not name.endswith(".tmp"):
                rows += read_file(os.path.join(folder, name))
    return rows
