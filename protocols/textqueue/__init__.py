"""TextQueue, sans-IO: the one codec of the project (journals, the TextQueue door, the
data pipeline all use it). See specs/textqueue.md.

- `Parser`: incremental reader (bytes in any chunking -> records, damage, incomplete).
- `one_line_body`, `unpadded`: a record's body read without parsing it (the inbox's hot
  path), the record without its variables' room.
- `scan`: bulk reader of a whole buffer, equal to the parser; `record_start`,
  `record_start_in`: where to cut a file into byte ranges.
- `encode_record`, `variable`, `flip`, `rewrite`, `merge_edits`, `flip_queued`: the writer
  and in-place edits; `edit_key`: what of a record those edits leave alone.
- `record`: the journal record's definition (variables, escaping, value codecs, checksum);
  `journal`: our message-per-record layout over it (encode_message, decode, verify, edits).
  Named fast paths beside them, held equal to the plain path by one property test:
  `journal.encode_plain`/`encode_batch`, `columns.decode_columns`, `queued.scan_queued`/
  `decode_fresh`, and `arrow_columns.Fields` (numpy/pyarrow, imported by the pipeline only).
"""
from mqksbridge.protocols.textqueue.parser import Parser
from mqksbridge.protocols.textqueue.records import (
    CR, DEFAULT_MAX_RECORD, NUL, ORDER, ORPHAN, TOO_LONG, UTF8, Damage, Incomplete, Problem,
    Record, TextQueueError, Variable, one_line_body, unpadded)
from mqksbridge.protocols.textqueue.scan import Scan, record_start, record_start_in, scan
from mqksbridge.protocols.textqueue.writer import (
    Edit, edit_key, encode_record, flip, flip_queued, merge_edits, rewrite, variable)
from mqksbridge.protocols.textqueue.queued import QueuedScan, scan_queued

__all__ = [
    "Parser", "scan", "Scan", "record_start", "record_start_in", "scan_queued", "QueuedScan",
    "Record", "Variable", "one_line_body", "unpadded", "Problem", "Damage", "Incomplete", "TextQueueError",
    "encode_record", "variable", "flip", "rewrite", "Edit", "merge_edits", "flip_queued",
    "edit_key",
    "DEFAULT_MAX_RECORD", "NUL", "UTF8", "CR", "ORDER", "ORPHAN", "TOO_LONG",
]
