"""The `_eval` evaluator: the expressions MQKS tools send work, attacks fail."""

import time

import pytest
from hypothesis import given, settings, strategies as st

from mqksbridge.protocols.mqks.errors import MqksProtocolError, Reason
from mqksbridge.protocols.mqks.safe_eval import MAX_EXPRESSION, Namespace, eval_reply, safe_eval


class Lazy(dict):
    """A mapping that counts reads, standing in for a computed stats view."""

    reads = 0

    def __getitem__(self, key):
        Lazy.reads += 1
        return super().__getitem__(key)


def names():
    state = Namespace({
        'queues': {'q1': object(), 'q2': object()},
        'events_by_queues': {'q1': {'e2', 'e1'}},
        'published': 7,
        'lazy': Lazy(a=1),
    })
    return {'state': state, 'request': {'client': '127.0.0.1:5000.abcd'},
            'WORKERS': 1, 'WORKER': 0}


@pytest.mark.parametrize('expression, reply', [
    ('len(state.queues)', b'2'),
    ("' '.join(sorted(state.events_by_queues['q1']))", b'e1 e2'),
    ("request['client']", b'127.0.0.1:5000.abcd'),
    ('WORKERS', b'1'),
    (b'[len(state.queues), state.published, WORKER]', b'[2, 7, 0]'),
    ("','.join(sorted(state.queues))", b'q1,q2'),
    ('sorted(state.queues)[:1]', b"['q1']"),
    ('state.published * 3 - 1', b'20'),
    ('state.published // 2, state.published % 2, state.published / 2', b'(3, 1, 3.5)'),
    ('max(1, 5, 3) + min([4, 2]) + sum([1, 2])', b'10'),
    ("int('12') + len(list('abc'))", b'15'),
    ("str(WORKERS) + '!'", b'1!'),
    ("'q1' in state.queues and not WORKER", b'True'),
    ('1 < WORKERS <= 2', b'False'),
    ('state.lazy', b"{'a': 1}"),
    ('  -WORKERS', b'-1'),
])
def test_mqks_eval_allowed(expression, reply):
    assert eval_reply(expression, names()) == reply


ATTACKS = [
    "__import__('os')", '().__class__', 'state.__dict__', 'state._attrs',
    "state.queues.__class__", "request.__class__", "[].__class__.__base__.__subclasses__()",
    'lambda: 1', '[x for x in state.queues]', '(x for x in [1])', '{k: 1 for k in [1]}',
    "open('/etc/passwd')", '9**9**9', "'a'*10**9", "'a' * 1000000000", '[0] * 1000000000',
    "'%s' % WORKERS", '1 << 100000', 'getattr(state, "queues")', "eval('1')", 'exec',
    "' '.join.__self__", "state.queues.keys()", "'abc'.upper()", 'sorted([2, 1], reverse=True)',
    "f'{WORKERS}'", '(y := 1)', '{1: 2}', '{1, 2}', "b'x'", '1j', '...', '*[1]',
    '1 if WORKERS else 2', 'len', '_', 'unknown', 'state.missing', "request['nope']",
    '1/0', '1 % 0', "int('9' * 5000)", '2' + '0' * 100, 'WORKERS.real',
    "'a\\nb'", 'len(1)', "sum(['a'])", 'min()', 'len(state.queues, 1)',
    "print('x')", 'globals()', 'vars()', 'dir()', 'type(WORKERS)', 'state;1', 'import os',
]


@pytest.mark.parametrize('expression', ATTACKS)
def test_mqks_eval_refused(expression):
    with pytest.raises(MqksProtocolError):
        eval_reply(expression, names())


def test_mqks_eval_limits():
    with pytest.raises(MqksProtocolError):
        safe_eval('1+' * MAX_EXPRESSION + '1', names())
    with pytest.raises(MqksProtocolError):
        safe_eval('[' * 150 + '1' + ']' * 150, names())
    with pytest.raises(MqksProtocolError):
        safe_eval('1+' * 150 + '1', names())
    with pytest.raises(MqksProtocolError):
        safe_eval('-' * 200 + '1', names())
    with pytest.raises(MqksProtocolError):
        safe_eval(b'\xff\xfe', names())


def test_mqks_eval_bigger_sequence_concat_is_bounded():
    big = {'s': 'x' * (1 << 19)}
    with pytest.raises(MqksProtocolError):
        safe_eval("s + s + s", big)
    assert len(safe_eval('s + s', big)) == 1 << 20


def test_mqks_eval_never_reads_private_names_even_if_mapped():
    hidden = {'ns': Namespace({'_secret': 1, '__class__': 2}), '_top': 3}
    for expression in ('ns._secret', 'ns.__class__', '_top'):
        with pytest.raises(MqksProtocolError):
            safe_eval(expression, hidden)


