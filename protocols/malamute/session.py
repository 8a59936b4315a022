"""The per-session state machine of a Malamute broker, sans IO.

Feed it each decoded command from one peer; it answers with the one reply to
send (or none) and the events the broker layer must act on.  The rules are
malamute 1.2's as observed, minus its crashes, and shaped by what the real
``mlm_client`` tolerates: it halts for good on any frame it does not expect,
so a session only ever replies OK(200), ERROR(300/500) or PONG; ERROR 500
("who are you?") makes it re-open and replay, ERROR 300 ends it.

A session starts in ``start``, becomes ``connected`` on CONNECTION-OPEN and
returns to ``start`` whenever it ends (CLOSE, a drop, or ``expire``), which
is what "a fresh session for the next frame" means on the real broker.
Send the reply before applying the events (the OK to an OPEN must precede
the stored mail the Open event releases).

The three SENDs are nearly all the traffic, and a client sends runs of them with
one header. ``send(header)`` is their way in: it reads a header once, applies the
same rules as every other command, and hands back one ``Send`` event for the run,
content left in the caller's frames; ``receive_frames`` and ``receive`` route
SENDs through it, so its rules hold whichever way a SEND arrives.
"""

from typing import NamedTuple, Optional

from . import codec as c

START = "start"
CONNECTED = "connected"


# -- events for the broker layer -------------------------------------------

class Open(NamedTuple):
    """The peer registered ``address`` ("" = anonymous, no mailbox)."""
    address: str


class Close(NamedTuple):
    """The peer closed politely; forget its client (its mailbox stays)."""


class Drop(NamedTuple):
    """The session was destroyed (protocol error or expiry); forget its client."""
    reason: str


class StreamWrite(NamedTuple):
    stream: str


class StreamRead(NamedTuple):
    stream: str
    pattern: str


class StreamCancel(NamedTuple):
    stream: str


STREAM, MAILBOX, SERVICE = c.StreamSend.ID, c.MailboxSend.ID, c.ServiceSend.ID


class Send(NamedTuple):
    """Publish the content frames of every message whose header frame is ``header``.

    ``kind`` is STREAM, MAILBOX or SERVICE; ``target`` the stream (the session's
    STREAM-WRITE), the mailbox address or the service. ``deliver`` is the header of
    the DELIVER its receivers get, with this session's address as the sender: the
    SEND's own fields, moved behind the DELIVER's, so it is built once per header.
    """
    kind: int
    header: bytes
    target: str
    subject: str
    tracker: str
    timeout: int
    deliver: bytes


class ServiceOffer(NamedTuple):
    service: str
    pattern: str


class Credit(NamedTuple):
    amount: int


class Outcome(NamedTuple):
    """What to do: send ``reply`` (a command, or None), then apply ``events``.

    ``error`` is set (and nothing else) when the frames did not decode; the
    caller counts/logs it and still treats the frame as traffic for expiry.
    """
    reply: Optional[tuple] = None
    events: tuple = ()
    error: Optional[c.MalamuteDecodeError] = None


OK = c.Ok()
PONG = c.ConnectionPong()
ERROR_FAILED = c.Error(c.FAILED)
ERROR_INVALID = c.Error(c.COMMAND_INVALID)

_NOTHING = Outcome()
_OK = Outcome(OK)
_PONG = Outcome(PONG)
_UNKNOWN = Outcome(ERROR_INVALID)
_ALL = frozenset(c.COMMANDS)
_SENDS = frozenset((c.StreamSend, c.MailboxSend, c.ServiceSend))
_SEND_IDS = frozenset(cls.ID for cls in _SENDS)
_SERVER_ONLY = (c.ConnectionPong, c.Ok, c.Error, c.StreamDeliver, c.MailboxDeliver,
                c.ServiceDeliver)
_NO_SEND = Send(0, None, "", "", "", 0, b"")


