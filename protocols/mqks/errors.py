"""The one exception family of the MQKS protocol modules.

Whatever a request line or its arguments get wrong, the parser raises a subclass of
MqksProtocolError and the door answers `{id} error {eid}` (and, for a line over the
limit, closes the connection): one `except` covers the protocol.
"""


class MqksProtocolError(ValueError):
    """A line or a request the protocol cannot accept."""