def test_mqks_eval_namespace_reads_through_mapping():
    before = Lazy.reads
    assert safe_eval("state.lazy['a']", names()) == 1
    assert Lazy.reads == before + 1


tokens = st.sampled_from([
    'state', '.', 'queues', '(', ')', '[', ']', "'q1'", '1', '0', '/', '*', '**', '+',
    'len', 'sorted', "' '.join", ',', ' ', '__class__', '_attrs', 'lambda', ':', 'x',
    '-', '9', 'request', "'client'", 'for', 'in', 'if', '<', '==', 'WORKERS', '"', "'",
])


@given(st.lists(tokens, max_size=12).map(''.join))
def test_mqks_eval_token_soup_never_escapes(expression):
    try:
        eval_reply(expression, names())
    except MqksProtocolError as exc:
        assert exc.code is Reason.EVAL


@given(st.binary(max_size=30))
def test_mqks_eval_arbitrary_bytes(expression):
    try:
        eval_reply(expression, names())
    except MqksProtocolError:
        pass


# -- the work budget: bounded by construction, checked by the clock ---------------------

def big_names():
    queues = {f'queue.{i}': i for i in range(100_000)}
    return {'state': Namespace({'queues': queues, 'events': {'q': set(queues)},
                                'numbers': list(range(100_000))}),
            'request': {'client': 'c'}, 'WORKERS': 1, 'WORKER': 0}


def timed(expression, names):
    start = time.thread_time()
    try:
        result = ('ok', eval_reply(expression, names))
    except MqksProtocolError as exc:
        result = ('error', str(exc))
    return time.thread_time() - start, result


A = "'" + 'a' * 1500 + "'"
BOMBS = [
    f"len({A}.join({A}.join({A})))",              # 3.4 GB, 12 s before the budget
    f"{A}.join({A}.join({A}))",
    "str(" + "[" * 90 + "state.queues" + "]" * 90 + ")",
    "str([" + ", ".join(["state.queues"] * 400) + "])",
    "sorted(state.queues) + sorted(state.queues) + sorted(state.queues)",
    "str(state.queues) + str(state.queues)",
    "sorted(list(str(sorted(state.queues))))",
    "' '.join(str(state.numbers))",
    " == ".join(["[state.numbers]"] * 8),
    "max(str(state.events))",
    "len(" + " + ".join(["sorted(state.numbers)"] * 30) + ")",
]


@pytest.mark.parametrize('expression', BOMBS)
def test_mqks_eval_bombs_are_refused_before_they_cost(expression):
    elapsed, (outcome, _) = timed(expression, big_names())
    assert outcome == "error" and elapsed < 1.0


def test_mqks_eval_large_but_affordable_answers_still_work():
    names = big_names()
    assert eval_reply('len(state.queues)', names) == b'100000'
    assert eval_reply("sorted(state.queues)[:2]", names) == b"['queue.0', 'queue.1']"
    assert eval_reply("'queue.7' in state.queues", names) == b'True'
    assert eval_reply('sum(state.numbers[:1000])', names) == b'499500'


LEAVES = st.sampled_from([
    'state.queues', 'state.numbers', 'state.events', "state.events['q']", 'WORKERS',
    "request['client']", A, "'ab'", '7', '2.5', '[1, 2]', "('x', 'y')", 'None',
])


def _grow(children):
    one, two = children, st.tuples(children, children)
    return st.one_of(
        two.map(lambda p: f'({p[0]} + {p[1]})'), two.map(lambda p: f'({p[0]} * {p[1]})'),
        two.map(lambda p: f'[{p[0]}, {p[1]}]'), two.map(lambda p: f'({p[0]} == {p[1]})'),
        two.map(lambda p: f'({p[0]} in {p[1]})'), two.map(lambda p: f'({p[0]} < {p[1]})'),
        one.map(lambda e: f'{A}.join({e})'), one.map(lambda e: f"' '.join({e})"),
        one.map(lambda e: f'str({e})'), one.map(lambda e: f'sorted({e})'),
        one.map(lambda e: f'list({e})'), one.map(lambda e: f'max({e})'),
        one.map(lambda e: f'sum({e})'), one.map(lambda e: f'len({e})'),
        one.map(lambda e: f'{e}[1:]'), one.map(lambda e: f'({e} or {e})'),
    )


EXPRESSIONS = st.recursive(LEAVES, _grow, max_leaves=12)
NAMES = big_names()


@settings(max_examples=80, deadline=None)
@given(EXPRESSIONS)
def test_mqks_eval_any_expression_stays_within_its_budget(expression):
    elapsed, _ = timed(expression, NAMES)
    assert elapsed < 1.0, expression
