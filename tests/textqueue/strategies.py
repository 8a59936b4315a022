"""Hypothesis strategies and small helpers shared by the TextQueue tests."""
import os

from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import Parser, encode_record

# Text that starts lines in interesting ways once it sits in a body or a variable.
TRICKY = ["\n", " ", "  ", "-", "=", "!", "#", "\\", "\n-", "\n ", "\n\\", "\n#", "\n\n",
          "\t", "\x00", "\x0c", "\u2028", "\x85", "é", "\U0001F600", "%", "=", "&"]
_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\r")
body_text = st.lists(st.sampled_from(TRICKY) | st.text(_chars, max_size=8), max_size=10).map("".join)
variable_text = body_text.map(lambda text: text.replace("\n", ""))
controls = st.sampled_from("-=!#") | st.characters(
    blacklist_categories=("Cs",), blacklist_characters=" \\\n\r")
records = st.tuples(controls, body_text, st.lists(variable_text, max_size=4))

# Raw lines, the legal and the broken: what a file edited by people and tools may hold.
_line_starts = st.sampled_from([b"-", b"=", b"!", b"#", b" ", b"\\", b"", b"\r", b"?", b"\xc3\xa9",
                                b"\xff", b"\x00", b"\n"])
_line_rest = st.binary(max_size=12) | st.sampled_from([b"", b"x", b"a=1  ", b"\r", b"\xe2\x82"])
_line = st.tuples(_line_starts, _line_rest, st.sampled_from([b"\n", b"\r\n", b"\n", b""]))
soup = st.lists(_line.map(b"".join), max_size=14).map(b"".join) | st.binary(max_size=80)


def write(items) -> bytes:
    return b"".join(encode_record(c, body, variables) for c, body, variables in items)


def chunked(data, cuts):
    """`data` cut at the given positions (any order, any repeats)."""
    points = sorted({min(c, len(data)) for c in cuts})
    out = []
    last = 0
    for point in points + [len(data)]:
        out.append(data[last:point])
        last = point
    return out


def parse_chunks(chunks, offset=0, max_record=None):
    parser = Parser(offset) if max_record is None else Parser(offset, max_record)
    items = []
    for chunk in chunks:
        items += parser.feed(chunk)
    return items, parser.incomplete()


def as_tuples(records):
    return [(r.control, r.body, [v.text for v in r.variables]) for r in records]


def write_file(path, data):
    """A real file, as a writer would leave it."""
    with open(path, "wb") as f:
        f.write(data)
    return path


def apply_edits(path, edits):
    """In-place edits the way the broker makes them: pwrite at each offset."""
    fd = os.open(path, os.O_WRONLY)
    try:
        for edit in edits:
            assert os.pwrite(fd, edit.data, edit.offset) == len(edit.data)
    finally:
        os.close(fd)
