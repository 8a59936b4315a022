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
than a text test or a Python regex of a shape whose backtracking is linear;
``Pattern`` says which engine gets which. Typical patterns cost 0.1-0.3 us on a
22-byte subject, less than the plain regex translation they replaced.

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
import sys
from functools import lru_cache

__all__ = ["compile", "valid", "Pattern"]

_CODE_LIMIT = 256   # SLRE's compiled program and data arrays
_META = frozenset(b"|.^$*+?()[\\")

_SPACE = frozenset(b" \t\n\v\f\r")
_DIGIT = frozenset(b"0123456789")
_ALPHA = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_ALNUM = _ALPHA | _DIGIT
_BYTES = frozenset(range(256))
_ANY = _BYTES - {0}         # what "." is in a subject cut at its first NUL
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


def _single(item):
    return item.kind == SET or (item.kind == LIT and len(item.value) == 1)


class _Block:
    """A run of items ending where SLRE puts an END (piece, branch, program)."""

    __slots__ = ("items", "uid", "single")

    def __init__(self, items, uid):
        self.items, self.uid = items, uid
        first = items[0] if len(items) == 1 else None      # one byte test: matched inline
        self.single = None if first is None or not _single(first) else (
            first.value if first.kind == SET else frozenset(first.value))


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


def _item_steps(item):
    """One item as single-character steps, or None when it is not that simple."""
    kind = item.kind
    if kind == LIT:
        return [(CHAR, frozenset((byte,))) for byte in item.value]
    if kind == SET:
        return [(CHAR, item.value)]
    if kind == BOL:
        return [(START, None)]
    if kind == EOL:
        return [(END, None)]
    if (kind == LOOP and item.loop in (STAR, PLUS, QUEST)
            and len(item.value.items) == 1 and _single(item.value.items[0])):
        piece = item.value.items[0]
        members = piece.value if piece.kind == SET else frozenset(piece.value)
        loop = [(OPTION if item.loop == QUEST else REPEAT, members)]
        return [(CHAR, members), *loop] if item.loop == PLUS else loop
    return None


def _steps(block):
    """The block as single-character steps, or None when it has groups, alternatives,
    lazy loops or loops over more than one character."""
    steps = []
    for item in block.items:
        more = _item_steps(item)
        if more is None:
            return None
        steps.extend(more)
    return steps


MAX_EXPANSIONS = 16         # step sequences one pattern may become


def _expand(block):
    """The block as a union of step sequences, or None. An ``a|b`` inside it becomes one
    sequence per alternative when SLRE's "the first alternative that matches wins"
    cannot matter: each alternative is a non-empty run of single bytes or sets with no
    loop, and no two can start with the same byte, so at most one matches where it
    stands: ``(temp|rain)x`` is ``tempx`` or ``rainx``."""
    sequences = [[]]
    for item in block.items:
        if item.kind != ALT:
            more = _item_steps(item)
            if more is None:
                return None
            for sequence in sequences:
                sequence.extend(more)
            continue
        choices = [_steps(alternative) for alternative in item.value]
        if any(not choice or any(op != CHAR for op, _ in choice) for choice in choices):
            return None
        firsts = [choice[0][1] for choice in choices]
        if sum(map(len, firsts)) != len(frozenset().union(*firsts)):
            return None
        if len(sequences) * len(choices) > MAX_EXPANSIONS:
            return None
        sequences = [sequence + choice for sequence in sequences for choice in choices]
    return sequences


def _simplify(steps, anchored):
    """Steps that match the same subjects with the loops a search never needs removed.

    A trailing ``x*`` or ``x?`` always succeeds, and so does a trailing ``.*$``. In an
    unanchored search, leading ``x*`` loops in front of a step that consumes a byte may as
    well start later, and ``xx*`` at the start matches where its last ``x`` does: so
    ``.*x`` is the text ``x``.
    """
    steps = list(steps)
    while steps:
        if steps[-1][0] in (REPEAT, OPTION):
            steps.pop()
        elif steps[-1][0] == END and len(steps) > 1 and steps[-2][0] == REPEAT \
                and steps[-2][1] >= _ANY:
            del steps[-2:]
        else:
            break
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