class Session:
    """State of one peer (one ROUTER routing id)."""

    __slots__ = ("state", "address", "stream", "_last", "_before", "_stream_prefix",
                 "_mail_prefix", "_service_prefix")

    def __init__(self):
        self._reset()

    def __repr__(self):
        return "<malamute.Session %s address=%r stream=%r>" % (self.state, self.address, self.stream)

    def receive_frames(self, frames):
        """Decode and handle; an undecodable frame gets no reply."""
        if frames:
            send = self.send(frames[0])
            if send is not None:
                return send if send.__class__ is Outcome else Outcome(events=(send,))
        try:
            command = c.decode(frames)
        except c.MalamuteDecodeError as exc:
            return Outcome(error=exc)
        return self.receive(command)

    def receive(self, command):
        """Handle one decoded command and return its Outcome (a SEND by way of `send`,
        so that its rules live in one place)."""
        if command.__class__ in _SENDS:
            send = self.send(c.encode(command)[0])
            return send if send.__class__ is Outcome else Outcome(events=(send,))
        if self.state == START:
            return self._start(command)
        return self._connected(command)

    def send(self, header):
        """A SEND's header frame: the ``Send`` to publish when the session takes it, an
        ``Outcome`` when it refuses it or cannot read it, None when it is no SEND.

        The last two Sends are kept and given again for the same header, so a run of
        SENDs, or two kinds taking turns (mlm_perftest's pair of subjects), costs one read
        per header."""
        last = self._last
        if header == last.header:
            return last
        before = self._before
        if header == before.header:
            self._last, self._before = before, last
            return before
        if len(header) < 3 or header[2] not in _SEND_IDS:
            return None
        kind = header[2]
        try:
            if kind == STREAM:
                subject, end = c.stream_send_subject(header)
                target, tracker, timeout = self.stream, "", 0
            else:
                target, subject, tracker, timeout, end = c.send_fields(header)
        except c.MalamuteDecodeError as exc:
            return Outcome(error=exc)
        if self.state == START:
            return _UNKNOWN
        if kind == STREAM:
            if target is None:
                return self._drop(ERROR_FAILED, "STREAM-SEND before STREAM-WRITE")
            prefix = self._stream_prefix
        else:
            prefix = self._mail_prefix if kind == MAILBOX else self._service_prefix
        send = Send(kind, header, target, subject, tracker, timeout,
                    c.deliver_header(prefix, header, end))
        self._last, self._before = send, last
        return send

    def expire(self, reason="expired"):
        """End the session silently (server-side expiry or address takeover)."""
        if self.state == START:
            return _NOTHING
        self._reset()
        return Outcome(events=(Drop(reason),))

    def _reset(self):
        self.state, self.address, self.stream = START, None, None
        self._last = self._before = _NO_SEND
        self._stream_prefix = self._mail_prefix = self._service_prefix = None

    def _drop(self, reply, reason):
        self._reset()
        return Outcome(reply, (Drop(reason),))

    def _start(self, command):
        cls = command.__class__
        if cls is c.ConnectionOpen:
            self.state, self.address = CONNECTED, command.address
            self._mail_prefix = c.deliver_prefix(c.MailboxDeliver, command.address)
            self._service_prefix = c.deliver_prefix(c.ServiceDeliver, command.address)
            return Outcome(OK, (Open(command.address),))
        if cls is c.ConnectionClose:
            return _OK          # malamute 1.2 segfaults here; we answer and carry on
        if cls in _ALL:
            return _UNKNOWN
        raise TypeError("not a Malamute command: %r" % (command,))

    def _connected(self, command):
        cls = command.__class__
        if cls is c.ConnectionPing:
            return _PONG
        if cls is c.StreamRead:
            return Outcome(OK, (StreamRead(command.stream, command.pattern),))
        if cls is c.StreamWrite:
            self.stream, self._last, self._before = command.stream, _NO_SEND, _NO_SEND
            self._stream_prefix = c.deliver_prefix(c.StreamDeliver, command.stream, self.address)
            return Outcome(OK, (StreamWrite(command.stream),))
        if cls is c.StreamCancel:
            return Outcome(OK, (StreamCancel(command.stream),))
        if cls is c.ServiceOffer:
            return Outcome(OK, (ServiceOffer(command.address, command.pattern),))
        if cls is c.Credit:
            return Outcome(events=(Credit(command.amount),))
        if cls is c.ConnectionClose:
            self._reset()
            return Outcome(OK, (Close(),))
        if cls is c.ConnectionOpen:
            return self._drop(ERROR_INVALID, "CONNECTION-OPEN while connected")
        if cls is c.Confirm:
            return self._drop(ERROR_FAILED, "CONFIRM is not implemented")
        if cls in _SERVER_ONLY:
            return self._drop(ERROR_INVALID, "%s is a server command" % cls.__name__)
        raise TypeError("not a Malamute command: %r" % (command,))
