"""Lifecycle events of the fleet: what happens on one gateway, heard on every gateway.

The events a listener may want from anywhere (a client connected or disconnected, joined
or left a channel; a channel or a queue created or removed) are told to every other
gateway on the control bus (control.Bus) as they are emitted, and each gateway emits them
to its own listeners (Twino event subscriptions, admin views) as if they happened there,
with stand-ins for what is not its own: a RemoteClient for a client, a RemoteChannel for
a channel. A queue is the fleet's: a queue created elsewhere joins this gateway's model
(with the options read back from its declare arguments, topology.options_from) and goes
from it when removed elsewhere, so a gateway's channels hold the queues of their name
whoever made them. What a gateway hears from the bus it does not tell again.

Channel membership is the gateway's that holds the member (its consumers are there), and
each gateway keeps the other gateways' members of each channel as they told them
(`members_elsewhere`, for what doors show: engine.members): a gateway that (re)connects
hears every gateway's members (`members` notices answering its hello), and the members of
a gateway that died leave (client-left) once RabbitMQ has removed its control queue.
"""
from mqksbridge.bridge.engine.rabbitmq import topology
from mqksbridge.bridge.engine.rabbitmq.mailbox import RemoteClient
from mqksbridge.core.broker import Broker

EVENT, MEMBERS_NOTICE = "event", "members"
CLIENTS = ("client-connected", "client-disconnected")
MEMBERS = ("client-joined", "client-left")
CHANNELS = ("channel-created", "channel-removed")
QUEUES = ("queue-created", "queue-removed")


class RemoteChannel:
    """A channel of another gateway, as listeners read one: its name and members."""
    __slots__ = ("name", "members", "attrs", "queues")

    def __init__(self, name, members=()):
        self.name = name
        self.members = dict.fromkeys(members)
        self.attrs, self.queues = {}, {}

    def __repr__(self):
        return f"RemoteChannel({self.name!r})"


def client_data(client):
    return {"id": client.id, "name": client.name, "type": client.type, "door": client.door,
            "connected_at": client.connected_at}


class FleetEvents:
    def __init__(self, engine, bus):
        self.engine, self.bus = engine, bus
        self.replaying = False           # emitting what the bus said: not told again
        self.elsewhere = {}              # channel -> {(instance, client id): RemoteClient}
        bus.on(EVENT, self.heard)
        bus.on(MEMBERS_NOTICE, self.members_heard)
        bus.on("hello", self.hello)
        bus.on_gone(self.gone)

    def members_elsewhere(self, channel):
        return list(self.elsewhere.get(channel, {}).values())

    def tell(self, event, data):
        """A local event, for the other gateways (a created queue once RabbitMQ has it:
        they declare nothing, they take it as it is)."""
        if self.replaying:
            return
        if event in CLIENTS:
            self.bus.send(EVENT, event=event, client=client_data(data["client"]))
        elif event in MEMBERS:
            self.bus.send(EVENT, event=event, channel=data["channel"].name,
                          client=client_data(data["client"]))
        elif event in CHANNELS:
            channel = data["channel"]
            self.bus.send(EVENT, event=event, channel=channel.name,
                          members=sorted(channel.members))
        elif event == "queue-created":
            queue = data["queue"]
            queue.when_declared().addCallback(self._created, queue)
        elif event == "queue-removed":
            self.bus.send(EVENT, event=event, queue=data["queue"].name)

    def _created(self, declared, queue):
        if declared is not None and not queue.deleted:
            self.bus.send(EVENT, event="queue-created", queue=queue.name,
                          arguments=self.engine.arguments_of(queue))

    def heard(self, data, sender):
        event = data["event"]
        self.replaying = True
        try:
            if event in CLIENTS:
                self._emit(event, client=_client(sender, data["client"]))
            elif event in MEMBERS:
                client = _client(sender, data["client"])
                self._member(data["channel"], client, event == "client-joined")
                self._emit(event, channel=RemoteChannel(data["channel"]), client=client)
            elif event in CHANNELS:
                self._emit(event, channel=RemoteChannel(data["channel"], data["members"]))
            elif event == "queue-created":
                self._adopt(data["queue"], data["arguments"])
            elif event == "queue-removed":
                if data["queue"] in self.engine.queues:
                    Broker.delete_queue(self.engine, data["queue"])
        finally:
            self.replaying = False

    def _emit(self, event, **data):
        self.engine.emit_here(event, **data)

    def _member(self, channel, client, joined):
        members = self.elsewhere.setdefault(channel, {})
        if joined:
            members[client.instance, client.id] = client
        else:
            members.pop((client.instance, client.id), None)
            if not members:
                del self.elsewhere[channel]

    def hello(self, data, sender):
        """A gateway (re)connected: it hears this gateway's channel members."""
        for name, channel in list(self.engine.channels.items()):
            if channel.members:
                self.bus.send(MEMBERS_NOTICE, channel=name, clients=[
                    client_data(client) for client, _ in channel.members.values()])

    def members_heard(self, data, sender):
        for client in data["clients"]:
            self._member(data["channel"], _client(sender, client), True)

    def gone(self, instance):
        """A gateway died: its members leave their channels (client-left here)."""
        for name in list(self.elsewhere):
            for key, client in list(self.elsewhere[name].items()):
                if key[0] == instance:
                    self._member(name, client, False)
                    self._emit("client-left", channel=RemoteChannel(name), client=client)

    def _adopt(self, name, arguments):
        """A queue another gateway declared: in this gateway's model as RabbitMQ has it
        (no declare of its own; its queue-created emitted here)."""
        engine = self.engine
        if name in engine.queues:
            return
        options, _ = topology.options_from(arguments)
        queue = Broker.queue(engine, name, **options)
        if not queue.declared.called:
            queue.declared.callback(queue)


def _client(sender, data):
    return RemoteClient(sender, data["id"], data["door"], data["name"], data["type"],
                        connected_at=data.get("connected_at", 0.0))
