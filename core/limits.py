"""Size limits of queues and mailboxes: the broker's configuration, by name.

A limit is content bytes. It is one value for every object of a kind, or rules
(pattern, bytes) matched against the object's name (fnmatch, first match wins, bytes None
for unlimited; no rule matches: unlimited). The broker applies it when it creates the queue
or mailbox, whichever door asks, so a limit never depends on which door happened to create
the object (docs/delivery.md, "Limits").
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
