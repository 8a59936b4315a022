"""Twino routers (Router frames 0x17, operations 651-663) on core streams.

A router is the core stream of the same name with the router's route method; creating a
router over an existing stream (`mqks`, a Malamute stream) adopts it. A queue binding makes
queue `C/N` a router binding of that stream: it takes every subject, and the core does the
distribute / round-robin / only-first choice among them (in binding priority order), so
whatever any door publishes to the stream reaches it. Direct bindings (a client id,
`@name:`, `@type:`) and tag bindings (every Twino queue whose Queue-Tag matches the target,
`*` patterns as in list filters) are tried by the door after the queues, for Router frames
only: all of them when distributing, otherwise only until one takes the message.
"""
import json

from mqksbridge.bridge.convert.twino import from_frame
from mqksbridge.bridge.engine import DISTRIBUTE, ONLY_FIRST, ROUND_ROBIN
from mqksbridge.bridge.twino.direct import DIRECT
from mqksbridge.bridge.twino.queues import core_name
from mqksbridge.protocols.twino.codec import Frame, Header, MessageType, NackReason, ResultCode, encode, \
    new_id, response, server_ack
from mqksbridge.protocols.twino.models import (
    DIRECT_BINDING, QUEUE_BINDING, ROUTE_DISTRIBUTE, ROUTE_ONLY_FIRST, ROUTE_ROUND_ROBIN,
    TAG_BINDING, binding_information, json_list, router_information,
)
from mqksbridge.protocols.twino.names import name_matches

# The core stream route of each Twino route method.
METHODS = {ROUTE_DISTRIBUTE: DISTRIBUTE, ROUTE_ROUND_ROBIN: ROUND_ROBIN,
           ROUTE_ONLY_FIRST: ONLY_FIRST}


