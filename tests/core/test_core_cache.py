"""The bounded memo: hits are plain dict lookups, and it never holds more than its limit."""
from hypothesis import given, strategies as st

from mqksbridge.core.cache import bounded


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
