"""Interoperability with the reference implementation, the `textqueue` 1.1 package, both
ways, and the reference's bugs that shape our format (specs/textqueue.md, "The
reference package").

The reference reads a file in text mode with the locale's encoding; these tests need
that to be UTF-8, as it is on every system we run on.
"""
import locale

import pytest
import textqueue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import (
    CR, NUL, ORPHAN, UTF8, Damage, Incomplete, Parser, Problem, TextQueueError,
    encode_record, journal, rewrite, scan, variable)
from mqksbridge.protocols.textqueue.journal import Envelope
from tests.textqueue.strategies import body_text, variable_text, write, write_file

STATUS = {"queued": "-", "cleared": "=", "critical": "!", "comment": "#"}

pytestmark = pytest.mark.skipif(
    locale.getpreferredencoding(False).lower().replace("-", "") != "utf8",
    reason="the reference reads files with the locale's encoding")


def reference_read(path):
    """Every record the reference returns: (control, offset, body, variables)."""
    queue = textqueue.TextQueue()
    queue.add_input(str(path))
    out = []
    try:
        while (item := queue.get_next_in_file(0, True, True, True)) is not None:
            out.append((STATUS[item.status.name], item.control_offset, item.value,
                        list(item.get_variables())))
    finally:
        queue.close()
    return out


def our_read(data):
    """Ours, with the last record taken as whole (the reference always does)."""
    result = scan(data)
    assert not result.damages
    records = list(result.records()) + ([result.incomplete.record()] if result.incomplete else [])
    return [(r.control, r.offset, r.body, [v.text for v in r.variables]) for r in records]


