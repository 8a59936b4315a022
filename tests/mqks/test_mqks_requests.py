"""Request lines and per-action arguments, as specs/mqks.md (sections 2 and 4 to 6) describes them."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from mqksbridge.protocols.mqks.errors import MqksProtocolError, Reason
from mqksbridge.protocols.mqks.requests import (
    fast_request, parse_ack, parse_consume, parse_eval, parse_publish, parse_rebind,
    parse_request, plain_run)


@pytest.mark.parametrize('line, expected', [
    (b'p ping x y', (b'p', b'ping', b'x y', False)),
    (b'p ping x   ', (b'p', b'ping', b'x', False)),
    (b'p ping x\r', (b'p', b'ping', b'x', False)),
    (b'p ping x \x0b\x0c\r ', (b'p', b'ping', b'x', False)),
    (b'p ping x\x1c', (b'p', b'ping', b'x\x1c', False)),      # str.rstrip would eat these
    (b'p ping x\x85\xa0', (b'p', b'ping', b'x\x85\xa0', False)),
    (b' p1 ping x', (b'', b'p1', b'ping x', False)),
    (b'p2  ping x', (b'p2', b'', b'ping x', False)),
    (b'x PING a', (b'x', b'PING', b'a', False)),
    (b'CONSUME ping upper', (b'CONSUME', b'ping', b'upper', False)),
    (b'p6 ping --confirm', (b'p6', b'ping', b'--confirm', False)),
    (b'm publish --confirm e d', (b'm', b'publish', b'e d', True)),
    (b'm publish --confirm  e', (b'm', b'publish', b' e', True)),
    (b'm publish e --confirm x', (b'm', b'publish', b'e --confirm x', False)),
    (b'm publish --confirmx e', (b'm', b'publish', b'--confirmx e', False)),
])
def test_mqks_parse_request_table(line, expected):
    assert parse_request(line) == expected


@pytest.mark.parametrize('line', [b'', b'p2 ping', b'c0 consume', b'   ', b'a b ', b'a\tb'])
def test_mqks_short_line_answers_none(line):
    with pytest.raises(MqksProtocolError) as info:
        parse_request(line)
    assert info.value.req_id is None and info.value.code is Reason.REQUEST


@pytest.mark.parametrize('line', [b'p1 ping a\tb', b'p1 ping x\t', b'p1 pi\tng x'])
def test_mqks_tab_is_an_error_with_the_id(line):
    with pytest.raises(MqksProtocolError) as info:
        parse_request(line)
    assert info.value.req_id == b'p1'


@given(st.binary(max_size=40))
def test_mqks_parse_request_total_and_lossless(line):
    try:
        req_id, action, data, confirm = parse_request(line)
    except MqksProtocolError as exc:
        assert exc.code is Reason.REQUEST
        assert exc.req_id is None or isinstance(exc.req_id, bytes)
        return
    assert b'\t' not in line
    rebuilt = req_id + b' ' + action + b' ' + (b'--confirm ' if confirm else b'') + data
    assert rebuilt == line.rstrip()


@given(st.binary(max_size=40))
def test_mqks_argument_parsers_raise_only_their_error(data):
    for parse in (parse_publish, parse_consume, parse_rebind, parse_ack, parse_eval):
        try:
            parse(data)
        except MqksProtocolError as exc:
            assert exc.code is Reason.ARGUMENT


def test_mqks_publish():
    assert parse_publish(b'e d1 d2') == (b'e', b'd1 d2')
    assert parse_publish(b'e  x') == (b'e', b' x')
    assert parse_publish(b' x') == (b'', b'x')
    with pytest.raises(MqksProtocolError):
        parse_publish(b'e')


def test_mqks_consume_shapes():
    assert parse_consume(b'q1') == (b'q1', [], [], None, False)
    assert parse_consume(b'q1 e1 e2 --delete-queue-when-unused=5 --manual-ack') == (
        b'q1', [b'e1', b'e2'], [], 5.0, True)
    assert parse_consume(b'q1 --manual-ack e1  e2 --add e3 --add e4 --delete-queue-when-unused') == (
        b'q1', [b'e1', b'e2'], [b'e3', b'e4'], True, True)
    assert parse_consume(b'q1 --add e3 e4') == (b'q1', [], [b'e3', b'e4'], None, False)
    last = parse_consume(b'q --delete-queue-when-unused=1 --delete-queue-when-unused')
    assert last[3] is True


@pytest.mark.parametrize('text, value', [
    (b'5', 5.0), (b'0.1', 0.1), (b'1e-05', 1e-05), (b'0', 0.0), (b'inf', math.inf),
    (b'1E3', 1000.0), (b'Infinity', math.inf), (b'1e400', math.inf), (b'1e12', 1e12),
])
def test_mqks_consume_seconds_are_python_floats(text, value):
    assert parse_consume(b'q e --delete-queue-when-unused=' + text)[3] == value


@pytest.mark.parametrize('data', [
    b'q e --delete-queue-when-unused=abc', b'q e --delete-queue-when-unused=',
    b'q e --delete-queue-when-unused=1_0', b'q e --foo', b'q e --', b'q --confirm',
    b'q e --manual-ack=1',
    # no timer takes these (a nan one raised inside a connection's teardown)
    b'q --delete-queue-when-unused=nan', b'q --delete-queue-when-unused=-1',
    b'q --delete-queue-when-unused=-inf', b'q --delete-queue-when-unused=-0.5',
    b'q --delete-queue-when-unused=1.1e12',
])
def test_mqks_consume_errors(data):
    with pytest.raises(MqksProtocolError):
        parse_consume(data)


def test_mqks_rebind():
    assert parse_rebind(b'q1 e1 --remove e2 --remove-mask u.*.e1 --add e3 --remove e4') == (
        b'q1', [b'e1'], [b'e2', b'e4'], [b'u.*.e1'], [b'e3'])
    assert parse_rebind(b'q1 --remove') == (b'q1', [], [], [], [])
    assert parse_rebind(b'q1 --add a --replace b') == (b'q1', [b'b'], [], [], [b'a'])
    assert parse_rebind(b'q1  e1') == (b'q1', [b'e1'], [], [], [])


@pytest.mark.parametrize('data', [b'q1', b'q1 --confirm e1', b'q1 e1 --bogus', b'q1 --'])
def test_mqks_rebind_errors(data):
    with pytest.raises(MqksProtocolError):
        parse_rebind(data)


def test_mqks_ack_and_reject():
    assert parse_ack(b'c1 m1') == (b'c1', b'm1')
    assert parse_ack(b'c1 --all') == (b'c1', None)
    assert parse_ack(b'c1 m1 m2') == (b'c1', b'm1 m2')
    with pytest.raises(MqksProtocolError):
        parse_ack(b'c1')


def test_mqks_eval_worker_prefix():
    assert parse_eval(b'len(state.queues)') == b'len(state.queues)'
    assert parse_eval(b'--worker=0 WORKERS') == b'WORKERS'
    assert parse_eval(b'--worker=2 x', worker=2) == b'x'
    assert parse_eval(b'--worker=0=9 x') == b'x'
    for bad in (b'--worker=1 x', b'--worker=0', b'--worker=abc x', b'--worker= x', b'--worker=0_0 x'):
        with pytest.raises(MqksProtocolError):
            parse_eval(bad)


# Lines made of the bytes and tokens that decide the fast path, so that it is often taken.
TOKEN = st.one_of(st.sampled_from([b'publish', b'ack', b'--confirm', b'--all', b'', b'e', b'm1',
                                   b' ', b'\t', b'x\ty', b'\r', b'\x0b', b'\x00', b'e ']),
                  st.binary(max_size=6))
ACTION = st.sampled_from([b'publish', b'ack', b'reject', b'publish ', b'ack\t'])
LINE = st.one_of(st.tuples(TOKEN, ACTION, TOKEN, TOKEN).map(b' '.join),
                 st.lists(TOKEN, min_size=1, max_size=7).map(b' '.join),
                 st.binary(max_size=30)).filter(lambda line: b'\n' not in line)


@settings(max_examples=600)
@given(LINE)
def test_mqks_fast_request_is_parse_request(line):
    """Whatever fast_request takes, the plain parsers read the same way."""
    parts = fast_request(line)
    if parts is None:
        return
    req_id, action, data, confirm = parse_request(line)
    assert (req_id, action, confirm) == (parts[0], parts[1], False)
    if action == b'publish':
        assert parse_publish(data) == (parts[2], parts[3])
    else:
        assert action == b'ack'
        assert parse_ack(data) == (parts[2], None if parts[3] == b'--all' else parts[3])


@settings(max_examples=400)
@given(st.lists(LINE, min_size=1, max_size=12), st.data())
def test_mqks_plain_run_is_fast_request_line_by_line(lines, data):
    """A run holds what fast_request gives each of its lines, all of one action, and stops
    at the first line fast_request does not take as that action."""
    start = data.draw(st.integers(0, len(lines) - 1))
    first = fast_request(lines[start])
    if first is None:
        return                           # not a plain line: the caller serves it alone
    run, after = plain_run(lines, start, first)
    assert start < after <= len(lines)
    assert run == [fast_request(line) for line in lines[start:after]]
    assert {parts[1] for parts in run} == {first[1]}
    if after < len(lines):
        parts = fast_request(lines[after])
        assert parts is None or parts[1] != first[1]


@pytest.mark.parametrize('line, parts', [
    (b'm1 publish ev some data', [b'm1', b'publish', b'ev', b'some data']),
    (b'm1 publish ev  x', [b'm1', b'publish', b'ev', b' x']),
    (b'a1 ack c1 m1', [b'a1', b'ack', b'c1', b'm1']),
    (b'a1 ack c1 --all', [b'a1', b'ack', b'c1', b'--all']),
    (b'm1 publish --confirm ev d', None),         # confirmed: parse_request
    (b'm1 publish ev d ', None),                  # trailing whitespace: rstrip
    (b'm1 publish ev\td', None),                  # TAB: an error reply
    (b'm1 publish ev', None),                     # no body: an error reply
    (b'r1 reject c1 m1', None),
])
def test_mqks_fast_request_takes_the_plain_requests(line, parts):
    assert fast_request(line) == parts


def test_mqks_protocol_errors_are_one_family():
    """One `except MqksProtocolError` covers every refusal of the MQKS protocol modules."""
    from mqksbridge.protocols.mqks.errors import MqksProtocolError
    from mqksbridge.protocols.mqks.framing import LineFramer
    for fail in (lambda: parse_request(b'a'), lambda: parse_publish(b'e'),
                 lambda: parse_consume(b'q --x'), lambda: parse_eval(b'--worker=1 x'),
                 lambda: LineFramer(4).feed(b'too long\n')):
        with pytest.raises(MqksProtocolError):
            fail()
