"""The zrex (SLRE) dialect: results recorded from libczmq, plus properties."""

import ctypes
import ctypes.util
import json
import pathlib
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.malamute import zrex

DATA = json.loads((pathlib.Path(__file__).parents[1] / "data" / "malamute_vectors.json").read_text())


@pytest.mark.parametrize("row", DATA["zrex"], ids=lambda r: "%r~%r" % (r["pattern"], r["subject"]))
def test_recorded_table(row):
    pattern = zrex.compile(row["pattern"])
    assert pattern.valid is row["valid"]
    assert zrex.valid(row["pattern"]) is row["valid"]
    assert pattern.search(row["subject"]) is row["match"]
    assert pattern.search_slre(row["subject"]) is row["match"]


def test_recorded_corpus():
    wrong = [(p, s, m) for p, s, m in DATA["zrex_corpus"] if zrex.compile(p).search(s) is not m]
    assert wrong == []
    assert any(m for _, _, m in DATA["zrex_corpus"]) and not all(m for _, _, m in DATA["zrex_corpus"])


@pytest.mark.parametrize("pattern, subject, expected", [
    (r"\a", "a", True), (r"\a", "1", False),                 # Python: BEL
    (r"\A", "1", True), (r"\A", "a", False),                 # Python: start of string
    ("[a-c]", "b", False), ("[a-c]", "-", True),             # no ranges
    ("x{2}", "xx", False), ("x{2}", "x{2}", True),           # literal braces
    (r"\x61", "a", False),
    ("", "anything", True),
    ("[", "anything", True),                                 # invalid: matches all
    (r"\w", "_", False),                                     # alnum only
    ("a?a", "a", False),                                     # ? never gives back
    ("(a|ab)c", "abc", False),                               # | commits to the first match
    ("$", "abc", False),                                     # no search starts at the end
    ("", "", False), ("^$", "", True),
])
def test_reference_differences_from_python(pattern, subject, expected):
    assert zrex.compile(pattern).search(subject) is expected


@pytest.mark.parametrize("pattern", [r"temp\.", "moscow", "a|b", "^a?$", "^(ab)+", r"\w", r"\s",
                                     r"\d", "^$", "temp.", r"^\d+-\d+$", ".*moscow$", "[ab]+c"])
@pytest.mark.parametrize("subject", ["temp.moscow", "tempXmoscow", "a", "b", "", "ab", "abab",
                                     " ", "5", "12-34", "xaabc", "aa"])
def test_agrees_with_python_on_the_common_subset(pattern, subject):
    python = re.search(pattern, subject) is not None and (subject != "" or pattern.startswith("^"))
    assert zrex.compile(pattern).search(subject) is python


def test_strings_stop_at_nul():
    assert zrex.compile("b").search("a\x00b") is False
    assert zrex.compile("a\x00zzz").search("a") is True
    assert zrex.compile(b"a").search(b"xa") is True


def test_trailing_backslash_never_matches():
    assert zrex.valid("a\\") is True
    assert zrex.compile("a\\").search("a\\") is False


@pytest.mark.parametrize("pattern", ["a)", "(a", "a|*", "ab|^+", "." * 252])
def test_invalid_patterns_match_every_nonempty_subject(pattern):
    compiled = zrex.compile(pattern)
    assert compiled.valid is False
    assert compiled.search("x") and compiled.search("anything") and not compiled.search("")


def test_unclosed_set_runs_the_prefix():
    compiled = zrex.compile("ab[cd")
    assert not compiled.valid
    assert compiled.search("xab") and not compiled.search("xyz")


def test_program_size_limit():
    assert zrex.valid("." * 251) and not zrex.valid("." * 252)


@pytest.mark.parametrize("pattern, subject", [("a**", "aaa"), ("(a?)*b", "xb"), ("^*", "a"),
                                              ("(|a)+", "aa"), ("()*?x", "x"), ("(a*)*?b", "ab")])
def test_patterns_that_hang_slre_terminate(pattern, subject):
    compiled = zrex.compile(pattern)
    assert compiled.valid
    assert compiled.search(subject) in (True, False)


