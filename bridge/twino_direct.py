"""Twino client-to-client traffic through core mailboxes: direct messages (by id, `@name:`,
`@type:`), responses to direct requests, and direct acks.

Every Twino client owns the mailbox named by its id, so any door's client with a mailbox of
that name is addressed the same way. Frames are relayed as received (TTL-1, source filled in).
"""
from bridge.convert.twino import from_frame
from protocols.twino.codec import Frame, ResultCode, encode, new_id, response

DIRECT = "twino-direct"


class TwinoDirect:
    def __init__(self, door):
        self.door = door
        self.broker = door.broker

    def recipients(self, target):
        """Live clients with a mailbox for a target; `@name:`/`@type:` oldest first."""
        if target.startswith("@name:"):
            found = self.broker.find_clients(name=target[6:])
        elif target.startswith("@type:"):
            found = self.broker.find_clients(type=target[6:])
        else:
            client = self.broker.clients.get(target)
            found = [client] if client is not None else []
        return [c for c in found if c.mailbox is not None]

    def _relay(self, conn, frame, receivers):
        """One encode with the sender as source; one core Message to every mailbox."""
        client_id = conn.client.id
        if frame.source != client_id:
            frame = Frame(frame.type, frame.first_acquirer, frame.high_priority, frame.ttl,
                          frame.pending_response, frame.pending_ack, frame.message_id, client_id,
                          frame.target, frame.content_type, frame.headers, frame.content)
        message = from_frame(frame, frame.message_id or new_id(), client_id, frame.target or "",
                             encode(frame), DIRECT, self.door.clock())
        for receiver in receivers:
            receiver.mailbox.send(message)

    def send(self, conn, frame):
        """DirectMessage: an unknown client id always gets 404; an unmatched `@name:` or
        `@type:` only when the sender waits for a response. FirstAcquirer: the oldest only."""
        target = frame.target or ""
        receivers = self.recipients(target)
        if not receivers:
            if frame.message_id and (not target.startswith("@") or frame.pending_response):
                conn.write(encode(response(frame, ResultCode.NOT_FOUND, target=conn.client.id)))
            return
        if frame.first_acquirer:
            receivers = receivers[:1]
        self._relay(conn, frame, receivers)

    def respond(self, conn, frame):
        """A Response to a direct request goes to its target client, or nowhere."""
        client = self.broker.clients.get(frame.target or "")
        if client is not None and client.mailbox is not None:
            self._relay(conn, frame, [client])

    def acknowledge(self, conn, frame):
        """HighPriority clear: a queue ack if this client consumes that channel's queue;
        otherwise (and for direct acks) relayed to the target client."""
        if not frame.high_priority and self.door.queues.consumer_ack(conn, frame):
            return
        self.respond(conn, frame)
