"""Subject patterns in the czmq ``zrex`` (SLRE) dialect, as Malamute matches them.

SLRE is not a Perl/Python regex: ``?`` and ``|`` never backtrack once they
have matched, lazy loops skip ahead after a failed try, ``\\w`` has no ``_``,
``\\a`` means a letter, sets have no ranges, ``{n}`` and ``\\x61`` are literal
text, a search never starts at the end of the subject (so an empty subject
matches nothing unless the pattern starts with ``^``), and both strings stop
at their first NUL.  Python ``re`` cannot express that in general, so this
module parses a pattern into the same structure SLRE compiles (including its
odd cases, e.g. ``ab$*`` repeats the ``b`` after the ``$``) and runs it with a
small memoised matcher that follows SLRE's matching rules.  Patterns made only
of single-character steps (the usual ``temp.``, ``^a\\.b*$``) are translated to
an equivalent Python ``re`` for speed; the tests hold the two paths equal.

Where SLRE itself has no defined result we choose one:
- a repeated part that matches without consuming ends its loop (SLRE spins
  forever, hanging the broker's stream thread);
- an invalid pattern with an unclosed ``[`` at top level runs the part before
  it (that is what SLRE runs); every other invalid pattern (unclosed ``(``,
  stray ``)``, more than 256 bytes of SLRE code, a quantifier straight after
  ``|``) matches every non-empty subject, like the empty pattern.
"""

import re
from functools import lru_cache

__all__ = ["compile", "valid", "Pattern"]

_CODE_LIMIT = 256   # SLRE's compiled program and data arrays
_META = frozenset(b"|.^$*+?()[\\")

_SPACE = frozenset(b" \t\n\v\f\r")
_DIGIT = frozenset(b"0123456789")
_ALPHA = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_ALNUM = _ALPHA | _DIGIT
_BYTES = frozenset(range(256))
# escape letter -> (bytes it matches, the opcode byte SLRE stores in a set)
_CLASSES = {
    ord("s"): (_SPACE, 15), ord("S"): (_BYTES - _SPACE, 16),
    ord("d"): (_DIGIT, 17), ord("D"): (_BYTES - _DIGIT, 18),
    ord("a"): (_ALPHA, 19), ord("A"): (_BYTES - _ALPHA, 20),
    ord("w"): (_ALNUM, 21), ord("W"): (_BYTES - _ALNUM, 22),
}
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("0"): 0}

# item kinds
LIT, SET, BOL, EOL, ALT, LOOP = range(6)
# loop kinds
STAR, PLUS, STARQ, PLUSQ, QUEST = range(5)


class _Item:
    """One SLRE instruction: literal run, byte set, anchor, alternation or loop."""

    __slots__ = ("kind", "value", "loop")

    def __init__(self, kind, value=None, loop=None):
        self.kind, self.value, self.loop = kind, value, loop


class _Block:
    """A run of items ending where SLRE puts an END (piece, branch, program)."""

    __slots__ = ("items", "uid")

    def __init__(self, items, uid):
        self.items, self.uid = items, uid


class _Broken(Exception):
    """The pattern has no usable SLRE program."""


