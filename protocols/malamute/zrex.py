"""Subject patterns in the czmq ``zrex`` (SLRE) dialect, as Malamute matches them.

SLRE is not a Perl/Python regex: ``?`` and ``|`` never backtrack once they
have matched, lazy loops skip ahead after a failed try, ``\\w`` has no ``_``,
``\\a`` means a letter, sets have no ranges, ``{n}`` and ``\\x61`` are literal
text, a search never starts at the end of the subject (so an empty subject
matches nothing unless the pattern starts with ``^``), and both strings stop
at their first NUL.  Python ``re`` cannot express that in general, so this
module parses a pattern into the same structure SLRE compiles (including its
odd cases, e.g. ``ab$*`` repeats the ``b`` after the ``$``) and matches with
SLRE's rules in time linear in the subject, whatever the pattern: a subscriber
picks the pattern, every published subject is searched with it on the reactor
thread, and a backtracking search (SLRE's, or Python ``re``'s on a translated
pattern) takes exponential time on ``a*a*a*a*b``. Most patterns need no more
than a text test or a lazy DFA (``Pattern`` says which engine gets which).

google-re2 was measured as the alternative and not taken: it cannot express
``?`` and ``|`` that never give back, and its Python binding costs 1-1.5 us per
call on a 22-byte subject where Python ``re`` takes 0.1-0.4 us.

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


# -- matching ----------------------------------------------------------------------------
# A search must cost time linear in the subject whatever the pattern: a subscriber chooses
# the pattern and every published subject is searched with it on the reactor thread.

# Patterns made only of single-character steps become these steps:
CHAR, REPEAT, OPTION, START, END = range(5)   # x, x* (greedy), x? (keeps what it took), ^, $


def _single(item):
    return item.kind == SET or (item.kind == LIT and len(item.value) == 1)


def _steps(program):
    """The program as single-character steps, or None when it has groups, alternatives,
    lazy loops or loops over more than one character."""
    steps = []
    for item in program.items:
        kind = item.kind
        if kind == LIT:
            steps.extend((CHAR, frozenset((byte,))) for byte in item.value)
        elif kind == SET:
            steps.append((CHAR, item.value))
        elif kind == BOL:
            steps.append((START, None))
        elif kind == EOL:
            steps.append((END, None))
        elif (kind == LOOP and item.loop in (STAR, PLUS, QUEST)
              and len(item.value.items) == 1 and _single(item.value.items[0])):
            piece = item.value.items[0]
            members = piece.value if piece.kind == SET else frozenset(piece.value)
            if item.loop == PLUS:
                steps.append((CHAR, members))
            steps.append((OPTION if item.loop == QUEST else REPEAT, members))
        else:
            return None
    return steps


def _simplify(steps, anchored):
    """Steps that match the same subjects with the loops a search never needs removed.

    A trailing ``x*`` or ``x?`` always succeeds. In an unanchored search, leading ``x*``
    loops in front of a step that consumes a byte may as well start later, and ``xx*``
    at the start matches where its last ``x`` does: so ``.*x`` is the text ``x``.
    """
    steps = list(steps)
    while steps and steps[-1][0] in (REPEAT, OPTION):
        steps.pop()
    if not anchored:
        first = 0
        while first < len(steps) and steps[first][0] == REPEAT:
            first += 1
        if first < len(steps) and steps[first][0] == CHAR:
            del steps[:first]
            while len(steps) > 1 and steps[1][0] == REPEAT and steps[1][1] <= steps[0][1]:
                del steps[1]
    return steps


def _literal(steps, anchored):
    """(kind, text) when the steps only test for a text: "exact" (``^text$``), "prefix"
    (``^text``), "suffix" (``text$``) or "contains" (``text``; "" = any non-empty subject)."""
    start = bool(steps) and steps[0][0] == START
    body = steps[start:]
    end = bool(body) and body[-1][0] == END
    if end:
        body = body[:-1]
    if any(op != CHAR or len(members) != 1 for op, members in body):
        return None
    text = bytes(next(iter(members)) for _, members in body)
    if not text and (start and not anchored or end and not start):
        return None        # "(^)", "$": they differ on "", where an unanchored search never starts
    return ("exact" if end else "prefix") if start else ("suffix" if end else "contains"), text


def _set_regex(members):
    members = sorted(members - {0})
    if not members:
        return b"(?!)"
    return b"[" + b"".join(re.escape(bytes((m,))) for m in members) + b"]"


_REGEX_STEP = {CHAR: b"", REPEAT: b"*", OPTION: b"?+"}


def _regex(steps, anchored):
    """A Python regex for the steps when its backtracking search is linear in the subject:
    no ``x*`` at all (every try costs at most one pass over the steps, ``?+`` never gives
    back), or one ``x*`` in a pattern tried at offset 0 only. Else None."""
    loops = sum(op == REPEAT for op, _ in steps)
    if loops > (1 if anchored else 0):
        return None
    out = [] if anchored else [b"(?=.)"]       # SLRE never starts a search at the end
    for op, members in steps:
        if op == START:
            out.append(b"\\A")
        elif op == END:
            out.append(b"\\Z")
        else:
            out.append(_set_regex(members) + _REGEX_STEP[op])
    return re.compile(b"".join(out), re.DOTALL)


MAX_DFA_STATES = 200        # cached states per pattern (each a 256-entry row); then start over
_MATCH = 0                  # the DFA state "matched already": absorbing


class _Dfa:
    """A lazily built DFA over single-character steps: one table lookup per subject byte.

    A state is the set of steps the pattern may stand before at the current offset (plus
    the first step at every offset of an unanchored search). SLRE's ``x?`` takes its byte
    whenever it can and never gives it back, so what a state does depends only on the next
    byte: exactly what a DFA transition knows. Rows are built on first use and at most
    MAX_DFA_STATES are kept (a pattern like ``.*a.....`` has exponentially many), so memory
    is bounded and each byte costs at most one pass over the steps.
    """

    __slots__ = ("steps", "anchored", "ids", "sets", "rows", "ends", "first")

    def __init__(self, steps, anchored):
        self.steps = steps
        self.anchored = anchored
        self._reset()

    def _reset(self):
        self.ids, self.sets, self.rows, self.ends = {}, [], [], []
        self.first = [-1] * 256               # transitions from offset 0
        self._intern(None)                    # _MATCH
        self.rows[_MATCH] = [_MATCH] * 256
        self.ends[_MATCH] = True

    def _intern(self, states):
        number = self.ids.get(states)
        if number is None:
            number = self.ids[states] = len(self.sets)
            self.sets.append(states)
            self.rows.append([-1] * 256)
            self.ends.append(None)
        return number

    def _close(self, states, byte, at_start):
        """Follow every step that consumes nothing, knowing the next byte (None: the end):
        None when the pattern has matched, else the steps standing after `byte`."""
        steps, last = self.steps, len(self.steps)
        after, seen, todo = set(), set(), list(states)
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            if i == last:
                return None
            op, members = steps[i]
            if op == CHAR:
                if byte is not None and byte in members:
                    after.add(i + 1)
            elif op == REPEAT:
                todo.append(i + 1)
                if byte is not None and byte in members:
                    after.add(i)
            elif op == OPTION:
                if byte is not None and byte in members:
                    after.add(i + 1)
                else:
                    todo.append(i + 1)
            elif op == START:
                if at_start:
                    todo.append(i + 1)
            elif byte is None:                # END
                todo.append(i + 1)
        return frozenset(after)

    def _target(self, closed):
        """The number of the state `closed` (None: matched); False as the second value
        when the cache had to start over, which renumbers every state."""
        if closed is None:
            return _MATCH, True
        number = self.ids.get(closed)
        if number is not None:
            return number, True
        if len(self.sets) >= MAX_DFA_STATES:
            self._reset()
            return self._intern(closed), False
        return self._intern(closed), True

    def _fill(self, state, byte):
        """Build (and keep) the transition from `state` on `byte` at an offset > 0."""
        states = self.sets[state]
        if not self.anchored:
            states = states | {0}              # an unanchored search starts at every offset
        target, kept = self._target(self._close(states, byte, False))
        if kept:
            self.rows[state][byte] = target
        return target

    def _start(self, byte):
        target, _ = self._target(self._close((0,), byte, True))
        self.first[byte] = target
        return target

    def search(self, s):
        if not s:
            return self.anchored and self._close((0,), None, True) is None
        state = self.first[s[0]]
        if state < 0:
            state = self._start(s[0])
        rows = self.rows
        for byte in s[1:]:
            target = rows[state][byte]
            if target < 0:
                target = self._fill(state, byte)
                rows = self.rows
            state = target
        end = self.ends[state]
        if end is None:
            end = self.ends[state] = self._close(self.sets[state], None, False) is None
        return end


class _Run:
    """One search of one subject with SLRE's own rules (groups, ``|``, lazy loops):
    memoised per (block, item, offset), and a loop's walk over its iterations memoised
    per (loop, offset), so every offset is visited a bounded number of times per item.

    Results are offsets: ``n >= 0`` matched up to ``n``; ``~n`` failed with the
    offset left at ``n`` (SLRE's lazy loops resume from there).
    """

    __slots__ = ("s", "memo", "walks")

    def __init__(self, subject):
        self.s = subject
        self.memo = {}
        self.walks = {}

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
                if result < 0 or i + 1 == len(items):
                    return result
                return self.run(block, i + 1, result)   # memoised: see below
            else:
                ofs = self._loop(block, i, item, ofs)
                if ofs < 0 or i + 1 == len(items):
                    return ofs
                # Go on through the memo, so that every (block, item, offset) steps
                # through at most one alternation or loop: linear work in all.
                return self.run(block, i + 1, ofs)
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
        walk = self._greedy if kind in (STAR, PLUS) else self._lazy
        found = walk(block, i, piece, ofs)
        return ofs if found is None else found

    def _greedy(self, block, i, piece, ofs):
        """SLRE's greedy loop from `ofs`: the last offset its iterations reach after which
        the rest of the block matches (None: none does). Iterations run until the piece
        fails or stops consuming; the answer for an offset is the answer for the next one
        if that has any, so it is memoised per offset and each offset is walked once."""
        walks, uid, path = self.walks, block.uid, []
        while True:
            key = (uid, i, ofs)
            if key in walks:
                found = walks[key]
                break
            end = self.run(piece, 0, ofs)
            if end < 0 or end == ofs:
                found = end if end >= 0 and self.run(block, i + 1, end) >= 0 else None
                walks[key] = found
                break
            path.append((ofs, end))
            ofs = end
        for ofs, end in reversed(path):
            if found is None and self.run(block, i + 1, end) >= 0:
                found = end
            walks[uid, i, ofs] = found
        return found

    def _lazy(self, block, i, piece, ofs):
        """SLRE's lazy loop from `ofs`: one more iteration, then the rest of the block; on
        failure it resumes where the rest failed. None: the piece failed at once."""
        walks, uid, path = self.walks, block.uid, []
        while True:
            key = (uid, i, ofs)
            if key in walks:
                found = walks[key]
                break
            end = self.run(piece, 0, ofs)
            if end < 0:
                found = walks[key] = None
                break
            rest = self.run(block, i + 1, end)
            if rest >= 0 or ~rest == ofs:
                found = walks[key] = end
                break
            path.append((ofs, end))
            ofs = ~rest
        for ofs, end in reversed(path):
            if found is None:
                found = end
            walks[uid, i, ofs] = found
        return found


_TEXT_TESTS = {
    "exact": lambda text: text.__eq__,
    "prefix": lambda text: lambda s: s.startswith(text),
    "suffix": lambda text: lambda s: s.endswith(text),
    "contains": lambda text: (lambda s: text in s) if text else bool,
}


def _compile_steps(steps, anchored):
    """(engine name, test of a NUL-free subject, (kind, text) or None) for the steps."""
    if anchored and (not steps or steps[0][0] != START):
        steps = [(START, None), *steps]     # "^a|b": b too is tried at offset 0 only
    steps = _simplify(steps, anchored)
    found = _literal(steps, anchored)
    if found is not None:
        return "literal", _TEXT_TESTS[found[0]](found[1]), found
    regex = _regex(steps, anchored)
    if regex is not None:
        return "regex", regex.match if anchored else regex.search, None
    return "dfa", _Dfa(steps, anchored).search, None


def _alternatives(program):
    """The steps of each alternative when the whole program is one ``a|b|c`` of
    single-character alternatives: nothing follows it, so SLRE's "first alternative
    wins" cannot change the answer and the search is any alternative's search."""
    if len(program.items) != 1 or program.items[0].kind != ALT:
        return None
    alternatives = [_steps(block) for block in program.items[0].value]
    return None if None in alternatives else alternatives


MAX_SUBJECT = 1024          # bytes of subject a pattern that is not plain text looks at


class Pattern:
    """A compiled zrex pattern; ``search(subject)`` tells whether a subject matches.

    Each pattern gets the cheapest engine that keeps SLRE's rules and is linear in the
    subject: a plain text test ("literal"), a Python regex whose backtracking is provably
    linear ("regex"), a lazy DFA for the other single-character patterns ("dfa"), the same
    per alternative of a top-level ``a|b`` ("alternatives"), or the memoised SLRE matcher
    for the rest: groups, nested ``|``, lazy loops ("slre").

    Subjects longer than ``max_subject`` bytes match only plain-text patterns (those cost
    one C-level scan); the others would cost up to tens of microseconds per byte. Malamute
    subjects are at most 255 bytes: only other doors' subjects are ever that long.

    ``key`` identifies what the pattern matches (equal keys, equal answers) and ``literal``
    is ``(kind, text)`` when it is a plain text test of the subject cut at its first NUL
    (kinds as in ``_literal``), else None: a stream groups and indexes readers by them.
    """

    __slots__ = ("pattern", "valid", "key", "literal", "engine", "max_subject", "_program",
                 "_anchored", "_test")

    def __init__(self, pattern, max_subject=MAX_SUBJECT):
        raw = pattern.encode("utf-8", "surrogateescape") if isinstance(pattern, str) else bytes(pattern)
        self.pattern = pattern
        program, anchored, self.valid = _parse(raw)
        self._program, self._anchored = program, anchored
        self.literal = None
        self.max_subject = max_subject
        steps, alternatives = _steps(program), None
        if steps is None:
            alternatives = _alternatives(program)
        if steps is not None:
            self.engine, self._test, found = _compile_steps(steps, anchored)
            if found is not None:
                self.max_subject = None
                try:
                    self.literal = (found[0], found[1].decode("utf-8"))
                except UnicodeDecodeError:
                    pass
        elif alternatives is not None:
            tests = [_compile_steps(a, anchored)[1] for a in alternatives]
            self.engine, self._test = "alternatives", lambda s: any(test(s) for test in tests)
        else:
            self.engine, self._test = "slre", self._slre
        self.key = (raw.split(b"\0", 1)[0], self.max_subject)

    def __repr__(self):
        return "zrex.Pattern(%r)" % (self.pattern,)

    def search(self, subject):
        """Whether the pattern matches the subject (``str`` or ``bytes``) as SLRE would."""
        if isinstance(subject, str):
            subject = subject.encode("utf-8", "surrogateescape")
        nul = subject.find(0)
        if nul >= 0:
            subject = subject[:nul]
        if self.max_subject is not None and len(subject) > self.max_subject:
            return False
        return bool(self._test(subject))

    def _slre(self, s):
        run = _Run(s)
        if self._anchored:
            return run.run(self._program, 0, 0) >= 0
        return any(run.run(self._program, 0, start) >= 0 for start in range(len(s)))


@lru_cache(maxsize=4096)
def compile(pattern, max_subject=MAX_SUBJECT):
    """Compile (and cache) a zrex pattern given as ``str`` or ``bytes``."""
    return Pattern(pattern, max_subject)


def valid(pattern):
    """True when SLRE compiles the pattern cleanly (what ``zrex_valid`` checks)."""
    return compile(pattern).valid