class TwinoRouters:
    def __init__(self, door):
        self.door = door
        self.broker = door.broker
        self.routers = {}        # name -> {"method": int, "bindings": [dict]}

    def router(self, name):
        """The router named `name`; a core stream another door made (`mqks`, a Malamute
        stream) is one already, distributing, with no bindings yet."""
        router = self.routers.get(name)
        if router is None and name in self.broker.streams:
            router = self.routers[name] = {"method": ROUTE_DISTRIBUTE, "bindings": []}
        return router

    # -- operations -----------------------------------------------------------------------------
    def list_routers(self, conn, frame):
        return ResultCode.OK, json_list([
            router_information(name=name, is_enabled=True, method=router["method"])
            for name, router in self.routers.items()])

    def create_router(self, conn, frame):
        name = frame.target or ""
        if not name:
            return ResultCode.BAD_REQUEST
        if name in self.routers:
            return ResultCode.DUPLICATE
        try:
            method = int((frame.header(Header.ROUTE_METHOD) or "0").strip())
            self.broker.stream(name).route = METHODS[method]
        except (ValueError, KeyError):
            return ResultCode.BAD_REQUEST
        self.routers[name] = {"method": method, "bindings": []}
        return ResultCode.OK

    def remove_router(self, conn, frame):
        router = self.routers.pop(frame.target or "", None)
        if router is None:
            return ResultCode.NOT_FOUND
        stream = self.broker.stream(frame.target)      # other doors may still use it
        stream.set_routed(())
        stream.route = DISTRIBUTE
        return ResultCode.OK

    def list_bindings(self, conn, frame):
        router = self.router(frame.target or "")
        if router is None:
            return ResultCode.NOT_FOUND
        return ResultCode.OK, json_list([binding_information(**b) for b in router["bindings"]])

    def add_binding(self, conn, frame):
        router = self.router(frame.target or "")
        if router is None:
            return ResultCode.NOT_FOUND
        try:
            data = {k.lower(): v for k, v in json.loads(frame.content.decode("utf-8")).items()}
            binding = {"name": str(data["name"]), "target": str(data["target"]),
                       "content_type": int(data.get("contenttype") or 0),
                       "priority": int(data.get("priority") or 0),
                       "interaction": int(data.get("interaction") or 0),
                       "binding_type": int(data.get("bindingtype") or 0),
                       "method": data.get("method")}
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):  # Infinity
            return ResultCode.BAD_REQUEST
        if binding["binding_type"] not in (DIRECT_BINDING, QUEUE_BINDING, TAG_BINDING):
            return ResultCode.UNACCEPTABLE          # HTTP bindings are not offered
        if binding["binding_type"] == TAG_BINDING and not binding["target"]:
            return ResultCode.BAD_REQUEST
        if binding["binding_type"] == QUEUE_BINDING:
            _, code = self.door.queues.queue_for(binding["target"], binding["content_type"])
            if code:
                return code
        router["bindings"] = [b for b in router["bindings"] if b["name"] != binding["name"]]
        router["bindings"].append(binding)
        self._bind_queues(frame.target, router)
        return ResultCode.OK

    def remove_binding(self, conn, frame):
        router = self.router(frame.target or "")
        name = (frame.header(Header.BINDING_NAME) or "").strip()
        kept = [b for b in router["bindings"] if b["name"] != name] if router else None
        if router is None or len(kept) == len(router["bindings"]):
            return ResultCode.NOT_FOUND
        router["bindings"] = kept
        self._bind_queues(frame.target, router)
        return ResultCode.OK

    def _bind_queues(self, name, router):
        """Queue bindings onto the stream, highest priority first (the core keeps order)."""
        router["bindings"].sort(key=lambda b: -b["priority"])
        self.broker.stream(name).set_routed(
            core_name(b["target"], b["content_type"]) for b in router["bindings"]
            if b["binding_type"] == QUEUE_BINDING)

    # -- publishing -----------------------------------------------------------------------------
    def publish(self, conn, frame):
        """Through the router; then an ack/nack (PendingAck) or Response 0/404 (PendingResponse)."""
        conn.traffic.messages_in += 1
        name = frame.target or ""
        router = self.router(name)
        client = conn.client
        message_id = frame.message_id or new_id()
        delivered = 0
        if router is not None:
            message = from_frame(frame, message_id, client.id, name, None, None,
                                 self.door.clock())
            delivered = self.broker.stream(name).publish(message, client)
            distribute = router["method"] == ROUTE_DISTRIBUTE
            for b in router["bindings"]:
                kind = b["binding_type"]
                if kind == QUEUE_BINDING or (delivered and not distribute):
                    continue
                send = self._direct if kind == DIRECT_BINDING else self._tagged
                delivered += send(conn, frame, message_id, b)
        if frame.pending_ack and frame.message_id:
            conn.write(encode(server_ack(frame.message_id, name, frame.content_type,
                                         None if delivered else NackReason.NO_CONSUMERS)))
        if frame.pending_response and frame.message_id:
            conn.write(encode(response(frame, ResultCode.OK if delivered else ResultCode.NOT_FOUND,
                                       target=client.id)))

    def _direct(self, conn, frame, message_id, binding):
        mailboxes = self.door.direct.recipients(binding["target"])
        if not mailboxes:
            return 0
        target = mailboxes[0].name if len(mailboxes) == 1 else binding["target"]
        direct = Frame(MessageType.DIRECT_MESSAGE, high_priority=frame.high_priority,
                       message_id=message_id, source=conn.client.id, target=target,
                       content_type=binding["content_type"], headers=frame.headers,
                       content=frame.content)
        message = from_frame(direct, message_id, conn.client.id, binding["target"],
                             encode(direct), DIRECT, self.door.clock())
        for mailbox in mailboxes:
            mailbox.send(message, conn.client)
        return 1

    def _tagged(self, conn, frame, message_id, binding):
        """A copy of the Router frame's message in every Twino queue whose tag matches
        (upstream's TagBinding, Interaction None: every copy keeps the message id)."""
        queues = self.door.queues
        tagged = [state for state in map(twino_state, self.broker.queues.values())
                  if state is not None and state.tag and name_matches(binding["target"],
                                                                     state.tag)]
        for state in tagged:
            queues.push_copy(conn, Frame(
                MessageType.QUEUE_MESSAGE, high_priority=frame.high_priority,
                message_id=message_id, source=frame.source, target=state.channel,
                content_type=state.id, headers=frame.headers, content=frame.content), state)
        return 1 if tagged else 0


def twino_state(queue):
    return queue.attrs.get("twino")