def _set_source(members):
    """Python regex source for one byte of `members`, over text of one char per byte."""
    members = members - {0}
    if members >= _ANY:
        return "."                                  # compiled with DOTALL
    if len(members) == 1:
        return re.escape(chr(next(iter(members))))
    if not members:
        return "(?!)"
    negate = len(members) > 128
    chars = "".join(re.escape(chr(m)) for m in sorted(_ANY - members if negate else members))
    return ("[^%s]" if negate else "[%s]") % chars


_QUANTIFIER = {CHAR: "", REPEAT: "*", OPTION: "?+"}


def _source(steps):
    """The steps as Python regex source: ``x?`` never gives back (possessive ``?+``)."""
    out = []
    for op, members in steps:
        if op == START:
            out.append(r"\A")
        elif op == END:
            out.append(r"\Z")
        else:
            out.append(_set_source(members) + _QUANTIFIER[op])
    return "".join(out)


def _guard(steps, anchored):
    """``(?=.)`` when the steps may match empty in an unanchored search, which never
    starts at the end of the subject; nothing when they consume a byte anyway."""
    return "" if anchored or any(op == CHAR for op, _ in steps) else "(?=.)"


def _regex(steps, anchored):
    """Regex source whose backtracking search is linear in the subject, or None.

    With no ``x*`` every try costs at most one pass over the steps (``?+`` never gives
    back); with one ``x*`` in steps tried at offset 0 only, one try gives the loop back
    at most once per subject byte, each time checking the steps after it once.
    """
    loops = sum(op == REPEAT for op, _ in steps)
    if loops > (1 if steps and steps[0][0] == START else 0):
        return None
    return _guard(steps, anchored) + _source(steps)


def _runs(steps):
    """(start, end, runs) for steps that are runs of single-byte steps (fixed length, no
    loops) joined by ``.*``, with ``^`` (start) and ``$`` (end) around, or None.

    The ``.*`` between two runs may cover any bytes, so a match exists exactly when each
    run can be placed after the previous one ends; placing each where it ends first (the
    first place it matches, as it has a fixed length) leaves the most room for the rest.
    The ``.*`` SLRE loops over are greedy, but with only runs after them their greed
    changes which match is found, not whether.
    """
    start = bool(steps) and steps[0][0] == START
    end = len(steps) > start and steps[-1][0] == END
    runs, run = [], []
    for op, members in steps[start:len(steps) - end]:
        if op == CHAR:
            run.append((op, members))
        elif op == REPEAT and members >= _ANY:
            runs.append(run)
            run = []
        else:
            return None
    runs.append(run)
    return (start, end, runs) if len(runs) > 1 else None


def _texts(start, end, runs):
    """The texts of unanchored runs that are all plain text (``temp.*moscow``), or None."""
    if start or end or any(len(members) != 1 for run in runs for _, members in run):
        return None
    return tuple(bytes(next(iter(members)) for _, members in run).decode("latin-1")
                 for run in runs if run)


def _gap(start, end, runs, anchored):
    """Regex source matched from offset 0 for the runs (see _runs): ``\\A(?>.*?run)``
    finds where a run first ends from where the previous one ended and the atomic group
    never gives that back, so each run is looked for once: a try per offset, each at most
    one pass over the run. The last run, when it must end the subject (``$``), is tried
    at every offset from there instead."""
    out = [_guard([step for run in runs for step in run], anchored), r"\A"]
    if start:
        out.append(_source(runs[0]))
    out.extend("(?>.*?%s)" % _source(run) for run in runs[start:-1] if run)
    if end:
        out.append(".*?%s\\Z" % _source(runs[-1]))
    elif runs[-1]:
        out.append("(?>.*?%s)" % _source(runs[-1]))
    return "".join(out)


MAX_DFA_STATES = 64         # cached states per pattern (a 256-byte row each); then start over
_UNBUILT = 255              # a transition not computed yet (state numbers stay below it)
_MATCH = 0                  # the DFA state "matched already": absorbing


