"""The writer and the in-place edits, on real files."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import (
    Edit, Parser, TextQueueError, encode_record, flip, rewrite, scan, variable)
from tests.textqueue.strategies import apply_edits, variable_text, write_file


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
