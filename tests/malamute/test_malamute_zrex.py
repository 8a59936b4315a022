"""The zrex (SLRE) dialect: results recorded from libczmq, plus properties."""

import ctypes
import ctypes.util
import json
import pathlib
import re
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.malamute import zrex
from tests.malamute import slre_reference

DATA = json.loads((pathlib.Path(__file__).parents[1] / "data" / "malamute_vectors.json").read_text())


@pytest.mark.parametrize("row", DATA["zrex"], ids=lambda r: "%r~%r" % (r["pattern"], r["subject"]))
def test_recorded_table(row):
    pattern = zrex.compile(row["pattern"])
    assert pattern.valid is row["valid"]
    assert zrex.valid(row["pattern"]) is row["valid"]
    assert pattern.search(row["subject"]) is row["match"]
    assert slre_reference.search(row["pattern"], row["subject"]) is row["match"]


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


def test_nested_loops_stay_linear():
    compiled = zrex.compile("(.*)(.*)(.*)(.*)(.*)x|y")
    assert compiled.search("a" * 255) is False


def test_cache_returns_same_object():
    assert zrex.compile("temp.") is zrex.compile("temp.")


@pytest.mark.parametrize("pattern, engine, literal", [
    ("temp.moscow", "regex", None), (r"^temp\.[a-z]+$", "regex", None),
    ("temp.*", "literal", ("contains", "temp")), (".*x", "literal", ("contains", "x")),
    ("a*a*a*a*a*a*a*b", "literal", ("contains", "b")), (".*", "literal", ("contains", "")),
    ("", "literal", ("contains", "")), ("(", "literal", ("contains", "")),
    (r"^temp\.", "literal", ("prefix", "temp.")), ("^", "literal", ("prefix", "")),
    ("^moscow$", "literal", ("exact", "moscow")), ("^$", "literal", ("exact", "")),
    ("moscow$", "literal", ("suffix", "moscow")), ("$", "regex", None), ("(^)", "regex", None),
    ("^a*b*$", "dfa", None), ("a.b*c.*d", "dfa", None), (".*a.*$", "literal", ("contains", "a")),
    ("temp.*moscow", "texts", None), ("a.b.*c", "gap", None), ("^a.*b$", "gap", None),
    (".a*b.*c", "gap", None), (r"\w.*\d$", "gap", None),
    ("temp|weather", "alternatives", None), ("(temp|rain)\\.", "alternatives", None),
    ("(a|ab)c", "slre", None), ("(a|b)*c", "slre", None), ("^a.*?b", "slre", None),
])
def test_each_pattern_gets_the_cheapest_linear_engine(pattern, engine, literal):
    compiled = zrex.compile(pattern)
    assert (compiled.engine, compiled.literal) == (engine, literal)


def test_literal_text_that_is_not_utf8_is_matched_but_not_offered_for_indexing():
    compiled = zrex.compile(b"^\xff")
    assert compiled.engine == "literal" and compiled.literal is None
    assert compiled.search(b"\xffx") and not compiled.search(b"x\xff")


def test_key_is_the_pattern_up_to_its_nul_and_the_subject_limit():
    assert zrex.compile("a.b\x00zz").key == zrex.compile(b"a.b").key == (b"a.b", 1024)
    assert zrex.compile("a.b", 300).key != zrex.compile("a.b").key


@pytest.mark.parametrize("pattern", ["a*a*a*a*a*a*a*b", ".*x", "(.*)(.*)(.*)(.*)(.*)x|y",
                                     "((a*b*)*c)*d", "(((a*)*)*)*x", "(.+?.*)" * 16 + "x",
                                     "^(.*?,){11}P", "(a+)+$", "^a*a*a*a*a*a*b$"])
def test_catastrophic_patterns_cost_linear_time(pattern):
    """Time grows with the subject, not with its power: 8x the subject, well under 8x^2
    the time (the old matcher took seconds on 50 bytes and hung on 200)."""
    compiled = zrex.Pattern(pattern, max_subject=None)
    short, long = "a" * 256, "a" * 2048
    compiled.search(short)                    # build DFA states, warm caches
    def cost(subject):
        start = time.thread_time()
        compiled.search(subject)
        return time.thread_time() - start
    assert min(cost(long) for _ in range(3)) < 1.0
    assert min(cost(long) for _ in range(3)) < 20 * min(cost(short) for _ in range(3)) + 0.01


# Each engine on a subject built to make a backtracking search of that pattern slow: the
# text its first run or loop matches, over and over, and never what would end the search.
ENGINE_WORST_CASES = [
    ("aaab", "literal", "a"), ("temp.*moscow", "texts", "temp"), ("a.*a.*a.*b", "texts", "a"),
    ("a.*.b.*b", "gap", "a"), ("^a.*a.*b$", "gap", "a"), (r"a.a.*\w\w.*[ab]$", "gap", "ab."),
    ("a.a.a.a.b", "regex", "a"), ("a?a?a?aab", "regex", "a"), ("^a*a?b", "regex", "a"),
    (r"\d+$", "regex", "1x"), ("^a*b*$", "dfa", "ab"), ("a.b*c.*d", "dfa", "abc"),
    ("b.b*c", "dfa", "b"),
    ("temp|moscow|now", "alternatives", "temo"), ("a.*a.*b|a.a.b", "alternatives", "a"),
    ("^a*b*$|x", "alternatives", "ab"), ("(a|b)*c", "slre", "ab"),
]


