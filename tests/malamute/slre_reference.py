"""The zrex matcher as it was before it became linear: SLRE's matching rules, memoised per
(block, item, offset). Polynomial (a loop re-walks its tail from every offset), so it
only serves the tests as an oracle on small inputs, where it finishes quickly."""
from mqksbridge.protocols.malamute import zrex
from mqksbridge.protocols.malamute.zrex import ALT, BOL, EOL, LIT, PLUS, PLUSQ, QUEST, SET, STAR


class _Run:
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


def search(pattern, subject):
    """What the old matcher answered for `pattern` (str or bytes) on `subject`."""
    raw = pattern.encode("utf-8", "surrogateescape") if isinstance(pattern, str) else pattern
    program, anchored, _ = zrex._parse(raw)
    if isinstance(subject, str):
        subject = subject.encode("utf-8", "surrogateescape")
    s = subject.split(b"\0", 1)[0]
    if not program.items:
        return bool(s)
    run = _Run(s)
    if anchored:
        return run.run(program, 0, 0) >= 0
    return any(run.run(program, 0, start) >= 0 for start in range(len(s)))
