"""The writer and the in-place edits, on real files."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import (
    Edit, Parser, Record, TextQueueError, edit_key, encode_record, flip, flip_queued,
    merge_edits, rewrite, scan, variable)
from mqksbridge.protocols.textqueue.records import Reason
from tests.textqueue.strategies import (apply_edits, body_text, records, variable_text, write,
                                        write_file)


def test_a_record_as_the_format_describes_it():
    assert encode_record("-", "  padded  ") == b"-  padded  \n"
    assert encode_record("-", "one\n-two\n\\three\n") == b"-one\n -two\n \\three\n \n"
    assert encode_record("#", "note", ["i=1", variable("retry", "0", 3), "MUTEX"]) == (
        b"#note\n\\i=1\n\\retry=0  \n\\MUTEX\n")
    assert encode_record("=", "caf\u00e9 \U0001F600".encode()) == "=caf\u00e9 \U0001F600\n".encode()
    assert encode_record("?", "") == b"?\n"


@pytest.mark.parametrize("call", [
    lambda: encode_record("-", "a\rb"),
    lambda: encode_record("-", b"a\r\nb"),
    lambda: encode_record("-", b"\xff"),
    lambda: encode_record("-", "\udcff"),
    lambda: encode_record(" ", "x"),
    lambda: encode_record("\\", "x"),
    lambda: encode_record("--", "x"),
    lambda: encode_record("-", "x", ["two\nlines"]),
    lambda: encode_record("-", "x", ["cr\r"]),
    lambda: variable("", "x"),
    lambda: variable("a=b", "x"),
    lambda: variable("a", "ends with space "),
])
def test_what_the_writer_refuses(call):
    with pytest.raises(TextQueueError):
        call()


def test_flip_and_rewrite_in_a_real_file(tmp_path):
    data = (encode_record("-", "first", [variable("error", "", 12), "MUTEX"])
            + encode_record("-", "second", [variable("n", "1")]))
    path = write_file(tmp_path / "q.tq", data)
    parser = Parser()
    first, = parser.feed(data)
    second = parser.incomplete().record()
    error, mutex = first.variables
    apply_edits(path, [flip(first, "!"), rewrite(error, "E42 \u00e9t\u00e9"), rewrite(mutex, "ab"),
                       flip(second.offset, "="), rewrite(second.variable("n"), "9")])
    after = path.read_bytes()
    assert len(after) == len(data)
    result = scan(after)
    first, second = list(result.records()) + [result.incomplete.record()]
    assert (first.control, first.body) == ("!", "first")
    assert first.variable("error").value == "E42 \u00e9t\u00e9"
    assert first.variable("error").width == 12                  # the room is still there
    assert first.variables[1].text == "ab   "            # MUTEX had five bytes
    assert (second.control, second.variable("n").value) == ("=", "9")


def test_rewrite_counts_bytes_and_refuses_what_does_not_fit():
    record, = Parser().feed(encode_record("-", "x", [variable("v", "", 4)]) + b"-")
    var = record.variables[0]
    assert rewrite(var, "\u00e9\u00e9") == Edit(var.value_offset, "\u00e9\u00e9".encode())  # 4 bytes
    for value in ("\u00e9\u00e9\u00e9", "12345", "a\nb", "a\r", "trailing "):
        with pytest.raises(TextQueueError):
            rewrite(var, value)
    with pytest.raises(TextQueueError):
        flip(record, "\u00e9")                          # two bytes would shift the file
    multibyte, = Parser().feed("\u00e9x\n-".encode())
    with pytest.raises(TextQueueError):
        flip(multibyte, "=")


def test_each_refusal_says_which_rule():
    """specs/errors.md: the one error type, its `code` a Reason."""
    record, = Parser().feed(encode_record("-", "x", [variable("v", "", 4)]) + b"-")
    for call, code in [(lambda: Parser(max_record=1), Reason.ARGUMENT),
                       (lambda: variable("a", "ends with space "), Reason.VALUE),
                       (lambda: rewrite(record.variables[0], "12345"), Reason.FIT),
                       (lambda: flip(record, "\u00e9"), Reason.ARGUMENT)]:
        with pytest.raises(TextQueueError) as info:
            call()
        assert info.value.code is code and info.value.reason


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(variable_text.filter(lambda t: "=" not in t and t),
                          variable_text.map(lambda t: t.rstrip(" ")),
                          st.integers(0, 40)), min_size=1, max_size=4),
       st.data())
def test_any_value_that_fits_reads_back_and_moves_no_other_byte(tmp_path_factory, specs, data):
    texts = [variable(name, value, width) for name, value, width in specs]
    original = encode_record("-", "body", texts) + encode_record("=", "next")
    path = write_file(tmp_path_factory.mktemp("rw") / "q.tq", original)
    record = next(scan(original).records())
    index = data.draw(st.integers(0, len(texts) - 1))
    var = record.variables[index]
    new = data.draw(variable_text.map(lambda t: t.rstrip(" ")).filter(
        lambda t: len(t.encode()) <= var.width))
    edit = rewrite(var, new)
    apply_edits(path, [edit])
    after = path.read_bytes()
    assert after[:edit.offset] == original[:edit.offset]
    assert after[edit.offset + len(edit.data):] == original[edit.offset + len(edit.data):]
    reread = next(scan(after).records())
    assert reread.variables[index].value == new
    assert [v.text for i, v in enumerate(reread.variables) if i != index] == [
        t for i, t in enumerate(texts) if i != index]


def _apply(data, base, edits):
    out = bytearray(data)
    for offset, chunk in edits:
        out[offset - base:offset - base + len(chunk)] = chunk
    return bytes(out)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=300), st.integers(0, 10**6), st.integers(0, 64),
       st.data())
def test_merged_edits_write_what_the_edits_write(data, base, max_gap, draw):
    """merge_edits is the fast path of writing each edit: held equal on any edits."""
    cuts = sorted(draw.draw(st.sets(st.integers(0, len(data)), max_size=20)))
    edits = [Edit(base + start, draw.draw(st.binary(min_size=1, max_size=stop - start)))
             for start, stop in zip(cuts[::2], cuts[1::2]) if stop > start]
    merged = merge_edits(draw.draw(st.permutations(edits)), data, base, max_gap)
    assert _apply(data, base, merged) == _apply(data, base, edits)
    assert len(merged) <= len(edits)
    for first, second in zip(merged, merged[1:]):
        assert second.offset - (first.offset + len(first.data)) > max_gap


def test_merged_edits_on_a_real_file(tmp_path):
    data = b"".join(encode_record("-", f"record {i}") for i in range(100))
    path = write_file(tmp_path / "q.tq", data)
    records = list(scan(data).records())
    edits = [flip(r, "=") for r in records[10:60]] + [flip(records[90], "!")]
    merged = merge_edits(edits, data, 0, max_gap=100)
    assert [e.offset for e in merged] == [records[10].offset, records[90].offset]
    apply_edits(path, merged)
    assert path.read_bytes() == _apply(data, 0, edits)
    assert merge_edits([], data, 0) == []


@pytest.mark.parametrize("edits", [
    [Edit(5, b"abc"), Edit(6, b"x")],
    [Edit(-1, b"a")],
    [Edit(9, b"ab")],
])
def test_merge_edits_refuses_overlaps_and_edits_outside_the_bytes(edits):
    with pytest.raises(TextQueueError):
        merge_edits(edits, b"0123456789", 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(records, min_size=1, max_size=8), st.integers(0, 10**6), st.data())
def test_flip_queued_is_merged_flips_of_every_queued_record(items, base, draw):
    """The fast path of flipping a run of queued records, held equal to merge_edits of a
    flip per record, on any records between any two record starts."""
    data = write(items)
    found = scan(data, base)
    starts = list(found.offsets) + ([found.incomplete.offset] if found.incomplete else [])
    first = draw.draw(st.sampled_from(starts))
    last = draw.draw(st.sampled_from([o for o in starts if o >= first]))
    edits = [Edit(o, b"=") for o in starts if first <= o <= last and data[o - base] == 0x2D]
    fast = flip_queued(data, base, first, last)
    assert _apply(data, base, [fast]) == _apply(data, base, edits)
    if edits:
        assert _apply(data, base, merge_edits(edits, data, base, max_gap=len(data))) == \
            _apply(data, base, [fast])


def test_flip_queued_refuses_what_it_cannot_do():
    with pytest.raises(TextQueueError):
        flip_queued(b"-a\n", 0, 0, 5)
    with pytest.raises(TextQueueError):
        flip_queued(b"-a\n", 0, 0, 0, "\u00e9")


def _applied(raw, edits):
    for offset, data in edits:
        raw = raw[:offset] + data + raw[offset + len(data):]
    return raw


ROOM = 24


@settings(max_examples=300)
@given(body_text, st.lists(variable_text.filter(lambda t: "=" in t and not t.startswith(
    ("error=", "i=", "id="))).map(lambda t: t.rstrip(" ")), max_size=2),
       st.sampled_from(["i", "id", None]), st.sampled_from("=!#"), variable_text, st.data())
def test_edit_key_is_what_the_edits_leave_alone(body, others, id_name, control, reason, data):
    """A worker's flip and reason, and an id the door writes into room, change no key;
    another body or another variable does."""
    variables = [variable("error", "", ROOM)] + others
    if id_name is not None:
        variables.append(variable(id_name, "", ROOM))
    raw = encode_record("-", body, variables)[:-1]
    record = Record(0, raw)
    reason = reason.encode()[:ROOM].decode("utf-8", "ignore").rstrip(" ")
    edits = [flip(record, control), rewrite(record.variable("error"), reason)]
    if id_name is not None:
        edits.append(rewrite(record.variable(id_name), "tq-" + data.draw(st.text(
            "0123456789abcdef-", max_size=ROOM - 3))))
    key = edit_key(raw, b"tq-")
    assert edit_key(_applied(raw, edits), b"tq-") == key
    assert edit_key(encode_record("-", body + "x", variables)[:-1], b"tq-") != key
    assert edit_key(encode_record("-", body, variables + ["x=1"])[:-1], b"tq-") != key
