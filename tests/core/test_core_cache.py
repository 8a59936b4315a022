"""The bounded memo: hits are plain dict lookups, and it never holds more than its limit;
core/ and bridge/ use it for every memo, and no layer writes its own."""
import ast
from pathlib import Path

from hypothesis import given, strategies as st

from mqksbridge.core.cache import bounded

ROOT = Path(__file__).resolve().parents[2]


def test_a_memo_is_a_plain_dict_that_empties_when_full():
    cache, put = bounded(3)
    assert type(cache) is dict
    assert [put(k, k * 2) for k in (1, 2, 3)] == [2, 4, 6]
    assert cache == {1: 2, 2: 4, 3: 6}
    assert put(4, 8) == 8
    assert cache == {4: 8}
    cache.clear()                        # owners may empty it themselves (stale entries)
    put(5, 10)
    assert cache == {5: 10}


@given(st.integers(1, 20), st.lists(st.integers(0, 50), max_size=200))
def test_a_memo_never_passes_its_limit_and_keeps_the_latest(limit, keys):
    cache, put = bounded(limit)
    for key in keys:
        put(key, -key)
        assert len(cache) <= limit and cache[key] == -key


def _hand_written_memos(root):
    """`if len(x) >= N: x.clear()` (or `>`) in the modules under `root`: a cache emptied
    when full, written by hand instead of with `bounded`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                    and isinstance(node.test.ops[0], (ast.GtE, ast.Gt))):
                continue
            size = node.test.left
            if not (isinstance(size, ast.Call) and getattr(size.func, "id", None) == "len"
                    and size.args):
                continue
            emptied = ast.dump(size.args[0])
            for stmt in node.body:
                call = getattr(stmt, "value", None)
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "clear" and ast.dump(call.func.value) == emptied):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_layer_keeps_a_hand_written_memo():
    """One helper for every memo of core/ and bridge/; protocols/ (which imports no core)
    bounds its memos with functools.lru_cache."""
    assert [hit for layer in ("core", "bridge", "protocols")
            for hit in _hand_written_memos(ROOT / layer)] == []