class _Dfa:
    """A lazily built DFA over single-character steps: one table lookup per subject byte.

    A state is the set of steps the pattern may stand before at the current offset (plus
    the first step at every offset of an unanchored search). SLRE's ``x?`` takes its byte
    whenever it can and never gives it back, so what a state does depends only on the next
    byte: exactly what a DFA transition knows. Rows are built on first use and at most
    MAX_DFA_STATES are kept (a pattern like ``.*a.....`` has exponentially many), so a
    pattern's DFA never holds more than 16 KiB and each byte costs at most one pass over
    the steps.
    """

    __slots__ = ("steps", "anchored", "ids", "sets", "rows", "ends", "first")

    def __init__(self, steps, anchored):
        self.steps = steps
        self.anchored = anchored
        self._reset()

    def _reset(self):
        self.ids, self.sets, self.rows, self.ends = {}, [], [], []
        self.first = bytearray([_UNBUILT]) * 256    # transitions from offset 0
        self._intern(None)                    # _MATCH
        self.rows[_MATCH] = bytearray([_MATCH]) * 256
        self.ends[_MATCH] = True

    def _intern(self, states):
        number = self.ids.get(states)
        if number is None:
            number = self.ids[states] = len(self.sets)
            self.sets.append(states)
            self.rows.append(bytearray([_UNBUILT]) * 256)
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
        if state == _UNBUILT:
            state = self._start(s[0])
        rows = self.rows
        for byte in s[1:]:
            target = rows[state][byte]
            if target == _UNBUILT:
                target = self._fill(state, byte)
                rows = self.rows
            state = target
        end = self.ends[state]
        if end is None:
            end = self.ends[state] = self._close(self.sets[state], None, False) is None
        return end


def _first(block):
    """(bytes a match of the block can start with, whether it can match empty), for the
    block read as an ordinary regex (``?`` and ``|`` that may give back, loops of any
    count): that matches whatever SLRE matches, so its first bytes are a safe filter."""
    first, empty = set(), True
    for item in block.items:
        kind = item.kind
        if kind == SET:
            first |= item.value
            return frozenset(first), False
        if kind == LIT:
            first.add(item.value[0])
            return frozenset(first), False
        if kind == ALT:
            parts = [_first(alternative) for alternative in item.value]
            for part, _ in parts:
                first |= part
            if not any(part_empty for _, part_empty in parts):
                return frozenset(first), False
        elif kind == LOOP:
            part, part_empty = _first(item.value)
            first |= part
            if item.loop in (PLUS, PLUSQ) and not part_empty:
                return frozenset(first), False
    return frozenset(first), empty


