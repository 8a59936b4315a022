"""The admin HTTP endpoint (twisted.web): JSON API, /metrics and the dashboard.

One leaf resource routes on method and path; every answer is built in the reactor thread
from the live broker (bridge.admin.view) and written at once, except that a password check
(HTTP Basic, the login form) waits for its worker thread first (bridge.admin.auth).
Actions (POST, DELETE) must carry `Content-Type: application/json`: a page on another
origin cannot send that without a CORS preflight this server never allows, so a browser
cannot be tricked into them; an `Origin` of another host and, for a session, a missing
CSRF token are refused as well. Queue names are one path segment, percent-encoded
(`orders%2F1` is queue `orders/1`).
"""
import json
from importlib import resources
from urllib.parse import unquote

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web import resource, server

from mqksbridge.bridge.admin import actions
from mqksbridge.bridge.admin.actions import ActionError
from mqksbridge.bridge.admin.metrics import CONTENT_TYPE as METRICS_TYPE
from mqksbridge.bridge.admin.view import DEFAULT_LIMIT, MAX_LIMIT
from mqksbridge.core.permissions import BROKER, QUEUE

STATIC = {                       # file -> content type (shipped as package data)
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "openapi.json": "application/json",
}
log = Logger(namespace="mqksbridge.admin")
PUBLIC = ([], [""], ["static"])          # path[:1] anyone may GET: the dashboard's files
QUEUE_ACTIONS = {"purge": actions.purge, "pause": actions.pause, "resume": actions.resume,
                 "requeue-dead": actions.requeue_dead}


def static_file(name):
    return resources.files("mqksbridge.bridge.admin").joinpath("static", name).read_bytes()


