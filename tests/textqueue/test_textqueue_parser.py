"""The readers' decisions, one example each (specs/textqueue.md, "Reading")."""
import pytest

from mqksbridge.protocols.textqueue import (
    CR, NUL, ORDER, ORPHAN, TOO_LONG, UTF8, Damage, Incomplete, Parser, Problem, Record,
    TextQueueError, Variable, scan)
from tests.textqueue.strategies import parse_chunks


def read(data, **kwargs):
    """Both readers, which must agree; the parser fed one byte at a time."""
    items, incomplete = parse_chunks([data[i:i + 1] for i in range(len(data))], **kwargs)
    result = scan(data, **kwargs)
    assert (result.items(), result.incomplete) == (items, incomplete)
    return items, incomplete


def test_records_bodies_variables_and_offsets():
    data = b"-first\n line two\n\\i=7  \n\\flag\n=done\n# note\n\\v=1\n!failed\n-last\n"
    items, incomplete = read(data)
    assert [(r.offset, r.control, r.body) for r in items] == [
        (0, "-", "first\nline two"), (30, "=", "done"), (36, "#", " note"), (48, "!", "failed")]
    first = items[0]
    assert first.variables == (Variable(17, "i=7  "), Variable(24, "flag"))
    assert [(v.name, v.value, v.width, v.value_offset) for v in first.variables] == [
        ("i", "7", 3, 20), (None, None, 4, 25)]
    assert first.variable("i").value == "7" and first.variable("nope") is None
    assert items[2].variables == (Variable(43, "v=1"),)       # comments have variables too
    assert incomplete == Incomplete(56, b"-last\n")


def test_a_record_is_handed_out_when_the_next_line_begins():
    parser = Parser()
    assert parser.feed(b"-a\n") == []
    assert parser.feed(b" b\n\\v\n") == []              # still growing
    assert parser.incomplete() == Incomplete(0, b"-a\n b\n\\v\n")
    assert parser.feed(b"-") == [Record(0, b"-a\n b\n\\v")]
    assert parser.incomplete() == Incomplete(9, b"-")
    assert parser.offset == 10


def test_blank_lines_end_a_record_and_are_ignored():
    items, incomplete = read(b"\n\n-a\n\n\n=b\n\n")
    assert items == [Record(2, b"-a"), Record(7, b"=b")]
    assert incomplete is None                          # the blank line ended `=b`


def test_lines_with_no_record_before_them_are_damage():
    items, incomplete = read(b" cont\n\\var\n-a\n\n more\n\\x\n=b\n")
    assert items == [Damage(0, ORPHAN), Record(11, b"-a"), Damage(15, ORPHAN)]
    assert incomplete == Incomplete(24, b"=b\n")


def test_unknown_control_characters_are_records():
    items, incomplete = read("?maybe\n\\v=1\nébody\n\t\n-x\n".encode())
    assert [(r.control, r.body) for r in items] == [("?", "maybe"), ("é", "body"), ("\t", "")]
    assert items[0].variables[0].text == "v=1"


def test_crlf_line_ends():
    data = b"-a\r\n b\r\n\\v=1  \r\n\r\n=c\r\n"
    items, incomplete = read(data)
    assert [(r.body, [v.text for v in r.variables], r.problems) for r in items] == [
        ("a\nb", ["v=1  "], ())]
    assert items[0].variables[0].width == 3             # the CR is no room
    assert incomplete == Incomplete(18, b"=c\r\n")
    assert incomplete.record().body == "c"


def test_nul_invalid_utf8_and_bare_cr_are_reported_not_fatal():
    data = b"-a\x00b\n -\xff\xfe ok \xc3\n\\v=\rx\n-next\n"
    items, _ = read(data)
    record = items[0]
    assert record.body_bytes == b"a\x00b\n-\xff\xfe ok \xc3"
    assert record.body.encode("utf-8", "surrogateescape") == record.body_bytes
    assert record.problems == (Problem(2, NUL), Problem(7, UTF8), Problem(13, UTF8), Problem(18, CR))
    assert record.variables[0].text == "v=\rx"


def test_a_continuation_after_a_variable_stays_in_the_body():
    items, _ = read(b"-a\n\\v=1\n b\n-c\n")
    assert items[0].body == "a\nb" and items[0].variables[0].text == "v=1"
    assert items[0].problems == (Problem(8, ORDER),)


def test_an_over_long_record_is_skipped_up_to_the_next_record():
    data = b"-ok\n-" + b"x" * 40 + b"\n more\n\\v=1\n=fine\n\n \\orphan\n-z\n"
    items, incomplete = read(data, max_record=20)
    assert items == [Record(0, b"-ok"), Damage(4, TOO_LONG), Record(57, b"=fine"), Damage(64, ORPHAN)]
    assert incomplete == Incomplete(73, b"-z\n")
    # Exactly at the limit is fine: the size counts the record's newline.
    assert read(b"-" + b"x" * 18 + b"\n-", max_record=20)[0] == [Record(0, b"-" + b"x" * 18)]
    assert read(b"-" + b"x" * 19 + b"\n-", max_record=20)[0] == [Damage(0, TOO_LONG)]
    with pytest.raises(TextQueueError):
        Parser(max_record=1)


def test_the_torn_last_record_is_incomplete_never_a_record():
    items, incomplete = read(b"-one\n-tw")
    assert items == [Record(0, b"-one")]
    assert incomplete == Incomplete(5, b"-tw") and not incomplete.terminated
    torn = incomplete.record()
    assert torn.body == "tw" and torn.end == 8
    assert read(b"")[1] is None and read(b"\n")[1] is None
    assert read(b"-x\r")[1].record().problems == (Problem(2, CR),)   # no LF yet: the CR is text


def test_offsets_count_from_the_given_base():
    items, incomplete = parse_chunks([b"=a\n-b"], offset=1000)
    assert items == [Record(1000, b"=a")] and incomplete.offset == 1003
    assert scan(b"=a\n-b", 1000).offsets == [1000]
