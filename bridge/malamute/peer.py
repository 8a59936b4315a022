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
from mqksbridge.bridge.convert.malamute import (ORIGIN, RAW_MAILBOX, RAW_SERVICE,
                                                mailbox_frames, service_frames, stream_frames)
from mqksbridge.bridge.traffic import Traffic
from mqksbridge.protocols.zmtp.codec import pairs


class Unreachable:
    """The link of a session with no connection to send on: nothing goes out."""

    @staticmethod
    def send(frames):
        return False

    @staticmethod
    def offer(frames):
        return False

    @staticmethod
    def send_run(data, count):
        return False


UNREACHABLE = Unreachable()


class Peer:
    __slots__ = ("rid", "door", "session", "client", "address", "seen", "offers", "credit",
                 "gone", "traffic", "reads", "subscriptions", "link")

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
        self.link = UNREACHABLE       # the door sets its connection: send(frames) -> False
        # once it is gone, offer(frames) -> None while it is busy, send_run(data, count)
        # (ZmtpConnection)

    # -- delivery callbacks handed to the core --------------------------------------------
    # Every copy passes here: the traffic count (Traffic.delivered) and the conversion's
    # refusal (Unrepresentable: dropped, counted, logged) are written out.
    def stream(self, stream_name, message):
        door = self.door
        try:
            sent = None if self.gone else self.link.offer(stream_frames(stream_name, message))
        except Unrepresentable as exc:
            dropped(door.broker, "malamute", message, exc.reason)
            return
        except Exception:
            door._failed(self, ("stream delivery", stream_name))
            return
        if sent:
            traffic = self.traffic
            out, origin = traffic.out, message.origin
            n = out[origin] + 1
            out[origin] = n
            if not n & traffic.mask:
                traffic.sampled(message)
        elif sent is None:
            door.counters["stream_dropped"] += 1
            door.losses["stream copy for slow reader", self.address] += 1
        else:
            door.vanished(self)

    def mailbox(self, mailbox, message):
        traffic = self.traffic
        out, origin = traffic.out, message.origin
        n = out[origin] + 1
        out[origin] = n
        if not n & traffic.mask:
            traffic.sampled(message)
        try:
            if self.gone:
                mailbox.restore(message)
            elif not self.link.send(mailbox_frames(mailbox.name, message)):
                self.door.vanished(self)
                mailbox.restore(message)
        except Unrepresentable as exc:
            dropped(self.door.broker, "malamute", message, exc.reason)
        except Exception:
            mailbox.restore(message)
            self.door._failed(self, ("mailbox delivery", mailbox.name))

    def service(self, consumer, entry):
        queue, message = consumer.queue, entry.message
        traffic = self.traffic
        out, origin = traffic.out, message.origin
        n = out[origin] + 1
        out[origin] = n
        if not n & traffic.mask:
            traffic.sampled(message)
        try:
            if self.gone or not self.link.send(service_frames(queue.name, message)):
                if not self.gone:
                    self.door.vanished(self)
                queue.returned(consumer, entry)
        except Unrepresentable as exc:
            dropped(self.door.broker, "malamute", message, exc.reason)
            entry.notify("nack", consumer, "unrepresentable")
        except Exception:
            self.door._failed(self, ("service delivery", queue.name))
            queue.returned(consumer, entry)

    def service_run(self, consumer, messages):
        """service() for a run of first deliveries (Consumer.deliver_run): `_send_run`."""
        return self._send_run(messages, RAW_SERVICE)

    def mailbox_run(self, mailbox, messages):
        """mailbox() for a run of mail (Mailbox.hand_run): `_send_run`."""
        return self._send_run(messages, RAW_MAILBOX)

    def _send_run(self, messages, raw_door):
        """A run as one write: True when it took them all; False, taking none, unless they
        are one SEND header's single-frame messages (`raw_door`'s) and the connection takes
        them under its mark (one by one, the client is paused where it should be). A
        failure here is left to the one-by-one path."""
        first = messages[0]
        head = first.raw
        try:
            if self.gone or first.raw_door != raw_door or first.origin != ORIGIN:
                return False
            bodies = []
            for message in messages:        # a loop: a comprehension would make a closure
                frames = message.frames
                if message.raw is not head or len(frames) != 1:
                    return False
                bodies.append(frames[0])
            if not self.link.send_run(pairs(head, bodies), len(bodies)):
                return False
        except Exception:
            return False
        traffic = self.traffic           # each count with low bits clear is timed, as one by one
        out = traffic.out
        before = out[ORIGIN]
        out[ORIGIN] = last = before + len(messages)
        step = traffic.mask + 1
        for n in range((before // step + 1) * step, last + 1, step):
            traffic.sampled(messages[n - before - 1])
        return True