class AdminResource(resource.Resource):
    isLeaf = True

    def __init__(self, view, metrics, auth):
        super().__init__()
        self.view = view
        self.metrics = metrics
        self.auth = auth
        self.requests = 0

    def render(self, request):
        self.requests += 1
        path = [unquote(p.decode("latin-1"), errors="surrogateescape")
                for p in request.path.split(b"/")[1:]]
        method = request.method.decode("ascii", "replace")
        if path == ["api", "login"] and self.auth.users:
            return self.later(request, self.login(request, method))
        try:
            identity = None if path[:1] in PUBLIC else self.auth.identify(request)
        except ActionError as exc:
            return self.error(request, exc)
        if isinstance(identity, defer.Deferred):
            return self.later(request, identity.addCallback(
                lambda who: self.answer(request, method, path, who)))
        return self.answer(request, method, path, identity)

    def answer(self, request, method, path, identity):
        try:
            return self.route(request, method, path, identity)
        except ActionError as exc:
            return self.error(request, exc)

    def later(self, request, d):
        """Write what `d` fires with (or its ActionError) once it fires, unless the client
        has gone by then."""
        gone = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def failed(failure):
            if failure.check(ActionError):
                return self.error(request, failure.value)
            log.failure("admin request {path}", failure, path=request.path)
            return self.json(request, {"error": "internal error"}, 500)

        def write(body):
            if not gone:
                request.write(body)
                request.finish()
        d.addErrback(failed).addCallback(write)
        return server.NOT_DONE_YET

    def error(self, request, exc):
        if exc.status == 401:
            request.setHeader(b"www-authenticate", self.auth.challenge(request))
        retry = getattr(exc, "retry_after", None)
        if retry is not None:
            request.setHeader(b"retry-after", str(retry).encode())
        return self.json(request, {"error": str(exc)}, exc.status)

    def login(self, request, method):
        """POST /api/login {"user", "password"}: a session cookie for the dashboard."""
        try:
            self.only(method, "POST")
            self.json_body(request)
            self.auth.same_origin(request, None)
            body = self.body(request)
        except ActionError as exc:
            return defer.fail(exc)
        user = body.get("user") if isinstance(body, dict) else None
        password = body.get("password") if isinstance(body, dict) else None
        if not isinstance(user, str) or not isinstance(password, str):
            return defer.fail(ActionError(400, 'login wants {"user": ..., "password": ...}'))
        return self.auth.login(request, user, password).addCallback(
            lambda who: self.json(request, who.describe()))

    # -- routing ---------------------------------------------------------------------------
    def route(self, request, method, path, identity):
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
        if kind == "session" and not rest:
            self.only(method, "GET")
            return self.json(request, identity.describe())
        if kind == "logout" and not rest:
            self.only(method, "POST")
            self.check_action(request, identity)
            return self.json(request, self.auth.logout(request, identity))
        if kind == "overview" and not rest:
            self.only(method, "GET")
            return self.json(request, view.overview())
        if kind == "cluster" and not rest:
            self.only(method, "GET")
            return self.later(request, view.cluster().addCallback(
                lambda answer: self.json(request, answer)))
        listings = {"connections": view.connections, "queues": view.queues,
                    "streams": view.streams, "mailboxes": view.mailboxes,
                    "channels": view.channels}
        if kind in listings and not rest:
            self.only(method, "GET")
            return self.json(request, listings[kind](self.limit(request)))
        if kind == "queues" and rest:
            return self.queue(request, method, rest, identity)
        if kind == "connections" and rest:
            return self.connection(request, method, rest, identity)
        raise ActionError(404, "no such resource")

    def queue(self, request, method, rest, identity):
        broker, name = self.view.broker, rest[0]
        if len(rest) == 1:
            if method == "GET":
                queue = broker.queues.get(name)
                if queue is None:
                    raise ActionError(404, f"no queue {name!r}")
                return self.json(request, self.view.queue(queue))
            self.only(method, "DELETE")
            self.check_action(request, identity, (QUEUE, name))
            return self.act(request, actions.delete, broker, name)
        if len(rest) == 2 and rest[1] in QUEUE_ACTIONS:
            self.only(method, "POST")
            touched = [name] + ([name + actions.DEAD_LETTER_SUFFIX]
                                if rest[1] == "requeue-dead" else [])
            self.check_action(request, identity, *((QUEUE, n) for n in touched))
            return self.act(request, QUEUE_ACTIONS[rest[1]], broker, name)
        if len(rest) == 2 and rest[1] == "move":
            self.only(method, "POST")
            body = self.body(request)
            target = body.get("to") if isinstance(body, dict) else None
            if not isinstance(target, str) or not target:
                raise ActionError(400, 'move wants a JSON body {"to": "<queue>"}')
            self.check_action(request, identity, (QUEUE, name), (QUEUE, target))
            return self.act(request, actions.move, broker, name, target)
        raise ActionError(404, "no such resource")

    def connection(self, request, method, rest, identity):
        if len(rest) == 1 and method == "GET":
            traffic = self.view.find_connection(rest[0])
            if traffic is None:
                raise ActionError(404, f"no connection {rest[0]!r}")
            return self.json(request, self.view.connection(traffic))
        if (len(rest) == 1 and method == "DELETE") or (rest[1:] == ["close"] and method == "POST"):
            self.check_action(request, identity, (BROKER, ""))
            return self.act(request, actions.close_connection, self.view, rest[0])
        if len(rest) == 1:
            raise ActionError(405, f"{method} not allowed here")
        raise ActionError(404, "no such resource")

    # -- helpers -----------------------------------------------------------------------------
    @staticmethod
    def only(method, allowed):
        if method != allowed:
            raise ActionError(405, f"{method} not allowed here (use {allowed})")

    def check_action(self, request, identity, *objects):
        """ActionError unless this action may run: sent as JSON, from this site, and by
        an identity with manage on every (kind, name) it touches."""
        self.json_body(request)
        self.auth.same_origin(request, identity)
        for kind, name in objects:
            identity.check(kind, name)

    @staticmethod
    def json_body(request):
        content_type = (request.getHeader(b"content-type") or b"").split(b";")[0].strip()
        if content_type.lower() != b"application/json":
            raise ActionError(415, "actions need Content-Type: application/json")

    def act(self, request, action, *args):
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


def site(view, metrics, auth):
    """The twisted.web Site for the admin endpoint (no per-request log lines); with a
    token or a users file (`auth`), everything but the dashboard's static files needs
    credentials."""
    root = AdminResource(view, metrics, auth)
    factory = server.Site(root)
    factory.log = lambda request: None
    factory.noisy = False
    return factory
