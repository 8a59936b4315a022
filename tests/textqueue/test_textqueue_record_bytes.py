"""The record byte operations the door's hot paths use instead of a parse, held equal to
the parse (Record's control, body and variables) on written records and on any bytes."""
from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import Record, one_line_body, scan, unpadded
from tests.textqueue.strategies import records, soup, write

_room = st.sampled_from(["", " ", "   "])
padded = st.tuples(records, st.lists(_room, min_size=4, max_size=4)).map(
    lambda item: (item[0][0], item[0][1], [v + room for v, room in zip(item[0][2], item[1])]))
files = soup | st.lists(padded, max_size=5).map(write)


def _records(data):
    """The records a reader hands the door (the last one too, taken as whole)."""
    found = scan(data, 0)
    return list(found.records()) + ([found.incomplete.record()] if found.incomplete else [])


@settings(max_examples=500, deadline=None)
@given(files)
def test_one_line_body_is_the_parsed_body_of_a_record_without_variables(data):
    for record in _records(data):
        if record.raw[0] >= 0x80:                 # a UTF-8 control: not the inbox's '-'
            continue
        body = one_line_body(record.raw)
        if body is not None:
            assert (body, record.variables) == (record.body_bytes, ())
        else:
            assert b"\n" in record.raw or record.raw.endswith(b"\r")


@settings(max_examples=500, deadline=None)
@given(files)
def test_unpadded_keeps_control_body_and_values_and_drops_the_room(data):
    for record in _records(data):
        raw = unpadded(record.raw)
        again = Record(record.offset, raw, record.end - len(record.raw) + len(raw))
        assert again.control == record.control and again.body_bytes == record.body_bytes
        assert ([(v.name, v.value) for v in again.variables]
                == [(v.name, v.value) for v in record.variables])
        if b"\r" not in record.raw:               # a CRLF line keeps what is before its CR
            assert [v.text for v in again.variables] == [
                v.text.rstrip(" ") for v in record.variables]
        if b" \n" not in record.raw and not record.raw.endswith(b" "):
            assert raw is record.raw
