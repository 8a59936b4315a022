"""Writing TextQueue: whole records to append, and in-place edits that move no byte.

A record is its control character and the body's first line, one continuation line
(a leading space) per further body line, then one line per variable (a leading
backslash). Nothing in a body needs escaping: every line of it starts with the space
the writer adds, so a `-` or `\\` at the start of a body line is just text.

The writer only produces what every reader agrees on: valid UTF-8 and no CR (a CR
before a newline is part of the line end for us, and any CR is a line break for the
reference reader), so it refuses CR, lone surrogates, and newlines in a variable.

An edit is `Edit(offset, data)`: write `data` at `offset` (os.pwrite) and nothing else
in the file moves. Flipping a control character and rewriting a variable within its
reserved width are the two edits the format allows. `merge_edits` turns many edits of
bytes a caller has just read into few writes (one syscall for a run of records instead
of one per record), writing the bytes between them back as they were; `flip_queued` is
its fast path for flipping every queued record of a run. `edit_key` is what stays of a
record whatever those edits did to it.
"""
from typing import NamedTuple

from mqksbridge.protocols.textqueue.records import Reason, Record, TextQueueError, Variable

_NOT_CONTROL = frozenset(" \\\n\r")


class Edit(NamedTuple):
    """Bytes to write over the file at `offset`."""
    offset: int
    data: bytes


def _encode(text, what):
    if "\r" in text:
        raise TextQueueError(Reason.VALUE, f"{what} contains a CR, which readers disagree on")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise TextQueueError(Reason.VALUE,
                             f"{what} is not valid Unicode (a lone surrogate)") from None


def _control(control):
    if len(control) != 1 or control in _NOT_CONTROL:
        raise TextQueueError(Reason.ARGUMENT, f"not a control character: {control!r}")
    return _encode(control, "control character")


def variable(name: str, value: str = "", width: int = 0) -> str:
    """The text of a `name=value` variable whose value has room for `width` bytes
    (padded with spaces, which readers take as reserved room)."""
    if not name or "=" in name or "\n" in name:
        raise TextQueueError(Reason.VALUE, f"not a variable name: {name!r}")
    if "\n" in value or value.endswith(" "):
        raise TextQueueError(Reason.VALUE,
                             "a variable value cannot hold a newline or end with a space: "
                             f"{value!r}")
    size = len(_encode(value, "variable value"))
    return f"{name}={value}" + " " * (width - size)


def encode_record(control: str, body, variables=()) -> bytes:
    """One record: `control` ('-', '=', '!', '#' or another character), `body` (str,
    or UTF-8 bytes) with its newlines as continuation lines, and `variables` (the
    text of each `\\` line, e.g. from `variable()`)."""
    if isinstance(body, str):
        data = _encode(body, "body")
    else:
        data = bytes(body)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise TextQueueError(Reason.VALUE, "body bytes are not UTF-8") from None
        if b"\r" in data:
            raise TextQueueError(Reason.VALUE, "body contains a CR, which readers disagree on")
    out = [_control(control), data.replace(b"\n", b"\n "), b"\n"]
    for text in variables:
        if "\n" in text:
            raise TextQueueError(Reason.VALUE, f"a variable cannot span lines: {text!r}")
        out += (b"\\", _encode(text, "variable"), b"\n")
    return b"".join(out)


def flip(target, control: str) -> Edit:
    """Set the control character of a record (a `Record`, or the offset of a record
    whose control character is one byte) to `control`, itself one byte."""
    data = _control(control)
    if len(data) != 1:
        raise TextQueueError(Reason.ARGUMENT,
                             f"an in-place control character must be one byte: {control!r}")
    if isinstance(target, Record):
        if len(target.control.encode("utf-8", "surrogateescape")) != 1:
            raise TextQueueError(Reason.ARGUMENT,
                                 f"cannot flip the multi-byte control character {target.control!r}")
        target = target.offset
    return Edit(target, data)


def rewrite(var: Variable, value: str) -> Edit:
    """Replace a variable's value in place, padded with spaces to the room it has
    (`var.width` bytes); the whole text for a variable without `=`."""
    if "\n" in value or value.endswith(" "):
        raise TextQueueError(Reason.VALUE,
                             "a variable value cannot hold a newline or end with a space: "
                             f"{value!r}")
    data = _encode(value, "variable value")
    room = var.width
    if len(data) > room:
        raise TextQueueError(Reason.FIT,
                             f"{len(data)} bytes do not fit the {room} reserved for {var.text!r}")
    return Edit(var.value_offset, data + b" " * (room - len(data)))


def merge_edits(edits, data: bytes, base: int, max_gap: int = 1024) -> list:
    """`edits` as fewer, longer edits: those less than `max_gap` bytes apart become one,
    the bytes between them taken from `data`, what the file holds at offsets `base` to
    `base + len(data)` (every edit must lie inside it). Writing the result leaves the
    file exactly as writing each edit would, as long as those bytes did not change in
    between. Overlapping edits are refused."""
    out = []
    end = len(data)
    run_start = run_end = None
    parts = []
    for offset, chunk in sorted(edits):
        start = offset - base
        stop = start + len(chunk)
        if start < 0 or stop > end:
            raise TextQueueError(Reason.FIT, f"edit at {offset} lies outside the bytes given")
        if run_end is not None and start < run_end:
            raise TextQueueError(Reason.FIT, f"edits overlap at {offset}")
        if run_end is not None and start - run_end <= max_gap:
            parts += (data[run_end:start], chunk)
        else:
            if parts:
                out.append(Edit(base + run_start, b"".join(parts)))
            run_start, parts = start, [chunk]
        run_end = stop
    if parts:
        out.append(Edit(base + run_start, b"".join(parts)))
    return out


def flip_queued(data: bytes, base: int, first: int, last: int, control: str = "=") -> Edit:
    """One edit that flips every `-` record starting between offsets `first` and `last`
    (both record starts, `last` included) of `data`, the bytes at offset `base`: what
    `merge_edits` of a `flip` of each makes with no gap limit, at the cost of one
    `bytes.replace`. A `-` after a line end always starts a record (a body line starts
    with a space, a variable with a backslash)."""
    new = _control(control)
    if len(new) != 1:
        raise TextQueueError(Reason.ARGUMENT,
                             f"an in-place control character must be one byte: {control!r}")
    start, stop = first - base, last - base + 1
    if start < 0 or stop > len(data) or start >= stop:
        raise TextQueueError(Reason.FIT, f"records {first} to {last} lie outside the bytes given")
    region = data[start:stop].replace(b"\n-", b"\n" + new)
    if region[:1] == b"-":
        region = new + region[1:]
    return Edit(first, region)


def edit_key(raw: bytes, assigned: bytes) -> bytes:
    """What identifies a record across the in-place edits made to it (`Record.raw`): its
    bytes after the control character, without room (trailing spaces), `\\error=` and an
    id written into room (an `i` or `id` value that is empty or starts with `assigned`).
    A file replaced by an editor's copy is matched to the old one by it."""
    body, sep, rest = raw[1:].partition(b"\n\\")
    if not sep:
        return body.rstrip(b"\r")
    kept = [body]
    for line in rest.split(b"\n\\"):
        line = line.rstrip(b" \r")
        name, eq, value = line.partition(b"=")
        if name == b"error":
            continue
        if eq and name in (b"i", b"id") and (not value or value.startswith(assigned)):
            line = name
        kept.append(line)
    return b"\n\\".join(kept)
