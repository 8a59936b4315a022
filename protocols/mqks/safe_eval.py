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
bool and None constants.  Anything else raises EvalError.

The reply is the Python 3 `str()` of the result (so `5`, `e1 e2`,
`['a', 'b']`), UTF-8 encoded, and may not contain a newline.
"""

import ast
import operator
import warnings
from collections.abc import Mapping

MAX_EXPRESSION = 8192        # bytes of source
MAX_DEPTH = 100              # nesting of the expression tree
MAX_INT_BITS = 256           # keeps integer arithmetic cheap
MAX_SEQUENCE = 1 << 20       # length of strings/lists built by `+`
MAX_REPLY = 1 << 20          # characters of the reply


class EvalError(Exception):
    """The expression is not allowed, or failed; the door answers an error reply."""


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
        raise EvalError('integer too large')
    return value


class _Evaluator:
    def __init__(self, names):
        self.names = names

    def eval(self, node, depth):
        if depth > MAX_DEPTH:
            raise EvalError('expression nested too deeply')
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise EvalError('%s is not allowed' % type(node).__name__)
        return handler(self, node, depth + 1)

    def constant(self, node, depth):
        if not isinstance(node.value, _CONSTANTS):
            raise EvalError('constant %r is not allowed' % type(node.value).__name__)
        return _number(node.value)

    def name(self, node, depth):
        if node.id.startswith('_') or node.id not in self.names:
            raise EvalError('unknown name %r' % node.id)
        return self.names[node.id]

    def attribute(self, node, depth):
        owner = self.eval(node.value, depth)
        if not isinstance(owner, Namespace) or node.attr.startswith('_'):
            raise EvalError('attribute %r is not allowed' % node.attr)
        try:
            return owner._attrs[node.attr]
        except KeyError:
            raise EvalError('unknown attribute %r' % node.attr) from None

    def subscript(self, node, depth):
        owner = self.eval(node.value, depth)
        if not isinstance(owner, _SUBSCRIPTABLE):
            raise EvalError('%s is not subscriptable here' % type(owner).__name__)
        return owner[self.eval(node.slice, depth)]

    def slice_(self, node, depth):
        bounds = [None if part is None else self.eval(part, depth)
                  for part in (node.lower, node.upper, node.step)]
        if not all(b is None or type(b) is int for b in bounds):
            raise EvalError('slice bounds must be integers')
        return slice(*bounds)

    def call(self, node, depth):
        if node.keywords:
            raise EvalError('keyword arguments are not allowed')
        args = [self.eval(arg, depth) for arg in node.args]
        func = node.func
        if isinstance(func, ast.Name) and func.id in _FUNCTIONS:
            function, least, most = _FUNCTIONS[func.id]
            if len(args) < least or (most is not None and len(args) > most):
                raise EvalError('wrong number of arguments to %s' % func.id)
            return _number(function(*args))
        if (isinstance(func, ast.Attribute) and func.attr == 'join'
                and isinstance(func.value, ast.Constant)
                and type(func.value.value) is str and len(args) == 1):
            return func.value.value.join(args[0])
        raise EvalError('this call is not allowed')

    def binop(self, node, depth):
        op = _BINARY.get(type(node.op))
        if op is None:
            raise EvalError('operator %s is not allowed' % type(node.op).__name__)
        left, right = self.eval(node.left, depth), self.eval(node.right, depth)
        if op is operator.add and type(left) is type(right) and type(left) in (str, list, tuple):
            if len(left) + len(right) > MAX_SEQUENCE:
                raise EvalError('result too large')
        elif not (isinstance(left, (int, float)) and isinstance(right, (int, float))):
            raise EvalError('arithmetic needs numbers')
        return _number(op(left, right))

    def unaryop(self, node, depth):
        op = _UNARY.get(type(node.op))
        if op is None:
            raise EvalError('operator %s is not allowed' % type(node.op).__name__)
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
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def list_display(self, node, depth):
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
    """Evaluate `expression` (str or bytes) against `names`; raise EvalError."""
    if len(expression) > MAX_EXPRESSION:
        raise EvalError('expression too long')
    try:
        if isinstance(expression, bytes):
            expression = expression.decode('utf-8')
        with warnings.catch_warnings():  # client typos must not print SyntaxWarnings to our log
            warnings.simplefilter('ignore')
            tree = ast.parse(expression.strip(), mode='eval')
        return _Evaluator(names).eval(tree.body, 0)
    except EvalError:
        raise
    except Exception as exc:  # any failure of the user's expression is an error reply
        raise EvalError('%s: %s' % (type(exc).__name__, exc)) from None


def eval_reply(expression, names):
    """The `_eval` reply payload: UTF-8 `str()` of the result; raise EvalError."""
    try:
        text = str(safe_eval(expression, names))
    except EvalError:
        raise
    except Exception as exc:  # a view object whose __str__ fails
        raise EvalError('%s: %s' % (type(exc).__name__, exc)) from None
    if len(text) > MAX_REPLY or '\n' in text:
        raise EvalError('reply too large or not a single line')
    return text.encode('utf-8', 'backslashreplace')