reference_records = st.tuples(st.sampled_from("-=!#"), body_text, st.lists(variable_text, max_size=3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(reference_records, min_size=1, max_size=6))
def test_the_reference_reads_what_we_write(tmp_path_factory, items):
    data = write(items)
    path = write_file(tmp_path_factory.mktemp("ours") / "q.tq", data)
    assert reference_read(path) == our_read(data)
    assert [(c, body, variables) for c, _, body, variables in our_read(data)] == [
        (c, body, list(variables)) for c, body, variables in items]


def _segment():
    envs = [
        Envelope("6f1c2a9be03d4471", "order.new", (b"hello\n-world  ",), None, "c1", "mqks",
                 created_at=1_718_306_775.0),
        Envelope("b1", "img", (b"\x89PNG\r\n\x00",), {"k": "v&w"}, "w", "twino",
                 created_at=1_718_306_776.0, expires_at=1_718_306_900.0),
        Envelope("m", "multi", (b"a", b"", b"\xff"), None, "svc", "malamute", "trk", True,
                 created_at=1_718_306_777.0),
    ]
    base = 1_718_306_774_000
    return base, envs, journal.encode_header("jobs", 1, base) + b"".join(
        journal.encode_message(e, base_ms=base) for e in envs)


def test_the_reference_reads_our_journal(tmp_path):
    base, envs, data = _segment()
    path = write_file(tmp_path / "jobs.000001.tq", data)
    theirs = reference_read(path)
    assert theirs == our_read(data)
    assert theirs[0][0] == "#" and "queue=jobs" in theirs[0][3]
    assert theirs[1][2] == "hello\n-world  "                 # text bodies read as text
    assert [item[0] for item in theirs[1:]] == ["-", "-", "-"]


def test_we_read_what_the_reference_marks(tmp_path):
    base, envs, data = _segment()
    data += encode_record("-", "plain", [variable("error", "", 10), "MUTEX"])
    path = write_file(tmp_path / "jobs.tq", data)
    queue = textqueue.TextQueue()
    queue.add_input(str(path))
    first = queue.get_next()                      # queued records only
    first.mark_as_cleared()
    second = queue.get_next()
    second.mark_as_critical_error()
    retry_index = [v.split("=")[0] for v in second.get_variables()].index("r")
    second.set_variable(retry_index, "r=7")
    queue.get_next()                              # the third stays queued
    plain = queue.get_next()
    plain.set_variable(0, "error=E42")
    plain.set_variable(1, "OWNED")
    assert queue.get_next() is None
    queue.close()
    after = path.read_bytes()
    assert len(after) == len(data)
    result = scan(after)
    *records, last = list(result.records()) + [result.incomplete.record()]
    header = journal.decode_header(records[0])
    decoded = [journal.decode(r, header.created_ms) for r in records[1:]]
    assert [(d.status, d.retry) for d in decoded] == [("=", 0), ("!", 7), ("-", 0)]
    assert [d.frames for d in decoded] == [e.frames for e in envs]
    assert all(journal.verify(r) for r in records[1:])      # marks leave the checksum whole
    assert (last.control, last.variable("error").value, last.variables[1].text) == ("-", "E42", "OWNED")
    assert last.variable("error").width == 10


# -- the reference's bugs, measured, and what we do instead --------------------------------

def test_a_torn_last_line_is_a_message_to_the_reference_and_incomplete_to_us(tmp_path):
    data = b"-one\n-tor"
    assert reference_read(write_file(tmp_path / "q.tq", data)) == [("-", 0, "one", []), ("-", 5, "tor", [])]
    parser = Parser()
    assert [r.body for r in parser.feed(data)] == ["one"]
    assert parser.incomplete() == Incomplete(5, b"-tor")


def test_set_variable_counts_characters_not_bytes(tmp_path):
    data = b"-a\n\\v=xxxx\n-b\n"
    path = write_file(tmp_path / "q.tq", data)
    queue = textqueue.TextQueue()
    queue.add_input(str(path))
    queue.get_next().set_variable(0, "v=\u00e9\u00e9")       # 4 characters, 6 bytes
    queue.close()
    assert path.read_bytes() == "-a\n\\v=\u00e9\u00e9  b\n".encode()   # ate the next record
    # Ours counts bytes: the value fits the four bytes of room and nothing else moves.
    path = write_file(tmp_path / "ours.tq", data)
    record, = Parser().feed(data)
    edit = rewrite(record.variables[0], "v\u00e9")
    with open(path, "r+b") as f:
        f.seek(edit.offset)
        f.write(edit.data)
    assert reference_read(path) == [("-", 0, "a", ["v=v\u00e9 "]), ("-", 11, "b", [])]
    with pytest.raises(TextQueueError):
        rewrite(record.variables[0], "\u00e9\u00e9\u00e9")


def test_set_variable_lets_a_newline_in(tmp_path):
    path = write_file(tmp_path / "q.tq", b"-a\n\\v=xxxx\n-b\n")
    queue = textqueue.TextQueue()
    queue.add_input(str(path))
    queue.get_next().set_variable(0, "v=a\nb")
    queue.close()
    assert path.read_bytes() == b"-a\n\\v=a\nb \n-b\n"
    with pytest.raises(ValueError, match="Unexpected Control Character 'b'"):
        reference_read(path)
    record, = Parser().feed(b"-a\n\\v=xxxx\n-")
    with pytest.raises(TextQueueError):
        rewrite(record.variables[0], "a\nb")


@pytest.mark.parametrize("data, error, ours", [
    (b"\x00\x00\x00\x00\n", "Unexpected Control Character",      # zero-filled preallocation
     [("\x00", b"\x00\x00\x00")]),
    (b"-a\n?b\n", "Unexpected Control Character", [("-", b"a"), ("?", b"b")]),
    (b"-a\rb\n", "Unexpected Control Character", [("-", b"a\rb")]),   # CR: a line break to it
    (b" orphan\n-a\n", "Unexpected Control Character", [Damage(0, ORPHAN), ("-", b"a")]),
    (b"-a\n\n\\v=1\n", "Unexpected Control Character", [("-", b"a"), Damage(4, ORPHAN)]),
    (b"-a\n-\xff\n", "codec can't decode", [("-", b"a"), ("-", b"\xff")]),
])
def test_input_the_reference_raises_on_and_we_read(tmp_path, data, error, ours):
    with pytest.raises(ValueError, match=error):
        reference_read(write_file(tmp_path / "q.tq", data))
    parser = Parser()
    items = parser.feed(data)
    if parser.incomplete() is not None:
        items.append(parser.incomplete().record())
    assert [i if isinstance(i, Damage) else (i.control, i.body_bytes) for i in items] == ours


def test_what_we_report_where_the_reference_raises():
    items = Parser().feed(b"\x00\x00\n-a\rb\n?c\n-\xff\n-")
    assert [(r.control, r.body_bytes, r.problems) for r in items] == [
        ("\x00", b"\x00", (Problem(0, NUL), Problem(1, NUL))),
        ("-", b"a\rb", (Problem(5, CR),)),
        ("?", b"c", ()),
        ("-", b"\xff", (Problem(12, UTF8),)),
    ]


def test_a_nul_inside_a_body_is_fine_for_both(tmp_path):
    data = encode_record("-", "a\x00b")
    assert reference_read(write_file(tmp_path / "q.tq", data)) == [("-", 0, "a\x00b", [])]


def test_invalid_utf8_fails_the_reference_from_the_chunk_that_holds_it(tmp_path):
    # It decodes 8 KiB at a time: a small file fails before its first record,
    # a large one after returning the records before the bad chunk.
    data = b"".join(b"-message %d\n" % i for i in range(2000)) + b"-\xff\n"
    queue = textqueue.TextQueue()
    queue.add_input(str(write_file(tmp_path / "q.tq", data)))
    returned = 0
    with pytest.raises(UnicodeDecodeError):
        while queue.get_next() is not None:
            returned += 1
    queue.close()
    assert 0 < returned < 2000
    result = scan(data)
    assert len(result.offsets) == 2000 and result.incomplete.record().problems == (
        Problem(len(data) - 2, UTF8),)


def test_mark_as_critical_error_reports_cleared(tmp_path):
    path = write_file(tmp_path / "q.tq", b"-a\n-b\n")
    queue = textqueue.TextQueue()
    queue.add_input(str(path))
    item = queue.get_next()
    item.mark_as_critical_error()
    assert item.status == textqueue.MessageStatus.cleared      # the file says otherwise
    queue.close()
    assert path.read_bytes() == b"!a\n-b\n"


def test_crlf_files_read_alike(tmp_path):
    data = b"-a\r\n b\r\n\\v=1\r\n=c\r\n"
    assert reference_read(write_file(tmp_path / "q.tq", data)) == our_read(data) == [
        ("-", 0, "a\nb", ["v=1"]), ("=", 14, "c", [])]