class _Parser:
    """Mirrors SLRE's single-pass compiler, tracking its code and data sizes."""

    def __init__(self, pattern):
        self.p = pattern
        self.i = 0
        self.code = 2           # OPEN 0
        self.data = 0
        self.unclosed_set = False
        self.blocks = 0

    def block(self, items):
        self.blocks += 1
        return _Block(items, self.blocks)

    def program(self):
        items = self.sequence(top=True)
        self.code += 3          # CLOSE 0, END
        return self.block(items)

    def sequence(self, top):
        p, alternatives, items = self.p, [], []
        last = None             # (index, literal run?) of SLRE's last_op
        stale = False           # a "|" moved the code last_op pointed at
        while self.i < len(p) and not self.unclosed_set:
            c = p[self.i]
            self.i += 1
            if c == 0x29:       # ")"
                if top:
                    raise _Broken("unbalanced )")
                self.i -= 1
                break
            if c == 0x5E:       # "^"
                items.append(_Item(BOL))
                self.code += 1
            elif c == 0x24:     # "$"
                items.append(_Item(EOL))
                self.code += 1
            elif c == 0x2E:     # "."
                last, stale = (len(items), False), False
                items.append(_Item(SET, _BYTES))
                self.code += 1
            elif c == 0x5B:     # "["
                last, stale = (len(items), False), False
                item = self.charset()
                if item is not None:
                    items.append(item)
            elif c == 0x5C:     # "\"
                last, stale = (len(items), False), False
                items.append(self.escape())
            elif c == 0x28:     # "("
                last, stale = (len(items), False), False
                self.code += 2
                items.extend(self.sequence(top=False))
                if self.i >= len(p) or p[self.i] != 0x29:
                    raise _Broken("unclosed (")
                self.i += 1
                self.code += 2
            elif c in (0x2A, 0x2B):  # "*" "+"
                lazy = self.i < len(p) and p[self.i] == 0x3F
                self.i += lazy
                kind = (STARQ if lazy else STAR) if c == 0x2A else (PLUSQ if lazy else PLUS)
                last = self.quantify(items, last, stale, kind)
            elif c == 0x3F:     # "?"
                last = self.quantify(items, last, stale, QUEST)
            elif c == 0x7C:     # "|"
                self.code += 4 + bool(alternatives)
                alternatives.append(items)
                items, last, stale = [], None, True
            else:
                start = self.i - 1
                while self.i < len(p) and p[self.i] not in _META:
                    self.i += 1
                last, stale = (len(items), True), False
                items.append(_Item(LIT, p[start:self.i]))
                self.code += 3
                self.data += self.i - start
        if not alternatives:
            return items
        alternatives.append(items)
        self.code += 1          # the END that closes the last alternative
        return [_Item(ALT, [self.block(a) for a in alternatives])]

    def quantify(self, items, last, stale, kind):
        if stale:
            raise _Broken("quantifier straight after |")
        start, literal = last if last is not None else (0, False)
        run = items[start] if start < len(items) else None
        if literal and run.kind == LIT and len(run.value) > 1:
            items[start] = _Item(LIT, run.value[:-1])
            items.append(_Item(LIT, run.value[-1:]))
            self.code += 3
            piece_start = len(items) - 1
        else:
            piece_start, literal = start, False
        piece = self.block(items[piece_start:])
        del items[piece_start:]
        items.append(_Item(LOOP, piece, kind))
        self.code += 3          # the loop opcode, its offset, the piece's END
        return (start, literal)

    def escape(self):
        p = self.p
        if self.i >= len(p):    # SLRE reads the terminating NUL as the char
            c = 0
        else:
            c = p[self.i]
            self.i += 1
        cls = _CLASSES.get(c)
        if cls is not None:
            self.code += 1
            return _Item(SET, cls[0])
        self.code += 3
        self.data += 1
        return _Item(LIT, bytes((_ESCAPES.get(c, c),)))

    def charset(self):
        p, members = self.p, set()
        negate = self.i < len(p) and p[self.i] == 0x5E
        self.i += negate
        while self.i < len(p):
            c = p[self.i]
            self.i += 1
            if c == 0x5D:       # "]"
                self.code += 3
                return _Item(SET, frozenset(_BYTES - members if negate else members))
            if c == 0x5C and self.i < len(p):
                c = p[self.i]
                self.i += 1
                cls = _CLASSES.get(c)
                if cls is not None:     # stored as the bytes 0, opcode: SLRE's quirk
                    members.update((0, cls[1]))
                    self.data += 2
                    continue
                c = _ESCAPES.get(c, c)
            members.add(c)
            self.data += 1
        self.i = len(p)
        self.unclosed_set = True
        return None


def _parse(pattern):
    """Return (program block, anchored, valid)."""
    nul = pattern.find(0)
    if nul >= 0:
        pattern = pattern[:nul]
    parser = _Parser(pattern)
    try:
        program = parser.program()
    except _Broken:
        return _Block([], 0), False, False
    if parser.code > _CODE_LIMIT or parser.data > _CODE_LIMIT:
        return _Block([], 0), False, False
    return program, pattern[:1] == b"^", not parser.unclosed_set


def _single(item):
    return item.kind == SET or (item.kind == LIT and len(item.value) == 1)


def _set_regex(members):
    members = sorted(members - {0})
    if not members:
        return b"(?!)"
    return b"[" + b"".join(re.escape(bytes((m,))) for m in members) + b"]"


_SUFFIX = {STAR: b"*", PLUS: b"+", QUEST: b"?+"}


def _translate(program, anchored):
    """An equivalent Python regex, or None when SLRE's rules could differ."""
    out = [] if anchored else [b"(?=.)"]   # SLRE never starts a search at the end
    for item in program.items:
        if item.kind == LIT:
            out.append(re.escape(item.value))
        elif item.kind == SET:
            out.append(_set_regex(item.value))
        elif item.kind == BOL:
            out.append(b"\\A")
        elif item.kind == EOL:
            out.append(b"\\Z")
        elif item.kind == LOOP and item.loop in _SUFFIX and len(item.value.items) == 1 \
                and _single(item.value.items[0]):
            piece = item.value.items[0]
            atom = re.escape(piece.value) if piece.kind == LIT else _set_regex(piece.value)
            out.append(atom + _SUFFIX[item.loop])
        else:
            return None
    return re.compile(b"".join(out), re.DOTALL)


