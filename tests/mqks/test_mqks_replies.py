"""Reply formatting, --update lines, error ids and py2 float text."""

import math
import re
from datetime import datetime, timezone

import pytest
from hypothesis import given, strategies as st

from mqksbridge.protocols.mqks.replies import (
    DELIVERY_TAIL, delivery, delivery_prefix, delivery_tail, error, error_id, ok, py2_float_repr,
    update, update_payload, when_unused_equal)


def test_mqks_ok_and_confirm():
    assert ok(b'p', b'x y') == b'p ok x y\n'
    assert ok(b'c') == b'c ok \n'
    assert ok(b'', b'') == b' ok \n'


def test_mqks_error_lines():
    eid = b'20261122033637312890uCsg'
    assert error(b'x', eid) == b'x error 20261122033637312890uCsg\n'
    assert error(None, eid) == b'None error 20261122033637312890uCsg\n'
    assert error(b'', eid) == b' error 20261122033637312890uCsg\n'


def test_mqks_error_id_shape():
    moment = datetime(2026, 11, 22, 3, 36, 37, 312890, tzinfo=timezone.utc)
    eid = error_id(moment)
    assert re.fullmatch(rb'20261122033637312890[0-9a-zA-Z]{4}', eid)
    ids = {error_id() for _ in range(50)}
    assert all(re.fullmatch(rb'\d{20}[0-9a-zA-Z]{4}', i) for i in ids)
    assert len(ids) > 1
    assert len(error(b'id', eid).split(b' ')) == 3


def test_mqks_delivery():
    assert delivery(b'c1', b'm1', b'e1', 0, b'd 1') == b'c1 ok m1 event=e1 d 1\n'
    assert delivery(b'c1', b'm1', b'e1', 3, b'd1') == b'c1 ok m1 event=e1,retry=3 d1\n'
    assert delivery(b'c', b'm', b'e', 1, b'd', b',origin=twino') == b'c ok m event=e,retry=1,origin=twino d\n'
    assert delivery(b'c', b'm', b'e', 0, b' x', b',origin=x') == b'c ok m event=e,origin=x  x\n'


def test_mqks_update_lines_of_the_spec():
    """specs/mqks.md section 7."""
    payload = update_payload(b'q1', {b'e2', b'e1'}, None)
    assert update(b'c1', payload, False) == b'c1 ok --update q1 e1 e2\n'
    payload = update_payload(b'q1', {b'e3', b'e1', b'e2'}, None)
    assert update(b'c3', payload, True) == b'c3 ok --update q1 e1 e2 e3 --manual-ack\n'
    payload = update_payload(b'q1', {b'e3', b'e1', b'e2'}, 5.0)
    assert update(b'c1', payload, False) == b'c1 ok --update q1 e1 e2 e3 --delete-queue-when-unused=5.0\n'
    assert update(b'cd', update_payload(b'q3', set(), None), True) == b'cd ok --update q3 --manual-ack\n'
    assert update(b'c', update_payload(b'q1', {b'e2', b'e3'}, 5.0), True) == (
        b'c ok --update q1 e2 e3 --delete-queue-when-unused=5.0 --manual-ack\n')
    assert update_payload(b'q', {b'e'}, True) == b'--update q e --delete-queue-when-unused'
    assert update_payload(b'q', (), 0.0) == b'--update q --delete-queue-when-unused=0.0'


def test_mqks_update_sorts_bytewise():
    events = {b'e2', b'e10', b'B', b'a', b'\xc3\xa9', b'a.b'}
    assert update_payload(b'q', events, None) == b'--update q B a a.b e10 e2 \xc3\xa9'


def test_mqks_when_unused_equality_quirk():
    assert when_unused_equal(True, 1.0) and when_unused_equal(1.0, True)
    assert when_unused_equal(None, None) and when_unused_equal(5.0, 5.0)
    assert not when_unused_equal(True, 2.0)
    assert not when_unused_equal(None, 0.0) and not when_unused_equal(0.0, None)
    assert not when_unused_equal(True, None)
    assert not when_unused_equal(math.nan, math.nan)


# Every right-hand side below was printed by CPython 2.7.18's str(float).
PY2_STR = [
    (5.0, '5.0'), (0.1, '0.1'), (1e-05, '1e-05'), (0.0, '0.0'), (1e11, '1e+11'),
    (123456789012.0, '1.23456789012e+11'), (math.inf, 'inf'), (-math.inf, '-inf'),
    (math.nan, 'nan'), (1e16, '1e+16'), (0.0001, '0.0001'), (1.5e-05, '1.5e-05'),
    (100.0, '100.0'), (12345678901.0, '12345678901.0'), (1e22, '1e+22'),
    (0.1 + 0.2, '0.3'), (-0.0, '-0.0'), (2.5, '2.5'), (1 / 3, '0.333333333333'),
    (2 / 3, '0.666666666667'), (99999999999.95, '99999999999.9'),
    (99999999999.5, '99999999999.5'), (999999999999.5, '1e+12'),
    (9.999999999995e-05, '9.99999999999e-05'), (123456.7890123456, '123456.789012'),
    (1e100, '1e+100'), (1e-100, '1e-100'), (5e-324, '4.94065645841e-324'),
    (1.7976931348623157e308, '1.79769313486e+308'), (-1.5, '-1.5'),
    (1234567890.1234567, '1234567890.12'), (0.000123456789012345, '0.000123456789012'),
    (86400.0, '86400.0'), (1e10, '10000000000.0'), (10000000000.5, '10000000000.5'),
]


@pytest.mark.parametrize('value, text', PY2_STR)
def test_mqks_py2_float_repr(value, text):
    assert py2_float_repr(value) == text.encode()


def test_mqks_py2_float_repr_accepts_ints():
    assert py2_float_repr(5) == b'5.0'
    assert py2_float_repr(123456789012) == b'1.23456789012e+11'


@given(st.binary(max_size=8), st.binary(max_size=8), st.binary(max_size=8),
       st.binary(max_size=8))
def test_delivery_is_prefix_and_tail(cid, mid, event, data):
    """The relayed tail of a publish (DELIVERY_TAIL) is a first delivery's tail."""
    tail = DELIVERY_TAIL % (mid, event, data)
    assert tail == delivery_tail(mid, event, 0, data)
    assert delivery_prefix(cid) + tail == delivery(cid, mid, event, 0, data)
