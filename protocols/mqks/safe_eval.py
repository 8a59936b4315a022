"""A small, safe evaluator for the `_eval` statistics expressions of MQKS tools.

The original server ran `eval()` on whatever the client sent.  We parse the
expression with `ast.parse(mode='eval')` and interpret a whitelist of node
types ourselves; the input is never compiled or executed as code.

Reachable: names from the mapping given to `safe_eval` (e.g. `state`,
`request`, `WORKERS`, `WORKER`); attributes only of `Namespace` objects and
never names starting with `_`; subscripts and slices of dicts, lists,
tuples, strings and other mappings; calls to `len sorted str int list min max
sum` with positional arguments and `'<sep>'.join(x)` on a string constant;
`+ - * / // %` (no `**`, no sequence repetition, integers bounded); unary
`- + not`; `and`/`or`; comparisons; list and tuple displays; str, int, float,
bool and None constants.  Anything else raises MqksProtocolError (EVAL).

The reply is the Python 3 `str()` of the result (so `5`, `e1 e2`,
`['a', 'b']`), UTF-8 encoded, and may not contain a newline.

Cost is bounded by construction, not by watching the clock: the grammar has no
loops (no comprehensions, lambdas or repetition), so every node is evaluated
at most once, and every operation whose cost grows with its operands (`+` of
sequences, `join`, `str`, `sorted`, `list`, `min`/`max`/`sum`, comparisons,
slices, reading a stats view) is charged that cost *before* it runs, against a
budget of MAX_WORK units (one unit: a node, an element or a character). Past
the budget, or when a value it would build exceeds MAX_VALUE, the expression
is refused. Building a value costs at least its size, so memory is bounded by
the budget too. A unit costs at most about 40 ns (the costliest is walking
containers in Python, charged per element and character), so an expression
finishes within about 0.2 s whatever it is.
"""

import ast
import operator
import warnings
from collections.abc import Mapping

from mqksbridge.protocols.mqks.errors import MqksProtocolError, Reason

MAX_EXPRESSION = 8192        # bytes of source
MAX_DEPTH = 100              # nesting of the expression tree
MAX_INT_BITS = 256           # keeps integer arithmetic cheap
MAX_VALUE = 1 << 20          # characters/elements of any value the expression builds
MAX_WORK = 5_000_000         # units of work per expression (see the module docstring)
MAX_REPLY = 1 << 20          # characters of the reply


def _refused(reason):
    """The expression is not allowed, or failed; the door answers an error reply."""
    return MqksProtocolError(Reason.EVAL, reason)


class Namespace:
    """A read-only attribute view: `ns.x` is `attrs['x']`, nothing else is reachable.

    `attrs` may be any Mapping, including one that computes values lazily.
    """

    __slots__ = ('_attrs',)

    def __init__(self, attrs):
        self._attrs = attrs

    def __repr__(self):
        return '<Namespace %s>' % ' '.join(sorted(self._attrs))


_FUNCTIONS = {
    'len': (len, 1, 1), 'sorted': (sorted, 1, 1), 'str': (str, 0, 1),
    'int': (int, 0, 1), 'list': (list, 0, 1), 'min': (min, 1, None),
    'max': (max, 1, None), 'sum': (sum, 1, 1),
}
_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
    ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_, ast.IsNot: operator.is_not,
}
_CONSTANTS = (str, int, float, type(None))   # bool is an int
_SUBSCRIPTABLE = (Mapping, list, tuple, str)


def _number(value):
    if type(value) is int and value.bit_length() > MAX_INT_BITS:
        raise _refused('integer too large')
    return value


def _size(value, limit):
    """An upper bound on the length of `str(value)` (and on the work of walking or
    comparing it), or `limit + 1` as soon as it is past `limit`: walks at most
    `limit` elements. Types we cannot bound count as too large."""
    total, todo = 0, [value]
    while todo:
        value = todo.pop()
        kind = type(value)
        if kind is str:
            total += (len(value) + value.count('\\') + value.count("'") if value.isprintable()
                      else 10 * len(value)) + 2      # repr: escapes take up to 10 chars
        elif kind is int or kind is bool:
            total += value.bit_length() // 3 + 6
        elif kind is float or value is None:
            total += 24
        elif kind in (list, tuple, set, frozenset):
            total += 2 + 2 * len(value)
            if total <= limit:
                todo.extend(value)
        elif isinstance(value, Mapping):
            total += 2 + 4 * len(value)
            if total <= limit:
                todo.extend(value.items())
        elif kind is Namespace:
            total += 12 + sum(len(key) + 1 for key in value._attrs)
        else:
            return limit + 1
        if total > limit:
            return limit + 1
    return total