class _Columns:
    """SLRE's own matcher (groups, ``|``, lazy loops) as dynamic programming over offsets.

    What SLRE answers at an item of a block depends only on the offset: the offset the
    block's match ends at (``n >= 0``), or ``~n`` for a failure at offset ``n`` (SLRE's
    lazy loops resume from there). Each item's answers for every offset of the subject
    form a column, computed from the columns of the items after it and of its pieces and
    alternatives at the same or later offsets; so the columns are filled item by item,
    pieces and later items first, each offset once: time and memory are
    (items + 1) x (subject + 1), whatever the pattern, with no recursion.

    A greedy loop's answer at an offset is the last offset its iterations reach after
    which the rest of the block matches; a lazy loop's is the first such iteration,
    resuming after a failure where the rest failed. Both follow from the same answer at
    the offset the next iteration starts from, which is larger: right to left, one pass.
    """

    __slots__ = ("order", "columns", "top", "anchored", "others")

    def __init__(self, program, anchored):
        self.order = []                  # (item, column, next column, piece/alternatives)
        self.columns = 0
        self.anchored = anchored
        self.top = self._block(program)
        first, empty = _first(program)
        # Bytes no match can start with (None: a match may be empty): a subject with none
        # of the others, or an anchored one that starts with one, is answered at once.
        self.others = None if empty else bytes(sorted(_BYTES - first))

    def _block(self, block):
        """Plan a block's columns (its last first); returns its first item's column."""
        column = self._new()                         # the end of the block: offsets as-is
        self.order.append((None, column, None, None))
        for item in reversed(block.items):
            nxt, column = column, self._new()
            if item.kind == ALT:
                parts = [self._block(alternative) for alternative in item.value]
            elif item.kind == LOOP:
                piece = item.value
                parts = piece.single if piece.single is not None else self._block(piece)
            else:
                parts = None
            self.order.append((item, column, nxt, parts))
        return column

    def _new(self):
        self.columns += 1
        return self.columns - 1

    def search(self, s):
        others = self.others
        if others is not None:
            if self.anchored:
                if not s or s[0] in others:
                    return False
            elif not s.translate(None, others):
                return False
        n = len(s)
        offsets = range(n + 1)
        columns = [None] * self.columns
        for item, column, nxt, parts in self.order:
            if item is None:
                columns[column] = list(offsets)
                continue
            after, kind = columns[nxt], item.kind
            if kind == SET:
                members = item.value
                result = [after[o + 1] if s[o] in members else ~o for o in range(n)]
                result.append(~n)
            elif kind == LIT:
                text, size = item.value, len(item.value)
                result = [after[o + size] if s.startswith(text, o) else ~o for o in offsets]
            elif kind == BOL:
                result = [~o for o in offsets]
                result[0] = after[0]
            elif kind == EOL:
                result = [~o for o in offsets]
                result[n] = after[n]
            elif kind == ALT:
                result = self._alternatives([columns[c] for c in parts], after, n)
            else:
                result = self._loop(item.loop, self._piece(s, parts, columns), after, n)
            columns[column] = result
        answers = columns[self.top]
        if self.anchored:
            return answers[0] >= 0
        return any(answers[o] >= 0 for o in range(n))

    @staticmethod
    def _piece(s, parts, columns):
        """One iteration of the loop's piece from each offset."""
        if type(parts) is int:
            return columns[parts]
        n = len(s)
        result = [o + 1 if s[o] in parts else ~o for o in range(n)]
        result.append(~n)
        return result

    @staticmethod
    def _alternatives(alternatives, after, n):
        """The first alternative that matches wins; else the last one's failure."""
        result = []
        for o in range(n + 1):
            for column in alternatives:
                end = column[o]
                if end >= 0:
                    break
            result.append(after[end] if end >= 0 else end)
        return result

    @staticmethod
    def _loop(kind, piece, after, n):
        result = [0] * (n + 1)
        if kind == QUEST:
            for o in range(n + 1):
                end = piece[o]
                result[o] = after[end if end >= 0 else o]
            return result
        found = [None] * (n + 1)     # the loop's answer from an iteration starting at o
        greedy = kind in (STAR, PLUS)
        for o in range(n, -1, -1):
            end = piece[o]
            if end < 0:
                here = None
            elif greedy:
                if end == o:
                    here = end if after[end] >= 0 else None
                else:
                    here = found[end]
                    if here is None and after[end] >= 0:
                        here = end
            else:
                rest = after[end]
                if rest >= 0 or ~rest == o:
                    here = end
                else:
                    here = found[~rest]
                    if here is None:
                        here = end
            found[o] = here
            if kind in (PLUS, PLUSQ):
                if end < 0:
                    result[o] = end
                    continue
                start = end
            else:
                start = o
            answer = found[start]
            result[o] = after[start if answer is None else answer]
        return result


# -- searching a subject ------------------------------------------------------------------
# SLRE reads a subject as bytes up to its first NUL. The engines read it as text of one
# character per byte (latin-1), so that the usual subject, an ASCII str without NUL (the
# core's subjects are str), is that text already: no encoding, no copy. Any other subject is
# converted by _text. A character above 127 never occurs in an ASCII subject, so a pattern
# byte above 127 simply never matches one, as in bytes. Each search function below begins
# with that one test, written out, as a call would cost more than the match on short subjects.

def _text(subject):
    """The subject as SLRE reads it: its bytes (a str's UTF-8, with surrogateescape) up to
    the first NUL, one character per byte."""
    if isinstance(subject, str):
        if "\0" in subject:
            subject = subject[:subject.index("\0")]
        try:
            return subject.encode().decode("latin-1")
        except UnicodeEncodeError:      # lone surrogates: the bytes surrogateescape kept
            return subject.encode("utf-8", "surrogateescape").decode("latin-1")
    text = subject.decode("latin-1")
    if "\0" in text:
        text = text[:text.index("\0")]
    return text


def _exact(text):
    def search(subject):
        if subject.__class__ is not str or not subject.isascii() or "\0" in subject:
            subject = _text(subject)
        return subject == text
    return search


def _prefix(text):
    def search(subject):
        if subject.__class__ is not str or not subject.isascii() or "\0" in subject:
            subject = _text(subject)
        return subject.startswith(text)
    return search


def _suffix(text):
    def search(subject):
        if subject.__class__ is not str or not subject.isascii() or "\0" in subject:
            subject = _text(subject)
        return subject.endswith(text)
    return search


def _contains(text):
    def search(subject):
        if subject.__class__ is not str or not subject.isascii() or "\0" in subject:
            subject = _text(subject)
        return text in subject if text else subject != ""
    return search


