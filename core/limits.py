"""Size and length limits of queues and mailboxes, and what a full queue does: the
broker's configuration, by name.

A limit is content bytes. It is one value for every object of a kind, or rules
(pattern, bytes) matched against the object's name (fnmatch, first match wins, bytes None
for unlimited; no rule matches: unlimited). The broker applies it when it creates the queue
or mailbox, whichever door asks, so a limit never depends on which door happened to create
the object (docs/delivery.md, "Limits").

A queue's overflow policy says what a put into a full queue does: REJECT it (the door
tells the publisher if its protocol can), DROP_OLDEST stored messages until it fits, or
move them to a dead-letter queue ("dead-letter:NAME"). Messages handed to a consumer and
not yet acked are never taken.
"""
from fnmatch import fnmatchcase


class SizeLimit:
    __slots__ = ("rules",)

    def __init__(self, setting=None):
        if setting is None or isinstance(setting, int):
            self.rules = (("*", setting),)
        else:
            self.rules = tuple((str(pattern), None if limit is None else int(limit))
                               for pattern, limit in setting)

    def __call__(self, name):
        """The limit for an object named `name` (None: unlimited)."""
        for pattern, limit in self.rules:
            if fnmatchcase(name, pattern):
                return limit
        return None

    def __repr__(self):
        return f"SizeLimit({list(self.rules)!r})"


REJECT, DROP_OLDEST, DEAD_LETTER = "reject", "drop-oldest", "dead-letter:"


def overflow_error(policy):
    """Why `policy` is not an overflow policy, or None."""
    if policy in (REJECT, DROP_OLDEST):
        return None
    if isinstance(policy, str) and policy.startswith(DEAD_LETTER) and policy[len(DEAD_LETTER):]:
        return None
    return f'must be "{REJECT}", "{DROP_OLDEST}" or "{DEAD_LETTER}QUEUE"'


def dead_letter_queue(policy):
    """The queue a policy moves overflow to, or None."""
    if policy.startswith(DEAD_LETTER):
        return policy[len(DEAD_LETTER):]
    return None


class ByName:
    """A value for every object of a kind, or rules (pattern, value) by name, first match
    wins (fnmatch); no rule matches: `default`."""
    __slots__ = ("rules", "default")

    def __init__(self, setting, default):
        self.default = default
        if setting is None or isinstance(setting, (str, int)):
            self.rules = (("*", default if setting is None else setting),)
        else:
            self.rules = tuple((str(pattern), value) for pattern, value in setting)

    def __call__(self, name):
        for pattern, value in self.rules:
            if fnmatchcase(name, pattern):
                return value
        return self.default
