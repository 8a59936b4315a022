"""Each door's conversion as a client sees it, without sockets: what a publisher of that door
can send (`Published`), how the door turns it into a core Message, what a consumer of that
door receives for any core Message, and how our client reads it back (`View`).

The codec-level properties run every ordered pair through these; the wire tests check that
the doors really use them.
"""
from dataclasses import dataclass

from mqksbridge.bridge.clients.mqks import parse_delivery
from mqksbridge.bridge.clients.twino import crossed
from mqksbridge.bridge.convert import malamute, mqks, twino
from mqksbridge.protocols.malamute import codec as mlm
from mqksbridge.protocols.malamute.session import Session
from mqksbridge.protocols.twino.codec import Frame, MessageType, decode


@dataclass(frozen=True)
class Published:
    """Everything a publisher may give; each door uses what its protocol can carry."""

    subject: str
    frames: tuple
    headers: tuple = ()       # (key, value) pairs, Twino only
    sender: str = "alice"
    id: str = "m1"


@dataclass(frozen=True)
class View:
    subject: str
    frames: tuple
    headers: dict
    origin: str | None
    sender: str | None
    id: str | None


class MqksCodec:
    door = "mqks"
    shows_origin = shows_id = True

    @staticmethod
    def can_publish(p):
        event = p.subject.encode("utf-8", "surrogateescape")
        return (len(p.frames) == 1 and not p.headers and event and p.frames[0]
                and not any(c in event for c in b" \t\n\r") and b"\n" not in p.frames[0]
                and b"\t" not in p.frames[0] and p.frames[0][-1:] not in b" \r\x0b\x0c")

    @staticmethod
    def to_core(p):
        return mqks.message(p.id.encode(), p.subject, p.frames[0], p.sender)

    @staticmethod
    def deliver(message):
        return b"c1 ok " + mqks.delivery(message, 0)

    @staticmethod
    def view(wire):
        d = parse_delivery(wire[:-1])
        return View(d.event, tuple(d.frames), d.headers, d.props.get("origin"),
                    d.props.get("sender"), d.id)

    @staticmethod
    def republish(view, sender, id):
        """An MQKS client can publish the event and one line-safe body, nothing else."""
        return Published(view.subject, view.frames, (), sender, id)


class TwinoCodec:
    door = "twino"
    shows_origin = shows_id = True

    @staticmethod
    def can_publish(p):
        return True

    @staticmethod
    def frame(p):
        headers = [("Subject", p.subject)]
        if len(p.frames) != 1:
            headers.append(("Frame-Lengths", ",".join(str(len(f)) for f in p.frames)))
        return Frame(MessageType.QUEUE_MESSAGE, message_id=p.id, source=p.sender, target="ch",
                     content_type=1, headers=headers + list(p.headers),
                     content=b"".join(p.frames))

    @classmethod
    def to_core(cls, p):
        return twino.from_frame(cls.frame(p), p.id, p.sender, "ch/1", None, None, 0.0)

    @staticmethod
    def deliver(message):
        return twino.queue_delivery(message, twino.wire_id(message.id) or "alias", "ch", 1,
                                    True, False, False)

    @staticmethod
    def view(wire):
        frame = decode(wire)
        c = crossed(frame)
        return View(c.subject, c.frames, dict(c.headers), c.origin, c.sender, frame.message_id)

    @staticmethod
    def republish(view, sender, id):
        return Published(view.subject, view.frames, tuple(view.headers.items()), sender, id)


class MalamuteCodec:
    """A SERVICE-SEND to queue `ch/1` and the worker's SERVICE-DELIVER (a DELIVER shows
    neither origin nor message id)."""

    door = "malamute"
    shows_origin = shows_id = False

    @staticmethod
    def can_publish(p):
        return not p.headers and all(len(x.encode("utf-8", "surrogateescape")) <= 255
                                     for x in (p.subject, p.sender))

    @staticmethod
    def to_core(p):
        session = Session()
        session.receive(mlm.ConnectionOpen(p.sender))
        send = session.send(mlm.encode(mlm.ServiceSend("ch/1", p.subject, "trk", 0))[0])
        return malamute.message(malamute.RAW_SERVICE, p.id, p.sender, send.subject,
                                send.tracker, p.frames, send.deliver, None)

    @staticmethod
    def deliver(message):
        return malamute.service_frames("ch/1", message)

    @staticmethod
    def view(wire):
        d = mlm.decode(wire)
        return View(d.subject, tuple(d.content), {}, None, d.sender, None)

    @staticmethod
    def republish(view, sender, id):
        return Published(view.subject, view.frames, (), sender, id)


CODECS = {"malamute": MalamuteCodec, "mqks": MqksCodec, "twino": TwinoCodec}


def shown_headers(src, dst, p):
    """Headers a consumer of `dst` sees: a Twino frame's own (`Subject` and `Frame-Lengths`
    included) reach MQKS as `h.KEY`; Twino consumers see no foreign application headers
    because no other door publishes any; Malamute has no place for them."""
    if src == "twino" and dst == "mqks":
        return dict(reversed(TwinoCodec.frame(p).headers))
    return dict(p.headers) if src == dst else {}


def core_subject(src, p):
    """The subject a publish gets in the core: Twino trims its `Subject` header."""
    return p.subject.strip() if src == "twino" else p.subject


def promised(src, via, p, back):
    """What docs/mapping.md promises survives src -> core -> via -> core -> src, where `back`
    is what the client behind `via` republished: subject and frames come home; the original
    headers never do (only Twino publishes headers, and only MQKS shows them, without a way
    to send them on), so the headers are those the republishing client wrote."""
    subject = core_subject(src, p)
    subject = subject.strip() if via == "twino" else subject
    return subject, p.frames, shown_headers(via, src, back)
