"""The admin HTTP endpoint (twisted.web): JSON API, /metrics and the dashboard.

One leaf resource routes on method and path; every answer is built in the reactor thread
from the live broker (bridge.admin.view) and written at once. Actions (POST, DELETE) must
carry `Content-Type: application/json`: a page on another origin cannot send that without
a CORS preflight this server never allows, so a browser cannot be tricked into them.
Queue names are one path segment, percent-encoded (`orders%2F1` is queue `orders/1`).
"""
import hmac
import json
from importlib import resources
from urllib.parse import unquote

from twisted.web import resource, server

from mqksbridge.bridge.admin import actions
from mqksbridge.bridge.admin.actions import ActionError
from mqksbridge.bridge.admin.metrics import CONTENT_TYPE as METRICS_TYPE
from mqksbridge.bridge.admin.view import DEFAULT_LIMIT, MAX_LIMIT

STATIC = {                       # file -> content type (shipped as package data)
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "openapi.json": "application/json",
}
QUEUE_ACTIONS = {"purge": actions.purge, "pause": actions.pause, "resume": actions.resume,
                 "requeue-dead": actions.requeue_dead}


def static_file(name):
    return resources.files("mqksbridge.bridge.admin").joinpath("static", name).read_bytes()


class AdminResource(resource.Resource):
    isLeaf = True

    def __init__(self, view, metrics, token=""):
        super().__init__()
        self.view = view
        self.metrics = metrics
        self.requests = 0
        self.token = b"Bearer " + token.encode() if token else None   # admin.token

    def render(self, request):
        self.requests += 1
        path = [unquote(p.decode("latin-1"), errors="surrogateescape")
                for p in request.path.split(b"/")[1:]]
        method = request.method.decode("ascii", "replace")
        if self.token is not None and path[:1] not in ([], [""], ["static"]) and \
                not hmac.compare_digest(request.getHeader(b"authorization") or b"", self.token):
            request.setHeader(b"www-authenticate", b'Bearer realm="mqksbridge"')
            return self.json(request, {"error": "a bearer token is required"}, 401)
        try:
            return self.route(request, method, path)
        except ActionError as exc:
            return self.json(request, {"error": str(exc)}, exc.status)

    # -- routing ---------------------------------------------------------------------------
    def route(self, request, method, path):
        if path in ([""], []):
            return self.static(request, method, "index.html")
        if path[0] == "static" and len(path) == 2 and path[1] in STATIC:
            return self.static(request, method, path[1])
        if path == ["metrics"]:
            self.only(method, "GET")
            request.setHeader(b"content-type", METRICS_TYPE.encode())
            return self.metrics.render()
        if path[0] != "api" or len(path) < 2:
            raise ActionError(404, "no such resource")
        kind, rest = path[1], path[2:]
        view = self.view
        if kind == "openapi.json" and not rest:
            return self.static(request, method, "openapi.json")
        if kind == "overview" and not rest:
            self.only(method, "GET")
            return self.json(request, view.overview())
        listings = {"connections": view.connections, "queues": view.queues,
                    "streams": view.streams, "mailboxes": view.mailboxes,
                    "channels": view.channels}
        if kind in listings and not rest:
            self.only(method, "GET")
            return self.json(request, listings[kind](self.limit(request)))
        if kind == "queues" and rest:
            return self.queue(request, method, rest)
        if kind == "connections" and rest:
            return self.connection(request, method, rest)
        raise ActionError(404, "no such resource")

    def queue(self, request, method, rest):
        broker, name = self.view.broker, rest[0]
        if len(rest) == 1:
            if method == "GET":
                queue = broker.queues.get(name)
                if queue is None:
                    raise ActionError(404, f"no queue {name!r}")
                return self.json(request, self.view.queue(queue))
            self.only(method, "DELETE")
            return self.act(request, actions.delete, broker, name)
        if len(rest) == 2 and rest[1] in QUEUE_ACTIONS:
            self.only(method, "POST")
            return self.act(request, QUEUE_ACTIONS[rest[1]], broker, name)
        if len(rest) == 2 and rest[1] == "move":
            self.only(method, "POST")
            body = self.body(request)
            target = body.get("to") if isinstance(body, dict) else None
            if not isinstance(target, str) or not target:
                raise ActionError(400, 'move wants a JSON body {"to": "<queue>"}')
            return self.act(request, actions.move, broker, name, target)
        raise ActionError(404, "no such resource")

    def connection(self, request, method, rest):
        if len(rest) == 1 and method == "GET":
            traffic = self.view.find_connection(rest[0])
            if traffic is None:
                raise ActionError(404, f"no connection {rest[0]!r}")
            return self.json(request, self.view.connection(traffic))
        if (len(rest) == 1 and method == "DELETE") or (rest[1:] == ["close"] and method == "POST"):
            return self.act(request, actions.close_connection, self.view, rest[0])
        if len(rest) == 1:
            raise ActionError(405, f"{method} not allowed here")
        raise ActionError(404, "no such resource")

    # -- helpers -----------------------------------------------------------------------------
    @staticmethod
    def only(method, allowed):
        if method != allowed:
            raise ActionError(405, f"{method} not allowed here (use {allowed})")

    def act(self, request, action, *args):
        content_type = (request.getHeader(b"content-type") or b"").split(b";")[0].strip()
        if content_type.lower() != b"application/json":
            raise ActionError(415, "actions need Content-Type: application/json")
        return self.json(request, action(*args))

    @staticmethod
    def body(request):
        raw = request.content.read(1 << 16) if request.content is not None else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            raise ActionError(400, "the body is not JSON") from None

    @staticmethod
    def limit(request):
        raw = request.args.get(b"limit", [b""])[0]
        if not raw:
            return DEFAULT_LIMIT
        try:
            value = int(raw)
        except ValueError:
            raise ActionError(400, "limit must be an integer") from None
        if not 1 <= value <= MAX_LIMIT:
            raise ActionError(400, f"limit must be between 1 and {MAX_LIMIT}")
        return value

    @staticmethod
    def json(request, data, status=200):
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @staticmethod
    def static(request, method, name):
        if method != "GET":
            raise ActionError(405, f"{method} not allowed here (use GET)")
        request.setHeader(b"content-type", STATIC[name].encode())
        request.setHeader(b"cache-control", b"no-cache")
        return static_file(name)


def site(view, metrics, token=""):
    """The twisted.web Site for the admin endpoint (no per-request log lines); with a
    `token`, everything but the dashboard's static files needs `Authorization: Bearer`."""
    root = AdminResource(view, metrics, token)
    factory = server.Site(root)
    factory.log = lambda request: None
    factory.noisy = False
    return factory
