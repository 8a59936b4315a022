"""The one exception of the MQKS protocol modules, and its reason codes.

Whatever a request line or its arguments get wrong, the parser raises MqksProtocolError
and the door answers `{id} error {eid}` (and, for a line over the limit, closes the
connection once the lines before it are served): one `except` covers the protocol
(specs/errors.md).
"""
import enum

from mqksbridge.protocols.errors import ProtocolError


class Reason(enum.Enum):
    """Which MQKS rule a request broke (MqksProtocolError.code)."""
    LINE_TOO_LONG = "line-too-long"  # a line over max_line: the connection closes
    REQUEST = "request"              # fewer than 3 parts, or a TAB
    ACTION = "action"                # an action the server does not have
    ARGUMENT = "argument"            # the action's arguments are invalid
    IN_USE = "in-use"                # a consume whose id is a live consumer
    EVAL = "eval"                    # an `_eval` expression refused or failing


class MqksProtocolError(ProtocolError):
    """A line or a request the protocol cannot accept. `req_id` is the id to answer with
    (None when the line has none: the reply then says `None`); `done` (LINE_TOO_LONG) the
    lines completed before the long one."""

    def __init__(self, code, reason, req_id=None, done=()):
        super().__init__(code, reason, done)
        self.req_id = req_id