@pytest.mark.parametrize("pattern, engine, unit", ENGINE_WORST_CASES)
def test_each_engine_costs_linear_time(pattern, engine, unit):
    """4x the subject, about 4x the time (a quadratic search would take 16x, a cubic one
    64x), from 256 bytes up to 16 KiB; sizes stop growing past 0.5 s, so a super-linear
    engine fails without running for minutes."""
    compiled = zrex.Pattern(pattern, max_subject=None)
    assert compiled.engine == engine
    times = []
    for size in (256, 1024, 4096, 16384):
        subject = unit * (size // len(unit))
        assert compiled.search(subject) is False
        times.append(_cpu(compiled.search, subject))
        if times[-1] > 0.5:
            break
    assert len(times) == 4, times
    assert times[-1] < 10 * times[-2] + 0.002, times


def _cpu(search, subject):
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        search(subject)
        best = min(best, time.thread_time() - start)
    return best


def test_general_engine_fills_one_column_per_item():
    """The guarantee by construction: one column of (subject + 1) answers per item and
    per block end, each filled once, so the work is linear in the subject."""
    compiled = zrex.Pattern("(.+?.*)" * 16 + "x", max_subject=None)
    assert compiled.engine == "slre"
    columns = zrex._Columns(compiled._program, False)
    assert columns.columns == _count_items(compiled._program) + _count_blocks(compiled._program)


def _count_items(block):
    total = len(block.items)
    for item in block.items:
        if item.kind == zrex.ALT:
            total += sum(_count_items(b) for b in item.value)
        elif item.kind == zrex.LOOP and item.value.single is None:
            total += _count_items(item.value)
    return total


def _count_blocks(block):
    total = 1
    for item in block.items:
        if item.kind == zrex.ALT:
            total += sum(_count_blocks(b) for b in item.value)
        elif item.kind == zrex.LOOP and item.value.single is None:
            total += _count_blocks(item.value)
    return total


def test_long_subjects_match_only_plain_text_patterns():
    long = "x" * 2000 + "moscow"
    assert zrex.compile("moscow").search(long) is True
    assert zrex.compile("m.scow").search(long) is False
    assert zrex.compile("m.scow", 4096).search(long) is True
    assert zrex.compile("m.scow").search(long[-300:]) is True


def test_dfa_cache_starts_over_past_its_bound(monkeypatch):
    monkeypatch.setattr(zrex, "MAX_DFA_STATES", 3)
    compiled = zrex.Pattern(".*a...b*c")
    assert compiled.engine == "dfa"
    for subject in ["aaaaaabbbc", "xxaxxxc", "a" * 50, "abababababbbbc", "aaac"]:
        assert compiled.search(subject) is slre_reference.search(".*a...b*c", subject)


# -- properties ---------------------------------------------------------------

_ATOMS = ["a", "b", ".", "\\.", "\\d", "\\w", "\\s", "\\a", "[ab]", "[^a]", "[a-]", "x{2}", "^", "$"]
_QUANT = ["", "", "*", "+", "?"]
SIMPLE = st.lists(st.tuples(st.sampled_from(_ATOMS), st.sampled_from(_QUANT)), max_size=6).map(
    lambda parts: "".join(a + (q if a not in "^$" else "") for a, q in parts))
ANY_PATTERN = st.text(alphabet="ab.^$*+?()[]|\\dws-{}2", max_size=10)
SUBJECTS = st.text(alphabet="ab.x- 1_{}2\\", max_size=12)


ALTERNATIVES = st.lists(SIMPLE, min_size=1, max_size=3).map("|".join)
WORDS = st.lists(st.text(alphabet="abx.", max_size=3), min_size=1, max_size=3)
GROUPED = st.tuples(SIMPLE, WORDS, SIMPLE, st.booleans()).map(
    lambda t: f"{'^' if t[3] else ''}{t[0]}({'|'.join(t[1])}){t[2]}")


@settings(max_examples=500, deadline=None)
@given(st.one_of(SIMPLE, ALTERNATIVES, GROUPED), SUBJECTS)
def test_fast_engines_equal_the_old_slre_matcher(pattern, subject):
    """Literal, regex, DFA and alternatives against the old backtracking SLRE matcher."""
    assert zrex.compile(pattern).search(subject) is slre_reference.search(pattern, subject)


@settings(max_examples=500, deadline=None)
@given(ANY_PATTERN, SUBJECTS)
def test_every_pattern_equals_the_old_slre_matcher(pattern, subject):
    compiled = zrex.compile(pattern)
    assert compiled.search(subject) is slre_reference.search(pattern, subject)
    assert zrex.valid(pattern) in (True, False)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=12), st.binary(max_size=16))