def _any_text(texts, limit):
    def search(subject):
        if subject.__class__ is not str or not subject.isascii() or "\0" in subject:
            subject = _text(subject)
        if len(subject) > limit:
            return False
        for text in texts:
            if text in subject:
                return True
        return False
    return search


def _in_order(texts, limit):
    """Each text found where it first fits after the previous one (see _runs): each
    ``find`` reads on from where the last one's text ended, so together they read the
    subject once, each byte at most once per character of the text looked for. Two texts
    (``temp.*moscow``, the usual case) are two finds without the loop: a quarter less."""
    if len(texts) == 2:
        first, second = texts
        size = len(first)

        def search(subject):
            if subject.__class__ is not str or not subject.isascii() or "\0" in subject:
                subject = _text(subject)
            if len(subject) > limit:
                return False
            at = subject.find(first)
            return at >= 0 and subject.find(second, at + size) >= 0
        return search
    texts = tuple((text, len(text)) for text in texts)

    def search(subject):
        if subject.__class__ is not str or not subject.isascii() or "\0" in subject:
            subject = _text(subject)
        if len(subject) > limit:
            return False
        at = 0
        for text, size in texts:
            at = subject.find(text, at)
            if at < 0:
                return False
            at += size
        return True
    return search


def _regex_test(find, limit):
    """`find` is a compiled regex's search or match."""
    def search(subject):
        if subject.__class__ is not str or not subject.isascii() or "\0" in subject:
            subject = _text(subject)
        return len(subject) <= limit and find(subject) is not None
    return search


def _call(test, limit):
    """`test(text)` is any engine's."""
    def search(subject):
        if subject.__class__ is not str or not subject.isascii() or "\0" in subject:
            subject = _text(subject)
        return len(subject) <= limit and test(subject)
    return search


def _on_bytes(search):
    """An engine that reads bytes (the DFA, the general matcher) as a test of text."""
    return lambda text: search(text.encode("latin-1"))


_TEXT_TESTS = {"exact": _exact, "prefix": _prefix, "suffix": _suffix, "contains": _contains}


class _Plan:
    """How one step sequence is searched: `engine` (its name), `kind` and `arg` (see
    _searcher), `literal` ((kind, text bytes) for plain text tests) and `source` (regex
    source that searches it linearly, or None)."""

    __slots__ = ("engine", "kind", "arg", "literal", "source")

    def __init__(self, engine, kind, arg, literal=None, source=None):
        self.engine, self.kind, self.arg = engine, kind, arg
        self.literal, self.source = literal, source


def _plan(steps, anchored):
    """The cheapest linear engine for the steps: a text test, texts in order, a gap
    regex, a regex, a lazy DFA."""
    if anchored and (not steps or steps[0][0] != START):
        steps = [(START, None), *steps]     # "^a|b": b too is tried at offset 0 only
    steps = _simplify(steps, anchored)
    found = _literal(steps, anchored)
    source = _regex(steps, anchored)
    if found is not None:
        return _Plan("literal", found[0], found[1].decode("latin-1"), found, source)
    runs = _runs(steps)
    if runs is not None:
        gap = _gap(*runs, anchored)
        texts = _texts(*runs)
        if texts is not None:
            return _Plan("texts", "in order", texts, source=gap)
        return _Plan("gap", "match", gap, source=gap)
    if source is not None:
        at_start = bool(steps) and steps[0][0] == START
        return _Plan("regex", "match" if at_start else "search", source, source=source)
    return _Plan("dfa", "call", _on_bytes(_Dfa(steps, anchored).search))


def _union(plans):
    """One test for a top-level ``a|b``: the texts' ``in`` tests when every alternative
    is a contained text, else one regex of the alternatives when each has one (Python's
    search tries every alternative at every offset: the sum of their linear costs), else
    each alternative's own test."""
    if all(plan.kind == "contains" and plan.arg for plan in plans):
        return "any text", tuple(plan.arg for plan in plans)
    if all(plan.source is not None for plan in plans):
        return "search", "|".join("(?:%s)" % plan.source for plan in plans)
    tests = [_test(plan) for plan in plans]
    return "call", lambda text: any(test(text) for test in tests)


def _test(plan):
    """A plan's test of a subject already read as text: its regex where it has one."""
    if plan.source is None:
        return plan.arg
    search = re.compile(plan.source, re.DOTALL).search
    return lambda text: search(text) is not None


