"""JSON bodies of Twino MQ 3.x answers and events, byte-exact with Newtonsoft.Json defaults.

Newtonsoft writes C# property names in declaration order, every null, enums as numbers and no
whitespace; each model function fills omitted fields with the C# default (0, false, null).
"""
from __future__ import annotations

import json
import re

from .codec import Frame, MessageType, Reason, TwinoProtocolError

# Server-side QueueStatus (what the broker reports and what option JSON numbers mean to it).
QUEUE_STATUS_NAMES = ("broadcast", "push", "roundrobin", "pull", "cache", "paused", "stopped")
BROADCAST, PUSH, ROUND_ROBIN, PULL, CACHE, PAUSED, STOPPED = range(7)

# The real 3.7.2 client numbers statuses without Cache (so its "Paused" 4 arrives as Cache).
CLIENT_STATUS_NAMES = ("broadcast", "push", "roundrobin", "pull", "paused", "stopped")
# A Status number in option JSON, read in the client's numbering (so a client asking for
# "paused" gets paused, where upstream bug B8 gives cache), as the server's status.
# Cache is asked for with the `Queue-Status` header.
CLIENT_STATUS = {0: BROADCAST, 1: PUSH, 2: ROUND_ROBIN, 3: PULL, 4: PAUSED, 5: STOPPED,
                 6: STOPPED}


def status_from_option(value) -> int:
    """The server status for a `Status` option number; unknown numbers mean Broadcast."""
    return CLIENT_STATUS.get(int(value), BROADCAST)


_STATUS_HEADER = {
    "broadcast": BROADCAST, "push": PUSH, "round": ROUND_ROBIN, "roundrobin": ROUND_ROBIN,
    "round-robin": ROUND_ROBIN, "pull": PULL, "cache": CACHE, "pause": PAUSED,
    "paused": PAUSED, "stop": STOPPED, "stoped": STOPPED, "stopped": STOPPED,
}


def queue_status_from_header(value: str | None) -> int:
    """`Queue-Status` header of CreateQueue; unknown words mean Broadcast, as upstream."""
    return _STATUS_HEADER.get((value or "").strip().lower(), BROADCAST)


# Event names (the target of a subscribe, the source of a notification).
CLIENT_CONNECTED = "ClientConnected"
CLIENT_DISCONNECTED = "ClientDisconnected"
CHANNEL_CREATED = "ChannelCreated"
CHANNEL_REMOVED = "ChannelRemoved"
CLIENT_JOINED = "ClientJoined"
CLIENT_LEFT = "ClientLeft"
QUEUE_CREATED = "QueueCreated"
QUEUE_UPDATED = "QueueUpdated"
QUEUE_REMOVED = "QueueRemoved"
MESSAGE_PRODUCED = "MessageProduced"

SERVER_EVENTS = (CLIENT_CONNECTED, CLIENT_DISCONNECTED, CHANNEL_CREATED, CHANNEL_REMOVED)
CHANNEL_EVENTS = (CLIENT_JOINED, CLIENT_LEFT, QUEUE_CREATED, QUEUE_UPDATED, QUEUE_REMOVED)
QUEUE_EVENTS = (MESSAGE_PRODUCED,)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _json_string(text: str) -> str:
    """Newtonsoft's default escaping: quotes, backslash, controls, U+0085/2028/2029; no more."""
    out = json.dumps(text, ensure_ascii=False)
    return out.replace("\u0085", "\\u0085").replace("\u2028", "\\u2028").replace(
        "\u2029", "\\u2029")


def _json_value(value) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_json_value(item) for item in value) + "]"
    raise TypeError(f"no JSON form for {type(value).__name__}")


def _utf8(text: str) -> bytes:
    """Names from the byte-oriented doors carry undecodable bytes as surrogate escapes
    (bridge/names.py): they go out as the bytes they were; any other lone surrogate as '?'."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


class Model:
    """A C# class: property names with their defaults, called with snake_case keywords."""

    def __init__(self, name: str, fields: str, defaults: dict[str, object]):
        self.name = name
        self.fields = tuple(fields.split())
        self._keys = {_snake(field): field for field in self.fields}
        self._defaults = {field: defaults.get(field) for field in self.fields}

    def __call__(self, **values) -> bytes:
        data = dict(self._defaults)
        for key, value in values.items():
            if key not in self._keys:
                raise TypeError(f"{self.name} has no field {key!r}")
            data[self._keys[key]] = value
        return _utf8("{" + ",".join(f'"{field}":{_json_value(data[field])}'
                                    for field in self.fields) + "}")


def json_list(items) -> bytes:
    """A JSON array of already-built models (the list answers: 606, 607, 616, 631...)."""
    return b"[" + b",".join(items) + b"]"


def _zeros(fields: str, value=0) -> dict[str, object]:
    return dict.fromkeys(fields.split(), value)


_COUNTERS = ("PriorityMessages Messages AcknowledgeTimeout MessageTimeout ReceivedMessages "
             "SentMessages Deliveries NegativeAcks Acks TimeoutMessages SavedMessages "
             "RemovedMessages Errors LastMessageReceived LastMessageSent MessageLimit "
             "MessageSizeLimit Id")
_FLAGS = ("OnlyFirstAcquirer RequestAcknowledge UseMessageId WaitForAcknowledge HideClientNames "
          "AllowMultipleQueues DestroyWhenEmpty IsAuthenticated IsSlave IsConnected IsEnabled "
          "Saved")

