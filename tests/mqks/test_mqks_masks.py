"""Rebind masks and the fixed rebind order."""

import re
import time

import pytest
from hypothesis import given, settings, strategies as st

from mqksbridge.protocols.mqks.masks import apply_rebind, mask_match
from mqksbridge.protocols.mqks.errors import MqksProtocolError
from mqksbridge.protocols.mqks.requests import parse_rebind


def regex_match(mask, event):
    """The original's rule written as a regular expression: the oracle."""
    pattern = b'[^.]*'.join(re.escape(part) for part in mask.split(b'*'))
    return b'.' in event and re.fullmatch(pattern, event) is not None


masks = st.binary(min_size=1, max_size=8).map(
    lambda b: bytes(b'ab.*[+\\'[x % 7] for x in b))
events = st.binary(min_size=1, max_size=8).map(
    lambda b: bytes(b'ab.*[+\\'[x % 7] for x in b))


@settings(max_examples=1000)
@given(masks, events)
def test_mqks_mask_matches_regex_oracle(mask, event):
    assert mask_match(mask, event) == regex_match(mask, event)


def test_mqks_mask_spec_cases():
    """specs/mqks.md section 6.2, "Masks", and more."""
    assert not mask_match(b'e3.*', b'e3.123.c')
    assert mask_match(b'*.*', b'a.b')
    assert not mask_match(b'*.*', b'x.y.z')
    assert mask_match(b'x.y.z', b'x.y.z')
    assert not mask_match(b'x.y.z', b'x.y.zz')
    for mask in (b'*', b'w', b'C'):
        assert not mask_match(mask, mask)
        assert not mask_match(mask, b'word')
    assert mask_match(b'e2.*.u', b'e2.abc.u')
    assert not mask_match(b'e2.*.u', b'e2.abc.c')
    assert mask_match(b'*.updated', b'user.updated')
    assert mask_match(b'document.*', b'document.created')
    assert mask_match(b'user.*.connected', b'user.57e82b.connected')
    assert mask_match(b'*.*.deleted', b'category.subcategory.deleted')
    assert mask_match(b'a*b*c.x', b'aXbYbc.x')
    assert not mask_match(b'a*b*c.x', b'acb.x')
    assert mask_match(b'e.*', b'e.')
    assert not mask_match(b'*ab*ab*.x', b'ab.x')   # the two pieces may not overlap
    assert mask_match(b'*ab*ab*.x', b'abab.x')
    assert not mask_match(b'a*aa.x', b'aa.x')


def test_mqks_rebind_spec_cases():
    """specs/mqks.md section 6.2: the fixed order of the lists."""
    assert apply_rebind({b'a'}, add=[b'e5'], remove=[b'a', b'e5']) == {b'e5'}
    start = {b'e1', b'e2', b'u.42.e1', b'u.43.e1'}
    assert apply_rebind(start, remove=[b'e2'], add=[b'e3', b'e4'],
                        remove_masks=[b'u.*.e1']) == {b'e1', b'e3', b'e4'}
    assert start == {b'e1', b'e2', b'u.42.e1', b'u.43.e1'}  # untouched
    assert apply_rebind({b'e1'}, replace=[b'e2']) == {b'e2'}
    assert apply_rebind({b'e1'}, replace=[]) == {b'e1'}
    s19 = {b'e1', b'e2.abc.c', b'e2.abc.u', b'e2.efg.c', b'e2.efg.u', b'e3.123.c', b'e3.123.u'}
    assert apply_rebind(s19, remove_masks=[b'e2.*.u', b'e2.*.c']) == {
        b'e1', b'e3.123.c', b'e3.123.u'}


names = st.sampled_from([b'e1', b'e2', b'a.b', b'a.c', b'x.y.z', b'q'])
lists = st.lists(names, max_size=4)
mask_lists = st.lists(st.sampled_from([b'a.*', b'*.*', b'x.*.z', b'e1', b'*']), max_size=3)


def fixed_order(current, replace, remove, remove_masks, add):
    """Oracle: the documented order, spelled out step by step."""
    result = set(replace) if replace else set(current)
    result -= set(remove)
    result = {e for e in result if not any(regex_match(m, e) for m in remove_masks)}
    return result | set(add)


def segments(flag, tokens, draw):
    """Cut one argument list into flagged segments (repeated flags append)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(tokens)), max_size=2)))
    edges = [0] + cuts + [len(tokens)]
    return [[flag] + tokens[a:b] for a, b in zip(edges, edges[1:])]


@given(st.sets(names), lists, lists, mask_lists, lists, st.booleans(), st.data())
def test_mqks_rebind_order_independent_of_line_order(current, replace, remove, remove_masks,
                                                      add, bare_replace, data):
    parts = (segments(b'--remove', remove, data.draw) + segments(b'--remove-mask', remove_masks, data.draw)
             + segments(b'--add', add, data.draw))
    head = []
    if bare_replace:
        head = replace
    else:
        parts += segments(b'--replace', replace, data.draw)
    parts = data.draw(st.permutations(parts))
    line = b' '.join([b'q1'] + head + [t for part in parts for t in part])
    queue, *args = parse_rebind(line)  # every list gives at least its flag, so never bare
    assert queue == b'q1'
    assert [sorted(a) for a in args] == [sorted(replace), sorted(remove), sorted(remove_masks), sorted(add)]
    assert apply_rebind(current, *args) == fixed_order(current, replace, remove, remove_masks, add)


EVENT_PARTS = st.sampled_from([b'a', b'b', b'ab', b'', b'user', b'x'])
MASK_PARTS = st.sampled_from([b'a', b'*', b'a*', b'*b', b'user', b'', b'x*x'])


@given(st.sets(st.lists(EVENT_PARTS, min_size=1, max_size=3).map(b'.'.join), max_size=12),
       st.lists(st.lists(MASK_PARTS, min_size=1, max_size=3).map(b'.'.join), max_size=6))
def test_mqks_indexed_masks_equal_one_mask_at_a_time(events, masks):
    """The mask index removes exactly what trying every mask on every event does."""
    assert apply_rebind(events, remove_masks=masks) == {
        e for e in events if not any(regex_match(m, e) for m in masks)}


def test_mqks_masks_times_events_are_bounded():
    """2,000 masks against 20,000 events took 38 s; literal first segments are now an index
    lookup, and leading-* masks past MAX_MASK_TESTS tries are refused before any change."""
    events = {b'ev.%d.x' % i for i in range(20_000)}
    started = time.thread_time()
    assert apply_rebind(events, remove_masks=[b'm%d.*.y' % i for i in range(2000)]) == events
    assert time.thread_time() - started < 2.0
    with pytest.raises(MqksProtocolError):
        apply_rebind(events, remove_masks=[b'*m%d.*.x' % i for i in range(2000)])