def test_nested_loops_stay_polynomial():
    compiled = zrex.compile("(.*)(.*)(.*)(.*)(.*)x|y")
    assert compiled.search("a" * 255) is False


def test_cache_returns_same_object():
    assert zrex.compile("temp.") is zrex.compile("temp.")


def test_fast_path_used_for_simple_patterns():
    assert zrex.compile(r"^temp\.[a-z]+$")._regex is not None
    assert zrex.compile("(a|b)c")._regex is None


# -- properties ---------------------------------------------------------------

_ATOMS = ["a", "b", ".", "\\.", "\\d", "\\w", "\\s", "\\a", "[ab]", "[^a]", "[a-]", "x{2}", "^", "$"]
_QUANT = ["", "", "*", "+", "?"]
SIMPLE = st.lists(st.tuples(st.sampled_from(_ATOMS), st.sampled_from(_QUANT)), max_size=6).map(
    lambda parts: "".join(a + (q if a not in "^$" else "") for a, q in parts))
ANY_PATTERN = st.text(alphabet="ab.^$*+?()[]|\\dws-{}2", max_size=10)
SUBJECTS = st.text(alphabet="ab.x- 1_{}2\\", max_size=12)


@settings(max_examples=400)
@given(SIMPLE, SUBJECTS)
def test_regex_fast_path_equals_slre_matcher(pattern, subject):
    compiled = zrex.compile(pattern)
    assume(compiled._regex is not None)
    assert compiled.search(subject) is compiled.search_slre(subject)


@settings(max_examples=400)
@given(ANY_PATTERN, SUBJECTS)
def test_never_raises_and_paths_agree(pattern, subject):
    compiled = zrex.compile(pattern)
    assert compiled.search(subject) is compiled.search_slre(subject)
    assert zrex.valid(pattern) in (True, False)


@given(st.binary(max_size=40), st.binary(max_size=40))
def test_bytes_never_raise(pattern, subject):
    assert zrex.compile(pattern).search(subject) in (True, False)


@given(st.text(max_size=30).filter(lambda s: s and "\x00" not in s[:1]))
def test_empty_pattern_matches_every_nonempty_subject(subject):
    assert zrex.compile("").search(subject) is True


# -- optional oracle: the real libczmq, when it is installed -----------------

def _libczmq():
    name = ctypes.util.find_library("czmq")
    if not name:
        return None
    lib = ctypes.CDLL(name)
    lib.zrex_new.restype = ctypes.c_void_p
    lib.zrex_new.argtypes = [ctypes.c_char_p]
    lib.zrex_valid.argtypes = [ctypes.c_void_p]
    lib.zrex_valid.restype = ctypes.c_bool
    lib.zrex_matches.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.zrex_matches.restype = ctypes.c_bool
    lib.zrex_destroy.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    return lib


LIBCZMQ = _libczmq()
# Patterns (of the alphabet below) on which SLRE loops forever, crashes or reads
# past the pattern: a loop over a part that can match empty, a quantifier after
# "|", a trailing backslash.
_UNSAFE = re.compile(r"\|[\^$]*[*+?]|^[\^$?]*[*+]|[*+?^$][*+]|\\$")


@pytest.mark.skipif(LIBCZMQ is None, reason="libczmq not installed")
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab.^$*+?[]|\\dw", max_size=7), st.text(alphabet="ab. x", max_size=8))
def test_agrees_with_libczmq(pattern, subject):
    assume(not _UNSAFE.search(pattern) and not re.search(r"\[[^\]]*$", pattern))
    handle = LIBCZMQ.zrex_new(pattern.encode())
    try:
        valid = LIBCZMQ.zrex_valid(handle)
        matched = LIBCZMQ.zrex_matches(handle, subject.encode())
    finally:
        LIBCZMQ.zrex_destroy(ctypes.byref(ctypes.c_void_p(handle)))
    compiled = zrex.compile(pattern)
    assert compiled.valid is valid
    assert compiled.search(subject) is matched