def test_arbitrary_bytes_equal_the_old_slre_matcher(pattern, subject):
    assert zrex.compile(pattern).search(subject) is slre_reference.search(pattern, subject)


@given(st.binary(max_size=40), st.binary(max_size=40))
def test_bytes_never_raise(pattern, subject):
    assert zrex.compile(pattern).search(subject) in (True, False)


# Typical patterns (texts joined by ``.*``, dots, classes and loops, anchors, ``|``), each
# with a subject made of one alternative's texts and of text that fits between them, so
# that most match (SLRE's ``?`` and ``|`` may still refuse), or of the same texts mixed.
_WORDS = ["temp", "moscow", "a1", "x", "b.c", "9"]
_JOINS = {"": [""], ".*": ["", "x", "temp"], ".+": ["x", "ab"], ".": ["x", "."], "\\.": ["."],
          "[ab.]": ["a", "."], "\\d+": ["1", "12"], "\\w*": ["", "a1"], ".?": ["", "x"],
          "x*": ["", "xx"], ".*?": ["", "x"]}
_FILLER = ["", "", "x", ".", "1", "ab", " ", "temp", "\u00e9", "\x00", "\udcff"]


@st.composite
def typical_cases(draw):
    pieces, subjects = [], []
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        start, end = draw(st.sampled_from(["", "", "^"])), draw(st.sampled_from(["", "", "$"]))
        pattern, subject = start, "" if start else draw(st.sampled_from(_FILLER))
        for _ in range(draw(st.integers(1, 4))):
            join, word = draw(st.sampled_from(sorted(_JOINS))), draw(st.sampled_from(_WORDS))
            pattern += join + word
            subject += draw(st.sampled_from(_JOINS[join])) + word
        pieces.append(pattern + end)
        subjects.append(subject + ("" if end else draw(st.sampled_from(_FILLER))))
    pattern = "|".join(pieces)
    if draw(st.booleans()):
        return pattern, draw(st.sampled_from(subjects))
    texts = re.findall(r"[a-z0-9]+", pattern) + _FILLER
    return pattern, "".join(draw(st.lists(st.sampled_from(texts), max_size=6)))


@settings(max_examples=400, deadline=None)
@given(typical_cases())
def test_typical_patterns_equal_the_old_slre_matcher(case):
    """Every engine against the old SLRE matcher, on subjects likely to match, given
    as str (ASCII: the fast path; non-ASCII or with a NUL: converted) and as bytes."""
    pattern, subject = case
    compiled = zrex.compile(pattern)
    expected = slre_reference.search(pattern, subject)
    assert compiled.search(subject) is expected
    assert compiled.search(subject.encode("utf-8", "surrogateescape")) is expected


@given(st.sampled_from(["^\u00e9", "\u00e9$", ".\u00e9.*x", "^.$", "^..$", "[\u00e9]", "\u00e9|x",
                        "^a.*\u00e9", "\\w.*\u00e9"]),
       st.text(alphabet="a\u00e9x\x00\udcc3\udca9", max_size=6))
def test_non_ascii_subjects_are_matched_byte_by_byte(pattern, subject):
    """A non-ASCII subject is its UTF-8 bytes to SLRE (``^.$`` does not match "\u00e9")."""
    compiled = zrex.compile(pattern)
    expected = slre_reference.search(pattern, subject)
    assert compiled.search(subject) is expected
    assert compiled.search(subject.encode("utf-8", "surrogateescape")) is expected
    assert compiled.search(bytearray(subject.encode("utf-8", "surrogateescape"))) is expected


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
    valid, matched = _libczmq_search(pattern.encode(), subject.encode())
    compiled = zrex.compile(pattern)
    assert compiled.valid is valid
    assert compiled.search(subject) is matched


@pytest.mark.skipif(LIBCZMQ is None, reason="libczmq not installed")
@settings(max_examples=200, deadline=None)
@given(typical_cases())
def test_typical_patterns_agree_with_libczmq(case):
    pattern, subject = case
    assume(not _UNSAFE.search(pattern))
    raw = subject.encode("utf-8", "surrogateescape")
    valid, matched = _libczmq_search(pattern.encode(), raw)
    compiled = zrex.compile(pattern)
    assert valid is compiled.valid is True
    assert compiled.search(subject) is compiled.search(raw) is matched


def _libczmq_search(pattern, subject):
    handle = LIBCZMQ.zrex_new(pattern)
    try:
        return LIBCZMQ.zrex_valid(handle), LIBCZMQ.zrex_matches(handle, subject)
    finally:
        LIBCZMQ.zrex_destroy(ctypes.byref(ctypes.c_void_p(handle)))
