"""The bulk column decoder (protocols/textqueue/columns.py) is held equal to the record-at-a-time
journal decoder: same values for journal records, hand edits, foreign records and garbage, and
the same error (TextQueueError) where a value does not decode."""
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import TextQueueError, journal, scan
from mqksbridge.protocols.textqueue.columns import FIELDS, decode_columns
from tests.textqueue.strategies import records, soup, write
from tests.textqueue.test_textqueue_journal import BASE, envelopes, segment


def _expected(raw, name, base):
    """One field of one record the simple way (decode_fields)."""
    def field(name):
        return journal.decode_fields(raw, [name], base)[0]

    if name in journal.FIELDS:
        return field(name)
    variables = journal._parts(journal._raw(raw))[1]
    if name == "created_ms":
        created = journal._created_ms(variables, base)
        assert created / 1000 == field("created_at")
        return created
    if name == "expires_ms":            # reads \t only when there is a \ttl, as the decoder
        expires = field("expires_at")
        if expires is None:
            return None
        return journal._created_ms(variables, base) + int(variables[b"ttl"])
    if name in ("settle_reason", "settled_ms", "settle_door"):
        settled = field("settled")
        if settled is None:
            return None
        return {"settle_reason": settled.reason, "settle_door": settled.door,
                "settled_ms": round(settled.at * 1000)}[name]
    if name == "frame_count":
        return len(field("frames"))
    if name == "size":
        return sum(map(len, field("frames")))
    raise AssertionError(name)


def _check(raws, base):
    for name in FIELDS:
        try:
            want = [_expected(raw, name, base) for raw in raws]
        except TextQueueError:
            with pytest.raises(TextQueueError):
                decode_columns(raws, [name], base)
            continue
        assert decode_columns(raws, [name], base)[name] == want, name


def _raws(data):
    result = scan(data)
    tail = [result.incomplete.record().raw] if result.incomplete else []
    return result.raws + tail


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), max_size=6), st.integers(0, BASE * 2))
def test_columns_equal_the_record_decoder_on_journal_records(envs, base):
    raws = _raws(segment(envs, base))[1:]
    assert len(raws) == len(envs)
    _check(raws, base)
    everything = decode_columns(raws, FIELDS, base)
    assert list(everything) == list(FIELDS)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), min_size=1, max_size=4), st.data())
def test_columns_equal_the_record_decoder_on_hand_edited_records(envs, data):
    text = segment(envs)
    edit = data.draw(st.sampled_from(["crlf", "trim", "vouch", "note", "continuation"]))
    if edit == "crlf":
        text = text.replace(b"\n", b"\r\n")
    elif edit == "trim":
        text = b"\n".join(line.rstrip(b" ") for line in text.split(b"\n"))
    elif edit == "vouch":
        text = text.replace(b"\\c=", b"\\c=-     \n\\old=")
    elif edit == "note":
        text = text.replace(b"\\c=", b"\\note=checked by hand\n\\c=")
    else:
        text = text.replace(b"\n\\t=", b"\n\\t=", 1).replace(b"\n\\r=", b"\n more body\n\\r=", 1)
    _check(_raws(text)[1:], BASE)


@settings(max_examples=300, deadline=None)
@given(st.lists(records, max_size=5))
def test_columns_equal_the_record_decoder_on_plain_textqueue_records(items):
    _check(_raws(write(items)), 0)


@settings(max_examples=500, deadline=None)
@given(soup)
@example(b"-\n\\e= \x00\n")      # a stamp after a space: blank to neither path
@example(b"-\n\\enc=\n")          # an empty encoding is bad to both paths, not "none"
@example(b"-\n\\t=\n")            # an empty time fails only the columns that read it
@example(b"-\n\\ttl=5\n\\t=1\n-\n\\t=\n")   # ... and expiry only for records with a ttl
@example(b"-\n\\ttl=\n")          # an empty ttl is bad to both paths, not "no expiry"
def test_columns_on_garbage_raise_only_the_codec_error(data):
    _check(_raws(data), 0)


def test_an_unknown_column_is_refused():
    with pytest.raises(TextQueueError):
        decode_columns([b"-x"], ["colour"])
