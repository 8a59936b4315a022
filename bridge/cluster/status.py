"""What a gateway knows of its cluster, for the admin endpoint's /api/cluster, the dashboard
and `mqksbridge cluster status`.

The RabbitMQ side (nodes and their state, the gateways connected, the fleet's queues with
their replicas) comes from RabbitMQ's management HTTP API, asked with the credentials of
the gateway's own AMQP URL: it answers from any node about the whole cluster, and needs no
Erlang cookie or rabbitmqctl on the gateway's machine. The answer is fetched when asked
for and kept `max_age` seconds, so dashboards polling every second cost one request per
that time, and one request at a time. The gateway side (connected where, why not, its
clients per door) is read from this process.
"""
import base64
import json
from urllib.parse import quote, urlsplit

from twisted.internet import defer, protocol
from twisted.web.client import Agent, ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers

from mqksbridge.bridge.cluster.gateway import node_name, urls
from mqksbridge.bridge.settings import amqp_url, without_password

MANAGEMENT_PORT = 15672
GATEWAY_CONNECTION = "mqksbridge "         # client_properties.connection_name of a gateway


def management_urls(cluster):
    """`cluster.management`, else http://HOST:15672/ of each node URL's host."""
    if cluster["management"]:
        return list(cluster["management"])
    seen = []
    for url in cluster["urls"]:
        base = f"http://{amqp_url(url)[1]}:{MANAGEMENT_PORT}/"
        if base not in seen:
            seen.append(base)
    return seen


def credentials(url):
    parts = urlsplit(url)
    from urllib.parse import unquote
    return unquote(parts.username or "guest"), unquote(parts.password or "guest")


def nodes(answer):
    """/api/nodes -> [{name, running, type, uptime, memory, alarms, partitions}]."""
    return [{"name": n["name"], "running": bool(n.get("running")),
             "type": n.get("type", "disc"),
             "uptime": round(n.get("uptime", 0) / 1000.0, 1),
             "memory": n.get("mem_used", 0),
             "alarms": [a for a, on in (("memory", n.get("mem_alarm")),
                                        ("disk", n.get("disk_free_alarm"))) if on],
             "partitions": list(n.get("partitions", []))}
            for n in sorted(answer, key=lambda n: n["name"])]


def gateways(answer):
    """/api/connections -> the fleet's gateways: [{name, node, channels, state}]."""
    found = []
    for c in answer:
        name = (c.get("client_properties") or {}).get("connection_name", "")
        if name.startswith(GATEWAY_CONNECTION):
            found.append({"name": name[len(GATEWAY_CONNECTION):], "node": c.get("node"),
                          "channels": c.get("channels", 0), "state": c.get("state")})
    return sorted(found, key=lambda g: g["name"])


def queues(answer, prefix):
    """/api/queues/VHOST -> the fleet's queues: [{name, amqp, type, leader, replicas,
    online, messages, unacked, consumers}] (`name` as the doors say it)."""
    head = prefix + "q."
    found = []
    for q in answer:
        if not q["name"].startswith(head):
            continue
        members = q.get("members") or [q.get("node")]
        found.append({"name": q["name"][len(head):], "amqp": q["name"],
                      "type": q.get("type", "classic"), "leader": q.get("leader") or q.get("node"),
                      "replicas": len(members), "online": len(q.get("online") or members),
                      "messages": q.get("messages_ready", 0),
                      "unacked": q.get("messages_unacknowledged", 0),
                      "consumers": q.get("consumers", 0)})
    return sorted(found, key=lambda q: q["name"])


class ClusterStatus:
    """The /api/cluster answer of a gateway (`engine` the RabbitMQ engine)."""

    def __init__(self, config, engine, doors, reactor, max_age=2.0, timeout=5.0):
        self.cluster = config["cluster"]
        self.engine = engine
        self.doors = doors
        self.clock = reactor           # wall-clock time of HTTP requests, not the broker's
        self.max_age = max_age
        self.timeout = timeout
        self.agent = Agent(reactor, connectTimeout=timeout)
        self.user, self.password = credentials(urls(self.cluster)[0])
        self.vhost = amqp_url(urls(self.cluster)[0])[3] or "/"
        self.bases = management_urls(self.cluster)
        self._answer = None            # (time, rabbitmq part)
        self._pending = None           # the fetch under way: later askers share it
        self._waiters = []

    def describe(self):
        """A Deferred of the whole answer (never fails: what went wrong is in it)."""
        now = self.clock.seconds()
        if self._answer is not None and now - self._answer[0] < self.max_age:
            return defer.succeed(self._with_gateway(self._answer[1]))
        if self._pending is None:
            self._pending = defer.ensureDeferred(self._fetch())
            self._pending.addBoth(self._fetched)
        waiting = defer.Deferred()
        self._waiters.append(waiting)
        return waiting

    def _fetched(self, rabbitmq):
        self._pending = None
        self._answer = (self.clock.seconds(), rabbitmq)
        waiters, self._waiters = self._waiters, []
        for waiting in waiters:
            waiting.callback(self._with_gateway(rabbitmq))

    def _with_gateway(self, rabbitmq):
        connection = self.engine.connection
        clients = {name: len(door.traffic.live) for name, door in self.doors.items()}
        return {"engine": "rabbitmq", "gateway": node_name(self.cluster),
                "connected": without_password(connection.url) if connection.url else None,
                "failure": connection.failure,
                "clients": clients, "prefix": self.cluster["prefix"],
                "vhost": self.vhost, "replicas": self.cluster["replicas"], **rabbitmq}

    async def _fetch(self):
        """Nodes, connections and queues from the first management URL that answers."""
        errors = []
        for base in self.bases:
            try:
                got = [await self._get(base, path) for path in (
                    "api/nodes", "api/connections",
                    f"api/queues/{quote(self.vhost, safe='')}")]
            except Exception as exc:        # refused, timed out, 401, not JSON...
                errors.append(f"{base}: {exc}")
                continue
            return {"management": base, "error": None, "nodes": nodes(got[0]),
                    "gateways": gateways(got[1]),
                    "queues": queues(got[2], self.cluster["prefix"])}
        return {"management": None, "error": "; ".join(errors) or "no management URL",
                "nodes": [], "gateways": [], "queues": []}

    async def _get(self, base, path):
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request = self.agent.request(b"GET", (base.rstrip("/") + "/" + path).encode(),
                                     Headers({b"authorization": [f"Basic {token}".encode()]}))
        timer = self.clock.callLater(self.timeout, request.cancel)
        try:
            response = await request
            body = defer.Deferred()
            response.deliverBody(_Body(body))
            body = await body
        finally:
            if timer.active():
                timer.cancel()
        if response.code != 200:
            raise ConnectionError(f"HTTP {response.code} for /{path}")
        return json.loads(body)


class _Body(protocol.Protocol):
    """A response's body into `done` (a Deferred of bytes)."""

    def __init__(self, done):
        self.done, self.parts = done, []

    def dataReceived(self, data):
        self.parts.append(data)

    def connectionLost(self, reason):
        if reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(b"".join(self.parts))
        else:
            self.done.errback(reason)
