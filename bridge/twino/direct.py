"""Twino client-to-client traffic through core mailboxes: direct messages (by id, `@name:`,
`@type:`), responses to direct requests, and direct acks.

Every Twino client owns the mailbox named by its id, and every other door's mailbox is
addressed the same way: a target that names no Twino client reaches the core mailbox of
that name (a Malamute address, online or keeping mail). Frames to Twino clients are relayed
as received (TTL-1, source filled in); mailboxes of other doors get the core Message, with
the Twino message id as its tracker so a reply can name the request (docs/mapping.md).
"""
from mqksbridge.bridge.convert import Unrepresentable, dropped, refusal
from mqksbridge.bridge.convert.twino import direct_delivery, from_frame, response_delivery
from mqksbridge.protocols.twino.codec import (Frame, MessageType, ResultCode, encode, new_id, response,
                                   server_ack)
from mqksbridge.protocols.twino.names import target_of

DIRECT = "twino-direct"
DOOR = "twino"
MAX_PENDING = 10_000      # open direct requests remembered per connection


class TwinoDirect:
    def __init__(self, door):
        self.door = door
        self.broker = door.broker

    def recipients(self, target):
        """Mailboxes for a target; `@name:`/`@type:` match live clients, oldest first."""
        kind, value = target_of(target)
        if kind == "name":
            found = self.broker.find_clients(name=value)
        elif kind == "type":
            found = self.broker.find_clients(type=value)
        else:
            client = self.broker.clients.get(target)
            if client is None:
                mailbox = self.broker.mailboxes.get(target)
                return [mailbox] if mailbox is not None else []
            found = [client]
        return [c.mailbox for c in found if c.mailbox is not None]

    def _relay(self, conn, frame, mailboxes):
        """One encode with the sender as source; one core Message to every mailbox."""
        client_id = conn.client.id
        if frame.source != client_id:
            frame = Frame(frame.type, frame.first_acquirer, frame.high_priority, frame.ttl,
                          frame.pending_response, frame.pending_ack, frame.message_id, client_id,
                          frame.target, frame.content_type, frame.headers, frame.content)
        message = from_frame(frame, frame.message_id or new_id(), client_id, frame.target or "",
                             encode(frame), DIRECT, self.door.clock())
        message.tracker = frame.message_id or ""
        for mailbox in mailboxes:
            mailbox.send(message, conn.client)
        return message

    def send(self, conn, frame):
        """DirectMessage: an unknown client id always gets 404; an unmatched `@name:` or
        `@type:` only when the sender waits for a response. FirstAcquirer: the oldest only.
        A message another door's client cannot receive is refused with 406."""
        conn.traffic.messages_in += 1
        target = frame.target or ""
        mailboxes = self.recipients(target)
        if not mailboxes:
            if frame.message_id and (not target.startswith("@") or frame.pending_response):
                conn.write(encode(response(frame, ResultCode.NOT_FOUND, target=conn.client.id)))
            return
        if frame.first_acquirer:
            mailboxes = mailboxes[:1]
        foreign = [m for m in mailboxes if m.owner is None or m.owner.door != DOOR]
        if foreign:
            reason = self._refusal(conn, frame, foreign)
            if reason is not None:
                return self._refuse(conn, frame, reason)
            if frame.pending_response and frame.message_id:
                conn.remember_request(frame.message_id)
        self._relay(conn, frame, mailboxes)
        if foreign and frame.pending_ack and frame.message_id:
            conn.write(encode(server_ack(frame.message_id, target, frame.content_type)))

    def _refusal(self, conn, frame, mailboxes):
        message = from_frame(frame, frame.message_id or "", conn.client.id, frame.target or "",
                             None, None, 0.0)
        message.tracker = frame.message_id or ""
        for mailbox in mailboxes:
            reason = refusal(mailbox.owner.door, message) if mailbox.owner else None
            if reason is not None:
                return reason
        return None

    @staticmethod
    def _refuse(conn, frame, reason):
        """Publish-time refusal: a nack to a sender waiting for its ack, else Response 406."""
        if frame.pending_ack and frame.message_id:
            conn.write(encode(server_ack(frame.message_id, frame.target, frame.content_type,
                                         "unrepresentable")))
        elif frame.message_id:
            conn.write(encode(response(frame, ResultCode.UNACCEPTABLE, target=conn.client.id)))

    def respond(self, conn, frame):
        """A Response (or direct ack) goes to its target's mailbox, or nowhere. Acks reach
        Twino clients only: other doors have no direct acks."""
        target = frame.target or ""
        mailboxes = self.recipients(target) if not target.startswith("@") else []
        if frame.type != MessageType.RESPONSE:
            mailboxes = [m for m in mailboxes if m.owner is not None and m.owner.door == DOOR]
        if mailboxes:
            self._relay(conn, frame, mailboxes[:1])

    def acknowledge(self, conn, frame):
        """HighPriority clear: a queue ack if this client consumes that channel's queue;
        otherwise (and for direct acks) relayed to the target client."""
        if not frame.high_priority and self.door.queues.consumer_ack(conn, frame):
            return
        self.respond(conn, frame)

    # -- foreign mail to a Twino client ----------------------------------------------------
    def deliver(self, conn, message):
        """A message from another door in this Twino client's mailbox: the Response to one
        of its open direct requests when the tracker names one, else a DirectMessage whose
        id is the tracker (so the client's Response carries it back) or the message id."""
        try:
            if message.tracker and conn.requests.pop(message.tracker, False):
                data = response_delivery(message, message.tracker, conn.client.id)
            else:
                data = direct_delivery(message, conn.wire_id(message.tracker or message.id),
                                       conn.client.id)
        except Unrepresentable as exc:
            return dropped(self.broker, DOOR, message, exc.reason)
        conn.write(data)
