"""One open Malamute session as the core sees it: a Client plus its three delivery paths.

Backpressure: while the peer's socket is full its core Client is paused (the ROUTER does
that), so mailbox and service deliveries wait in the core. Streams have no storage in
Malamute: once `high_water` stream messages wait behind a full socket, further copies
for that peer are dropped and counted. A service request that cannot be handed to the socket
(the peer vanished) is handed back to its queue, which passes it on (core.queue). A foreign
message Malamute cannot carry (a subject over 255 bytes) is dropped for this peer, counted
and logged, never cut.

The three callbacks run inside another client's send (any door's): a failure in one (a
bug) costs this session, as a failing command does (logged, ERROR 500, session ended),
never the sender's request or the other readers and workers. The mail goes back to its
mailbox and the request to its queue, as when the peer vanished.
"""
from mqksbridge.bridge.convert import Unrepresentable, dropped
from mqksbridge.bridge.convert.malamute import mailbox_frames, service_frames, stream_frames
from mqksbridge.bridge.traffic import Traffic


class Peer:
    __slots__ = ("rid", "door", "session", "client", "address", "seen", "offers", "credit",
                 "gone", "traffic", "reads", "subscriptions")

    def __init__(self, door, rid, session, client, address, seen):
        self.rid = rid
        self.door = door
        self.session = session        # protocols.malamute.session.Session (connected)
        self.client = client
        self.address = address
        self.seen = seen              # the door's sweep generation at the last frame
        self.offers = {}              # (service, pattern) -> Consumer
        self.reads = {}               # stream name -> {pattern}
        self.subscriptions = 0        # patterns in reads + offers (door.max_subscriptions)
        self.credit = False           # the client opted into credit-based service flow
        self.gone = False
        self.traffic = Traffic("malamute", address, None, None, None, 0.0)  # the door sets
        # the connection's own once the session is attached to it (admin counters)

    # -- delivery callbacks handed to the core --------------------------------------------
    def stream(self, stream_name, message):
        door = self.door
        if self.gone or door.transport.busy(self.rid):
            door.counters["stream_dropped"] += 1
            door.losses["stream copy for slow reader", self.address] += 1
            return
        traffic = self.traffic           # Traffic.delivered, inline: every stream copy
        out, origin = traffic.out, message.origin
        n = out[origin] + 1
        out[origin] = n
        if not n & traffic.mask:
            traffic.sampled(message)
        try:
            frames = self._frames(stream_frames, stream_name, message)
            if frames is not None:
                self._send(frames)
        except Exception:
            door._failed(self, ("stream delivery", stream_name))

    def mailbox(self, mailbox, message):
        self.traffic.delivered(message)
        try:
            frames = self._frames(mailbox_frames, mailbox.name, message)
            if frames is not None and (self.gone or not self._send(frames)):
                mailbox.restore(message)
        except Exception:
            mailbox.restore(message)
            self.door._failed(self, ("mailbox delivery", mailbox.name))

    def service(self, consumer, entry):
        """Every request passes here: _frames and _send written out."""
        queue, message = consumer.queue, entry.message
        self.traffic.delivered(message)
        try:
            frames = service_frames(queue.name, message)
            if self.gone or not self.door.transport.send(self.rid, frames):
                if not self.gone:
                    self.door.vanished(self)
                queue.returned(consumer, entry)
        except Unrepresentable as exc:
            dropped(self.door.broker, "malamute", message, exc.reason)
            entry.notify("nack", consumer, "unrepresentable")
        except Exception:
            self.door._failed(self, ("service delivery", queue.name))
            queue.returned(consumer, entry)

    def _frames(self, convert, name, message):
        """The DELIVER frames, or None (counted, logged) when Malamute cannot carry it."""
        try:
            return convert(name, message)
        except Unrepresentable as exc:
            dropped(self.door.broker, "malamute", message, exc.reason)
            return None

    def _send(self, frames):
        """Hand frames to the socket; False (and the session ends) if the peer is gone."""
        if self.door.transport.send(self.rid, frames):
            return True
        self.door.vanished(self)
        return False