class _Run:
    """One search of one subject: SLRE's matcher, memoised per (block, item, offset).

    Results are offsets: ``n >= 0`` matched up to ``n``; ``~n`` failed with the
    offset left at ``n`` (SLRE's lazy loops resume from there).
    """

    __slots__ = ("s", "memo")

    def __init__(self, subject):
        self.s = subject
        self.memo = {}

    def run(self, block, i, ofs):
        key = (block.uid, i, ofs)
        result = self.memo.get(key)
        if result is None:
            result = self.memo[key] = self._run(block, i, ofs)
        return result

    def _run(self, block, i, ofs):
        s, items = self.s, block.items
        while i < len(items):
            item = items[i]
            kind = item.kind
            if kind == SET:
                if ofs >= len(s) or s[ofs] not in item.value:
                    return ~ofs
                ofs += 1
            elif kind == LIT:
                if not s.startswith(item.value, ofs):
                    return ~ofs
                ofs += len(item.value)
            elif kind == BOL:
                if ofs:
                    return ~ofs
            elif kind == EOL:
                if ofs != len(s):
                    return ~ofs
            elif kind == ALT:
                for alternative in item.value:
                    result = self.run(alternative, 0, ofs)
                    if result >= 0:
                        break
                if result < 0:
                    return result
                ofs = result
            else:
                ofs = self._loop(block, i, item, ofs)
                if ofs < 0:
                    return ofs
            i += 1
        return ofs

    def _loop(self, block, i, item, ofs):
        piece, kind = item.value, item.loop
        if kind == QUEST:
            result = self.run(piece, 0, ofs)
            return result if result >= 0 else ofs
        if kind in (PLUS, PLUSQ):
            ofs = self.run(piece, 0, ofs)
            if ofs < 0:
                return ofs
        if kind in (STAR, PLUS):
            matched = ofs
            while True:
                end = self.run(piece, 0, ofs)
                if end < 0:
                    return matched
                if self.run(block, i + 1, end) >= 0:
                    matched = end
                if end == ofs:
                    return matched
                ofs = end
        saved = ofs
        while True:
            end = self.run(piece, 0, ofs)
            if end < 0:
                return saved
            saved = end
            rest = self.run(block, i + 1, end)
            if rest >= 0:
                return saved
            if ~rest == ofs:
                return saved
            ofs = ~rest


class Pattern:
    """A compiled zrex pattern; ``search`` tells whether a subject matches."""

    __slots__ = ("pattern", "valid", "_program", "_anchored", "_regex", "search")

    def __init__(self, pattern):
        raw = pattern.encode("utf-8", "surrogateescape") if isinstance(pattern, str) else bytes(pattern)
        self.pattern = pattern
        self._program, self._anchored, self.valid = _parse(raw)
        self._regex = _translate(self._program, self._anchored)
        if not self._program.items:
            self.search = self._search_empty
        elif self._regex is None:
            self.search = self._search_slre
        elif self._anchored:
            self.search = self._search_anchored_regex
        else:
            self.search = self._search_regex

    def __repr__(self):
        return "zrex.Pattern(%r)" % (self.pattern,)

    @staticmethod
    def _subject(subject):
        if isinstance(subject, str):
            subject = subject.encode("utf-8", "surrogateescape")
        nul = subject.find(0)
        return subject if nul < 0 else subject[:nul]

    def _search_empty(self, subject):
        return bool(self._subject(subject))

    def _search_regex(self, subject):
        return self._regex.search(self._subject(subject)) is not None

    def _search_anchored_regex(self, subject):
        return self._regex.match(self._subject(subject)) is not None

    def _search_slre(self, subject):
        s = self._subject(subject)
        run = _Run(s)
        if self._anchored:
            return run.run(self._program, 0, 0) >= 0
        return any(run.run(self._program, 0, start) >= 0 for start in range(len(s)))

    def search_slre(self, subject):
        """Always use the SLRE matcher (the tests compare it with ``search``)."""
        return self._search_slre(subject)


@lru_cache(maxsize=4096)
def compile(pattern):
    """Compile (and cache) a zrex pattern given as ``str`` or ``bytes``."""
    return Pattern(pattern)


def valid(pattern):
    """True when SLRE compiles the pattern cleanly (what ``zrex_valid`` checks)."""
    return compile(pattern).valid
