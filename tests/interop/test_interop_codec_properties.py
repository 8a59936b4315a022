"""Codec-level properties over bridge/convert, for every door and ordered pair:
A -> core -> A is identity, A -> core -> B shows exactly what the table promises, and
A -> core -> B -> core -> A keeps exactly what docs/mapping.md says survives."""
import itertools

import pytest
from hypothesis import given, settings, strategies as st

from mqksbridge.bridge.convert import Unrepresentable, refusal

from mqksbridge.protocols.malamute import codec as mlm
from tests.interop.codecs import CODECS, Published, core_subject, promised, shown_headers

DOORS = sorted(CODECS)
PAIRS = list(itertools.permutations(DOORS, 2))

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
header_keys = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="-_."),
                      min_size=1, max_size=12).filter(
    lambda k: k.lower() not in ("subject", "x-origin", "frame-lengths"))
headers = st.dictionaries(header_keys, text.filter(lambda v: "\r\n" not in v), max_size=4).map(
    lambda d: tuple({k.lower(): (k, v) for k, v in d.items()}.values()))
ids = st.text(st.characters(whitelist_categories=("L", "N")), min_size=1, max_size=20)
# What an MQKS publish can carry: an event without blanks (and not an option: no leading
# `-`), one non-empty line of any bytes but LF and TAB, not ending in whitespace.
mqks_subjects = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
                        min_size=1, max_size=40).filter(lambda s: not s.startswith("-"))
mqks_bodies = st.binary(min_size=1, max_size=64).map(
    lambda b: b.replace(b"\n", b"n").replace(b"\t", b"t").rstrip(b" \r\x0b\x0c") or b"x")
any_subjects = text.filter(lambda s: "\r\n" not in s)
any_frames = st.lists(st.binary(max_size=64), max_size=4).map(tuple)


def published(*doors):
    """A publish that every door in `doors` can send; headers only when Twino sends first.
    Malamute strings are C strings: no NUL."""
    mqks = "mqks" in doors
    subjects = mqks_subjects if mqks else any_subjects
    if "malamute" in doors:
        subjects = subjects.filter(lambda s: "\x00" not in s)
    return st.builds(
        Published, subjects,
        mqks_bodies.map(lambda b: (b,)) if mqks else any_frames,
        headers if doors[0] == "twino" else st.just(()), ids, ids)


def crossing(src, dst, p):
    message = CODECS[src].to_core(p)
    return CODECS[dst].view(CODECS[dst].deliver(message))


ORIGINAL = {   # what the original server sends its consumer for a publish of its own door
    "mqks": lambda p: b"c1 ok %s event=%s %s\n" % (
        p.id.encode(), p.subject.encode("utf-8", "surrogateescape"), p.frames[0]),
    "malamute": lambda p: mlm.encode_service_deliver(p.sender, "ch/1", p.subject, "trk",
                                                    p.frames),
}


@settings(max_examples=150, deadline=None)
@given(door=st.sampled_from(DOORS), data=st.data())
def test_same_door_is_identity(door, data):
    """Byte for byte what the original server sends (MQKS, Malamute); Twino, whose relay
    re-flags the frame, shows the consumer every field as pushed."""
    p = data.draw(published(door))
    if door in ORIGINAL:
        assert CODECS[door].deliver(CODECS[door].to_core(p)) == ORIGINAL[door](p)
        return
    view = crossing(door, door, p)
    assert (view.subject, view.frames, view.sender, view.id) == (
        p.subject, p.frames, p.sender, p.id)
    assert view.headers == shown_headers(door, door, p)


@settings(max_examples=300, deadline=None)
@given(pair=st.sampled_from(PAIRS), data=st.data())
def test_one_crossing_shows_what_the_table_promises(pair, data):
    src, dst = pair
    p = data.draw(published(src))
    message = CODECS[src].to_core(p)
    if refusal(dst, message):                      # e.g. a NUL for Malamute: never cut
        with pytest.raises(Unrepresentable):
            CODECS[dst].deliver(message)
        return
    view = CODECS[dst].view(CODECS[dst].deliver(message))
    assert (view.subject, view.frames, view.sender) == (core_subject(src, p), p.frames, p.sender)
    if CODECS[dst].shows_origin:
        assert (view.origin, view.id) == (src, p.id)
    assert view.headers == shown_headers(src, dst, p)


@settings(max_examples=300, deadline=None)
@given(pair=st.sampled_from(PAIRS), data=st.data())
def test_there_and_back_keeps_exactly_what_the_table_promises(pair, data):
    src, via = pair
    p = data.draw(published(src, via))
    seen = crossing(src, via, p)
    back = CODECS[via].republish(seen, "bob", "m2")
    assert CODECS[via].can_publish(back)
    view = crossing(via, src, back)
    assert (view.subject, view.frames, view.headers) == promised(src, via, p, back)
    assert view.sender == "bob"
    if CODECS[src].shows_origin:
        assert (view.origin, view.id) == (via, "m2")