class _Evaluator:
    def __init__(self, names):
        self.names = names
        self.work = 0
        self.views = {}              # (id of a Namespace, attribute) -> value: computed once

    def charge(self, units):
        """Account for `units` of work before doing it; refuse past MAX_WORK."""
        self.work += units
        if self.work > MAX_WORK:
            raise _refused('expression needs too much work')

    def measure(self, value, limit=MAX_VALUE):
        """`_size(value)`, charged (walking costs as much); refuse past `limit`."""
        size = _size(value, min(limit, MAX_WORK - self.work))
        self.charge(size)
        if size > limit:
            raise _refused('value too large')
        return size

    def eval(self, node, depth):
        if depth > MAX_DEPTH:
            raise _refused('expression nested too deeply')
        self.charge(1)
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise _refused('%s is not allowed' % type(node).__name__)
        return handler(self, node, depth + 1)

    def constant(self, node, depth):
        if not isinstance(node.value, _CONSTANTS):
            raise _refused('constant %r is not allowed' % type(node.value).__name__)
        return _number(node.value)

    def name(self, node, depth):
        if node.id.startswith('_') or node.id not in self.names:
            raise _refused('unknown name %r' % node.id)
        return self.names[node.id]

    def attribute(self, node, depth):
        owner = self.eval(node.value, depth)
        if not isinstance(owner, Namespace) or node.attr.startswith('_'):
            raise _refused('attribute %r is not allowed' % node.attr)
        key = (id(owner), node.attr)
        if key in self.views:
            return self.views[key]
        try:
            value = owner._attrs[node.attr]       # a stats view costs its size to compute
        except KeyError:
            raise _refused('unknown attribute %r' % node.attr) from None
        self.charge(len(value) if hasattr(value, '__len__') else 1)
        self.views[key] = value
        return value

    def subscript(self, node, depth):
        owner = self.eval(node.value, depth)
        if not isinstance(owner, _SUBSCRIPTABLE):
            raise _refused('%s is not subscriptable here' % type(owner).__name__)
        index = self.eval(node.slice, depth)
        if type(index) is slice and not isinstance(owner, Mapping):
            self.charge(len(range(*index.indices(len(owner)))))   # a slice copies
        return owner[index]

    def slice_(self, node, depth):
        bounds = [None if part is None else self.eval(part, depth)
                  for part in (node.lower, node.upper, node.step)]
        if not all(b is None or type(b) is int for b in bounds):
            raise _refused('slice bounds must be integers')
        return slice(*bounds)

    def call(self, node, depth):
        if node.keywords:
            raise _refused('keyword arguments are not allowed')
        args = [self.eval(arg, depth) for arg in node.args]
        func = node.func
        if isinstance(func, ast.Name) and func.id in _FUNCTIONS:
            function, least, most = _FUNCTIONS[func.id]
            if len(args) < least or (most is not None and len(args) > most):
                raise _refused('wrong number of arguments to %s' % func.id)
            self._charge_call(func.id, args)
            return _number(function(*args))
        if (isinstance(func, ast.Attribute) and func.attr == 'join'
                and isinstance(func.value, ast.Constant)
                and type(func.value.value) is str and len(args) == 1):
            return self.join(func.value.value, args[0])
        raise _refused('this call is not allowed')

    def _charge_call(self, name, args):
        if name == 'len' or not args:
            return
        if name in ('str', 'int'):
            self.measure(args[0])
            return
        if len(args) > 1:                        # min, max of the arguments
            self.measure(args)
            return
        value = args[0]                           # sorted, list, min, max, sum: its elements
        if hasattr(value, '__len__'):
            count = len(value)
            if count > MAX_VALUE:
                raise _refused('value too large')
            self.charge(count)
            self.measure(tuple(value) if isinstance(value, Mapping) else value, MAX_WORK)
            if name == 'sorted':
                self.charge(count * count.bit_length())

    def join(self, separator, iterable):
        """`separator.join(iterable)`, its size checked before it is built."""
        if not hasattr(iterable, '__len__') or len(iterable) > MAX_VALUE:
            raise _refused('value too large')
        self.charge(len(iterable))
        parts = list(iterable)
        if not all(type(part) is str for part in parts):
            raise _refused('join needs strings')
        size = sum(map(len, parts)) + len(separator) * max(len(parts) - 1, 0)
        if size > MAX_VALUE:
            raise _refused('value too large')
        self.charge(size)
        return separator.join(parts)

    def binop(self, node, depth):
        op = _BINARY.get(type(node.op))
        if op is None:
            raise _refused('operator %s is not allowed' % type(node.op).__name__)
        left, right = self.eval(node.left, depth), self.eval(node.right, depth)
        if op is operator.add and type(left) is type(right) and type(left) in (str, list, tuple):
            if len(left) + len(right) > MAX_VALUE:
                raise _refused('result too large')
            self.charge(len(left) + len(right))
        elif not (isinstance(left, (int, float)) and isinstance(right, (int, float))):
            raise _refused('arithmetic needs numbers')
        return _number(op(left, right))

    def unaryop(self, node, depth):
        op = _UNARY.get(type(node.op))
        if op is None:
            raise _refused('operator %s is not allowed' % type(node.op).__name__)
        return _number(op(self.eval(node.operand, depth)))

    def boolop(self, node, depth):
        is_and = isinstance(node.op, ast.And)
        for value_node in node.values:
            value = self.eval(value_node, depth)
            if bool(value) is not is_and:
                return value
        return value

    def compare(self, node, depth):
        left = self.eval(node.left, depth)
        for op, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node, depth)
            if type(op) in (ast.In, ast.NotIn):
                self.measure(left)               # hashed, or compared with each element
                if isinstance(right, (list, tuple, str)):
                    self.measure(right)
            elif type(op) not in (ast.Is, ast.IsNot):
                self.measure(left, MAX_WORK)     # walked (and compared) element by element
                self.measure(right, MAX_WORK)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def list_display(self, node, depth):       # its nodes were charged: no extra cost
        return [self.eval(item, depth) for item in node.elts]

    def tuple_display(self, node, depth):
        return tuple(self.eval(item, depth) for item in node.elts)