queue_information = Model(
    "QueueInformation",
    "Channel TagName Id PriorityMessages Messages Status OnlyFirstAcquirer RequestAcknowledge "
    "AcknowledgeTimeout MessageTimeout UseMessageId WaitForAcknowledge HideClientNames "
    "ReceivedMessages SentMessages Deliveries NegativeAcks Acks TimeoutMessages SavedMessages "
    "RemovedMessages Errors LastMessageReceived LastMessageSent MessageLimit MessageSizeLimit",
    {**_zeros(_COUNTERS), **_zeros(_FLAGS, False)},
)
channel_information = Model(
    "ChannelInformation",
    "Name Queues AllowMultipleQueues AllowedQueues OnlyFirstAcquirer RequestAcknowledge "
    "AcknowledgeTimeout MessageTimeout UseMessageId WaitForAcknowledge HideClientNames "
    "ActiveClients ClientLimit QueueLimit DestroyWhenEmpty",
    {**_zeros(_COUNTERS + " ActiveClients ClientLimit QueueLimit"), **_zeros(_FLAGS, False)},
)
client_information = Model("ClientInformation", "Id Name Type Online IsAuthenticated",
                           {"Online": 0, "IsAuthenticated": False})
node_information = Model("NodeInformation", "Id Name Host IsSlave IsConnected Lifetime",
                         {"IsSlave": False, "IsConnected": False, "Lifetime": 0})
router_information = Model("RouterInformation", "Name IsEnabled Method",
                           {"IsEnabled": False, "Method": 0})
binding_information = Model(
    "BindingInformation", "Name Target ContentType Priority Interaction BindingType Method",
    {"Priority": 0, "Interaction": 0, "BindingType": 0},
)

client_event = Model("ClientEvent", "Id Name Type Node", {})
channel_event = Model("ChannelEvent", "Name ActiveClients ClientLimit Node",
                      {"ActiveClients": 0, "ClientLimit": 0})
subscription_event = Model("SubscriptionEvent", "Channel ClientId ClientName ClientType Node", {})
queue_event = Model("QueueEvent", "Channel Id Tag Status PriorityMessages Messages Node",
                    {"Id": 0, "PriorityMessages": 0, "Messages": 0})
message_event = Model(
    "MessageEvent", "Channel Queue Id Saved ProducerId ProducerName ProducerType",
    {"Queue": 0, "Saved": False},
)


def event_frame(event: str, model_json: bytes, channel: str | None = None,
                queue_id: int = 0) -> Frame:
    """Notification to a subscriber: no id, source = event name, target = channel, ct = queue."""
    return Frame(MessageType.EVENT, source=event, target=channel, content_type=queue_id,
                 content=model_json)


# What the server gives what a client did not ask for: a new channel's own settings, and
# the options of a queue made by join, push or pull (and the defaults a channel's options
# override for its new queues). Keys are parse_options' names.
CHANNEL_DEFAULTS = {"allow_multiple_queues": True, "allowed_queues": None, "client_limit": 0,
                    "queue_limit": 0, "destroy_when_empty": False}
QUEUE_DEFAULTS = {"status": PUSH, "request_acknowledge": True, "acknowledge_timeout": 15000,
                  "use_message_id": True}

# Router route methods (Route-Method header, RouterInformation.Method) and binding types
# (BindingInformation.BindingType); HTTP bindings exist upstream, we do not offer them.
ROUTE_DISTRIBUTE, ROUTE_ROUND_ROBIN, ROUTE_ONLY_FIRST = 0, 1, 2
DIRECT_BINDING, QUEUE_BINDING, HTTP_BINDING, TAG_BINDING = 0, 1, 2, 3

QUEUE_OPTIONS = (
    "SendOnlyFirstAcquirer RequestAcknowledge AcknowledgeTimeout MessageTimeout UseMessageId "
    "WaitForAcknowledge HideClientNames Status MessageDeliveryHandler MessageLimit".split())
CHANNEL_OPTIONS = QUEUE_OPTIONS + (
    "AllowMultipleQueues AllowedQueues ClientLimit QueueLimit DestroyWhenEmpty".split())


INT_MAX = (1 << 31) - 1
INF = float("inf")
NUMERIC_OPTIONS = frozenset({"acknowledge_timeout", "message_timeout", "status", "message_limit",
                             "message_size_limit", "client_limit", "queue_limit"})


def parse_options(content: bytes, names=CHANNEL_OPTIONS) -> dict[str, object]:
    """Options JSON of 603/610/612 -> {snake_name: value}. Nulls ("leave as is") and unknown
    members are left out; member names match case-insensitively."""
    try:
        data = json.loads(content.decode("utf-8")) if content.strip() else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise TwinoProtocolError(Reason.OPTIONS, f"options are not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise TwinoProtocolError(Reason.OPTIONS, "options JSON is not an object")
    by_lower = {name.lower(): name for name in names}
    options = {_snake(by_lower[key.lower()]): value for key, value in data.items()
               if key.lower() in by_lower and value is not None}
    for name in NUMERIC_OPTIONS.intersection(options):
        value = options[name]
        # JSON allows NaN, Infinity, 1e400 and fractions; the server's fields are C# ints
        if (type(value) not in (int, float) or value != value or value in (INF, -INF)
                or value != int(value) or not 0 <= value <= INT_MAX):
            raise TwinoProtocolError(Reason.OPTIONS, f"option {name} is not a whole number "
                                     f"from 0 to {INT_MAX}: {value!r}")
        options[name] = int(value)
    return options