def _searcher(kind, arg, limit):
    """search(subject) for a plan: a text test of `arg` ("exact", "prefix", "suffix",
    "contains"), any of the texts `arg` ("any text") or all of them in that order ("in
    order"), the regex source `arg` matched at offset 0 or searched ("match", "search"),
    or `arg(text)` ("call"). Past `limit` characters only text tests may say True."""
    if kind in _TEXT_TESTS:
        return _TEXT_TESTS[kind](arg)
    limit = sys.maxsize if limit is None else limit
    if kind == "any text":
        return _any_text(arg, limit)
    if kind == "in order":
        return _in_order(arg, limit)
    if kind == "call":
        return _call(arg, limit)
    regex = re.compile(arg, re.DOTALL)
    return _regex_test(regex.match if kind == "match" else regex.search, limit)


def _alternatives(program):
    """The step sequences of a program that is one top-level ``a|b|c``: nothing follows
    it, so SLRE's "first alternative wins" cannot change the answer and the search is
    any alternative's search (each alternative may itself expand, see _expand)."""
    if len(program.items) != 1 or program.items[0].kind != ALT:
        return None
    sequences = []
    for alternative in program.items[0].value:
        more = _expand(alternative)
        if more is None or len(sequences) + len(more) > MAX_EXPANSIONS:
            return None
        sequences.extend(more)
    return sequences


MAX_SUBJECT = 1024          # bytes of subject a pattern that is not plain text looks at


class Pattern:
    """A compiled zrex pattern; ``search(subject)`` (``str`` or ``bytes``) tells whether a
    subject matches, as SLRE would.

    Each pattern gets the cheapest engine that keeps SLRE's rules and is linear in the
    subject, each linear by construction (see its function): a plain text test
    ("literal"); texts joined by ``.*``, each found once after the previous one ("texts",
    _in_order); runs of single bytes joined by ``.*`` as a regex that places each run
    once ("gap", _gap); a Python regex whose backtracking is provably linear ("regex",
    _regex); a lazy DFA for the other single-character patterns ("dfa"); one test for a
    top-level ``a|b`` of those ("alternatives", _union); or the column-by-column SLRE
    matcher for the rest: groups, nested ``|``, lazy loops ("slre").

    Subjects longer than ``max_subject`` bytes match only plain-text patterns (those cost
    one C-level scan); the others would cost up to tens of microseconds per byte. Malamute
    subjects are at most 255 bytes: only other doors' subjects are ever that long.

    ``key`` identifies what the pattern matches (equal keys, equal answers) and ``literal``
    is ``(kind, text)`` when it is a plain text test of the subject cut at its first NUL
    (kinds as in ``_literal``), else None: a stream groups and indexes readers by them.
    """

    __slots__ = ("pattern", "valid", "key", "literal", "engine", "max_subject", "search",
                 "_program")

    def __init__(self, pattern, max_subject=MAX_SUBJECT):
        raw = pattern.encode("utf-8", "surrogateescape") if isinstance(pattern, str) else bytes(pattern)
        self.pattern = pattern
        program, anchored, self.valid = _parse(raw)
        self._program = program
        self.literal = None
        self.max_subject = max_subject
        sequences = _expand(program)
        if sequences is None:
            sequences = _alternatives(program)
        if sequences is not None and len(sequences) == 1:
            plan = _plan(sequences[0], anchored)
            self.engine, kind, arg = plan.engine, plan.kind, plan.arg
            if plan.literal is not None:
                self.max_subject = None
                try:
                    self.literal = (plan.literal[0], plan.literal[1].decode("utf-8"))
                except UnicodeDecodeError:
                    pass
        elif sequences is not None:
            self.engine = "alternatives"
            kind, arg = _union([_plan(steps, anchored) for steps in sequences])
        else:
            self.engine, kind, arg = "slre", "call", _on_bytes(_Columns(program, anchored).search)
        self.search = _searcher(kind, arg, self.max_subject)
        self.key = (raw.split(b"\0", 1)[0], self.max_subject)

    def __repr__(self):
        return "zrex.Pattern(%r)" % (self.pattern,)


@lru_cache(maxsize=4096)
def compile(pattern, max_subject=MAX_SUBJECT):
    """Compile (and cache) a zrex pattern given as ``str`` or ``bytes``."""
    return Pattern(pattern, max_subject)


def valid(pattern):
    """True when SLRE compiles the pattern cleanly (what ``zrex_valid`` checks)."""
    return compile(pattern).valid