_HANDLERS = {
    ast.Constant: _Evaluator.constant, ast.Name: _Evaluator.name,
    ast.Attribute: _Evaluator.attribute, ast.Subscript: _Evaluator.subscript,
    ast.Slice: _Evaluator.slice_, ast.Call: _Evaluator.call, ast.BinOp: _Evaluator.binop,
    ast.UnaryOp: _Evaluator.unaryop, ast.BoolOp: _Evaluator.boolop,
    ast.Compare: _Evaluator.compare, ast.List: _Evaluator.list_display, ast.Tuple: _Evaluator.tuple_display,
}


def safe_eval(expression, names):
    """Evaluate `expression` (str or bytes) against `names`; raise MqksProtocolError (EVAL)."""
    if len(expression) > MAX_EXPRESSION:
        raise _refused('expression too long')
    try:
        if isinstance(expression, bytes):
            expression = expression.decode('utf-8')
        with warnings.catch_warnings():  # client typos must not print SyntaxWarnings to our log
            warnings.simplefilter('ignore')
            tree = ast.parse(expression.strip(), mode='eval')
        return _Evaluator(names).eval(tree.body, 0)
    except MqksProtocolError:
        raise
    except Exception as exc:  # any failure of the user's expression is an error reply
        raise _refused('%s: %s' % (type(exc).__name__, exc)) from None


def eval_reply(expression, names):
    """The `_eval` reply payload: UTF-8 `str()` of the result; raise MqksProtocolError (EVAL)."""
    result = safe_eval(expression, names)
    if _size(result, MAX_REPLY) > MAX_REPLY:
        raise _refused('reply too large')
    try:
        text = str(result)
    except MqksProtocolError:
        raise
    except Exception as exc:  # a view object whose __str__ fails
        raise _refused('%s: %s' % (type(exc).__name__, exc)) from None
    if len(text) > MAX_REPLY or '\n' in text:
        raise _refused('reply too large or not a single line')
    return text.encode('utf-8', 'backslashreplace')
