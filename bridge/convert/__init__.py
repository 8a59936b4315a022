"""Every cross-door conversion lives in this package, one module per door.

Each module turns a core Message into that door's delivery and that door's publish into
a core Message. Same-door traffic relays the raw wire form kept in Message.raw untouched.
docs/mapping.md is the table these modules implement.

A message a door cannot represent (a field over its size limit, bytes its framing cannot
carry) is never truncated: the conversion raises Unrepresentable, and the door either
refuses the publish (when it knows the target then) or drops that one copy, counting it
in `broker.counters["unrepresentable.<door>"]` and logging it (see `dropped`).
"""
import importlib

from twisted.logger import Logger

log = Logger(namespace="mqksbridge.convert")


class Unrepresentable(ValueError):
    """The target door has no faithful encoding for this message; `reason` says why."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def dropped(broker, door, message, reason):
    """Count and log one copy that could not be delivered through `door`."""
    broker.counters[f"unrepresentable.{door}"] += 1
    log.warn("dropped message {id!r} from {origin} for a {door} consumer: {reason}",
             id=message.id, origin=message.origin, door=door, reason=reason)


def refusal(door, message):
    """Why a consumer behind `door` could not receive `message`, or None (a door whose
    module has no `refusal` represents everything)."""
    module = importlib.import_module(f"mqksbridge.bridge.convert.{door}")
    check = getattr(module, "refusal", None)
    return None if check is None else check(message)
