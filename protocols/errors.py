"""The shape of every protocol's one exception.

Each protocol package raises a single exception class, a subclass of ProtocolError, for
everything a peer (or a caller) gets wrong, as h11 does: a door catches that one type.
`code` names the rule that was broken (a member of the protocol's `Reason` enum: stable,
for tests and counters), `reason` says it in words (what is logged, or sent where the
protocol has an error message), and `done` holds what a decoder completed before it met
the violation in the same input. specs/errors.md: the door serves `done` first, then
reports the error and closes.
"""


class ProtocolError(ValueError):
    """A protocol violation: `code` (the protocol's Reason), `reason` (text), `done`."""

    def __init__(self, code, reason, done=()):
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.done = done
