"""Logging in to the admin API with users-file accounts, over real HTTP (bridge.admin.auth):
HTTP Basic, the login form's session cookie, the bearer token beside them, and every
refusal: no credentials, a wrong password, no manage permission for an action, an expired
session, a cross-site POST, too many failed logins from one peer."""
import base64
import http.client
import json

import pytest
import pytest_twisted
from twisted.internet import defer, task
from twisted.internet.threads import deferToThread

from mqksbridge.bridge.admin.auth import Failures
from mqksbridge.bridge.cli import admin as cli_admin
from mqksbridge.bridge.security.users import hash_password
from tests.conftest import RunningBroker
from tests.support.certs import Certificates

FAST = {"n": 1 << 10}                       # cheap hashes for tests (the file says N)


def users_file(path):
    path.write_text(f'''
[users.ops]
password = "{hash_password("ops-secret", **FAST)}"
publish = ["*"]
consume = ["*"]
manage = ["*"]

[users.jobs]
password = "{hash_password("jobs-secret", **FAST)}"
manage = ["queue:jobs", "queue:jobs.dlq"]

[users.app]
password = "{hash_password("app-secret", **FAST)}"
consume = ["queue:jobs"]
''')
    return str(path)


def call(port, method, path, body=None, headers=None, tls=None):
    """(status, headers dict (lower-case names; set-cookie a list), the body: parsed when
    it is JSON)."""
    if tls is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("localhost", port, timeout=10, context=tls)
    try:
        data = None if body is None else json.dumps(body).encode()
        sent = dict(headers or {})
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=sent)
        answer = conn.getresponse()
        raw = answer.read()
        got = {}
        for name, value in answer.getheaders():
            if name.lower() == "set-cookie":
                got.setdefault("set-cookie", []).append(value)
            else:
                got[name.lower()] = value
        parsed = json.loads(raw) if got.get("content-type") == "application/json" else raw
        return answer.status, got, parsed
    finally:
        conn.close()


def acall(*args, **kwargs):
    return deferToThread(call, *args, **kwargs)


def basic(user, password):
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def session_headers(cookie, csrf=None, origin=None):
    headers = {"Cookie": cookie}
    if csrf is not None:
        headers["X-CSRF-Token"] = csrf
    if origin is not None:
        headers["Origin"] = origin
    return headers


async def log_in(port, user, password, tls=None, origin=None):
    """(cookie header value, csrf token, Set-Cookie line) of a form login."""
    headers = {} if origin is None else {"Origin": origin}
    status, got, answer = await acall(port, "POST", "/api/login",
                                      {"user": user, "password": password}, headers, tls)
    assert status == 200, (status, answer)
    line = got["set-cookie"][0]
    return line.split(";", 1)[0], answer["csrf"], line


async def with_jobs(broker):
    """Queues `jobs` and `other`, made through MQKS (no users for MQKS in these tests:
    the MQKS listener acts as `ops`)."""
    mqks = await broker.mqks()
    for i, queue in enumerate(("jobs", "other")):
        assert await mqks.request(f"c{i} consume --confirm {queue} ev") == f"c{i} ok "
        assert await mqks.request(f"d{i} delete_consumer --confirm c{i}") == f"d{i} ok "
    return mqks


def broker_config(tmp_path, **admin):
    return {"security": {"users": users_file(tmp_path / "users.toml")},
            "mqks": {"listen_users": {RunningBroker.LOOPBACK["mqks"]: "ops"}},
            "admin": admin}


@pytest_twisted.ensureDeferred
async def test_basic_login_reads_and_acts_by_manage_rules(running, tmp_path):
    broker = await running(broker_config(tmp_path))
    port = broker.port("admin")
    await with_jobs(broker)
    counters = broker.top.security.counters

    status, got, answer = await acall(port, "GET", "/api/overview")
    assert status == 401 and "log in" in answer["error"]
    assert got["www-authenticate"].startswith('Basic realm="mqksbridge"')
    assert (await acall(port, "GET", "/metrics"))[0] == 401
    assert (await acall(port, "GET", "/"))[0] == 200        # the page with the login form

    status, _, answer = await acall(port, "GET", "/api/overview",
                                    headers=basic("ops", "wrong"))
    assert (status, answer) == (401, {"error": "wrong user or password"})
    assert counters["security.admin.login"] == 1
    status, _, answer = await acall(port, "GET", "/api/overview",
                                    headers=basic("nobody", "ops-secret"))
    assert status == 401 and counters["security.admin.login"] == 2
    status, _, answer = await acall(port, "GET", "/api/overview",
                                    headers=basic("app", "app-secret"))
    assert status == 403 and "no manage permission" in answer["error"]

    status, _, overview = await acall(port, "GET", "/api/overview",
                                      headers=basic("jobs", "jobs-secret"))
    assert status == 200 and overview["totals"]["queues"] >= 2
    assert (await acall(port, "GET", "/metrics", headers=basic("jobs", "jobs-secret")))[0] == 200
    status, _, me = await acall(port, "GET", "/api/session", headers=basic("jobs", "jobs-secret"))
    assert me == {"user": "jobs", "via": "basic", "csrf": None, "expires": None}

    jobs = basic("jobs", "jobs-secret")
    status, _, answer = await acall(port, "POST", "/api/queues/jobs/purge", {}, jobs)
    assert (status, answer) == (200, {"queue": "jobs", "purged": 0})
    status, _, answer = await acall(port, "POST", "/api/queues/other/purge", {}, jobs)
    assert (status, answer) == (403, {"error": "jobs may not manage queue 'other'"})
    status, _, answer = await acall(port, "POST", "/api/queues/jobs/move", {"to": "other"}, jobs)
    assert status == 403 and "'other'" in answer["error"]
    assert (await acall(port, "DELETE", "/api/queues/other", {}, jobs))[0] == 403
    assert (await acall(port, "POST", "/api/queues/jobs/requeue-dead", {}, jobs))[0] == 404
    connections = (await acall(port, "GET", "/api/connections", headers=jobs))[2]["items"]
    status, _, answer = await acall(port, "POST",
                                    f"/api/connections/{connections[0]['id']}/close", {}, jobs)
    assert (status, answer) == (403, {"error": "jobs may not manage the broker"})
    assert counters["security.admin.denied"] == 1          # app's login, not the 403s above
    assert "other" in broker.broker.queues

    ops = basic("ops", "ops-secret")
    status, _, answer = await acall(port, "DELETE", "/api/queues/other", {}, ops)
    assert (status, answer) == (200, {"queue": "other", "deleted": True})


@pytest_twisted.ensureDeferred
async def test_login_form_session_cookie_csrf_expiry_and_logout(running, tmp_path):
    broker = await running(broker_config(tmp_path, session_lifetime=600.0))
    port = broker.port("admin")
    await with_jobs(broker)
    own = f"http://127.0.0.1:{port}"

    status, _, answer = await acall(port, "POST", "/api/login",
                                    {"user": "jobs", "password": "nope"})
    assert (status, answer) == (401, {"error": "wrong user or password"})
    cookie, csrf, line = await log_in(port, "jobs", "jobs-secret", origin=own)
    attributes = {part.strip().split("=")[0].lower() for part in line.split(";")[1:]}
    assert {"httponly", "path", "max-age"} <= attributes and "secure" not in attributes
    assert "samesite=strict" in line.lower() and "max-age=600" in line.lower()

    status, _, me = await acall(port, "GET", "/api/session", headers=session_headers(cookie))
    assert status == 200 and (me["user"], me["via"], me["csrf"]) == ("jobs", "session", csrf)
    assert me["expires"] == broker.clock.seconds() + 600
    assert (await acall(port, "GET", "/api/queues", headers=session_headers(cookie)))[0] == 200

    purge = "/api/queues/jobs/purge"
    status, _, answer = await acall(port, "POST", purge, {}, session_headers(cookie, csrf, own))
    assert status == 200 and answer["purged"] == 0
    status, _, answer = await acall(port, "POST", purge, {}, session_headers(cookie, csrf,
                                                                              "http://evil.example"))
    assert status == 403 and "cross-site" in answer["error"]
    status, _, answer = await acall(port, "POST", purge, {}, session_headers(cookie, None, own))
    assert status == 403 and "X-CSRF-Token" in answer["error"]
    status, _, answer = await acall(port, "POST", purge, {}, session_headers(cookie, "guess"))
    assert status == 403
    status, _, answer = await acall(port, "POST", "/api/login",
                                    {"user": "jobs", "password": "jobs-secret"},
                                    {"Origin": "http://evil.example"})
    assert status == 403 and "cross-site" in answer["error"]       # no login CSRF either
    status, _, answer = await acall(port, "POST", "/api/queues/other/pause", {},
                                    session_headers(cookie, csrf, own))
    assert status == 403 and broker.broker.queues["other"].mode != "paused"

    broker.clock.advance(599)
    assert (await acall(port, "GET", "/api/overview", headers=session_headers(cookie)))[0] == 200
    broker.clock.advance(1)
    status, got, answer = await acall(port, "GET", "/api/overview",
                                      headers=session_headers(cookie))
    assert (status, answer) == (401, {"error": "the session expired (log in again)"})
    status, _, answer = await acall(port, "GET", "/api/queues",      # the page's next one
                                    headers=session_headers(cookie))
    assert (status, answer) == (401, {"error": "the session expired (log in again)"})
    status, _, answer = await acall(port, "GET", "/api/overview",
                                    headers=session_headers("mqksbridge_session=made-up"))
    assert status == 401 and "no such session" in answer["error"]

    cookie, csrf, _ = await log_in(port, "jobs", "jobs-secret")
    assert (await acall(port, "POST", "/api/logout", {}, session_headers(cookie)))[0] == 403
    status, got, answer = await acall(port, "POST", "/api/logout", {},
                                      session_headers(cookie, csrf, own))
    assert (status, answer) == (200, {"user": "jobs", "logged_out": True})
    assert "max-age=0" in got["set-cookie"][0].lower()
    assert (await acall(port, "GET", "/api/overview", headers=session_headers(cookie)))[0] == 401


@pytest_twisted.ensureDeferred
async def test_failed_logins_are_limited_per_peer_until_the_window_passes(running, tmp_path):
    broker = await running(broker_config(tmp_path, login_failures=3, login_window=60.0))
    port = broker.port("admin")
    counters = broker.top.security.counters
    for _ in range(3):
        assert (await acall(port, "GET", "/api/overview", headers=basic("ops", "x")))[0] == 401
    status, got, answer = await acall(port, "GET", "/api/overview",
                                      headers=basic("ops", "ops-secret"))
    assert status == 429 and "too many failed logins" in answer["error"]
    assert 1 <= int(got["retry-after"]) <= 61
    status, _, _ = await acall(port, "POST", "/api/login", {"user": "ops", "password": "ops-secret"})
    assert status == 429
    assert counters["security.admin.login"] == 3 and counters["security.admin.limit"] == 2
    broker.clock.advance(60)
    assert (await acall(port, "GET", "/api/overview", headers=basic("ops", "ops-secret")))[0] == 200


def test_failure_counts_are_bounded_and_forget_old_windows():
    clock = task.Clock()
    failures = Failures(clock, limit=2, window=10.0, max_peers=100)
    for peer in range(1000):
        failures.failed(f"10.0.{peer // 256}.{peer % 256}")
    assert len(failures.peers) == 100
    failures.failed("a")
    assert not failures.blocked("a")
    failures.failed("a")
    assert failures.blocked("a") == 10.0
    clock.advance(9.5)
    assert failures.blocked("a") == 0.5
    clock.advance(0.5)
    assert not failures.blocked("a") and "a" not in failures.peers


@pytest_twisted.ensureDeferred
async def test_bearer_token_beside_users_and_secure_cookie_over_tls(running, tmp_path):
    certs = Certificates(tmp_path)
    config = broker_config(tmp_path, token="t0ken", listen=[certs.endpoint("ssl")])
    broker = await running(config)
    port, tls = broker.port("admin"), certs.context()
    token = {"Authorization": "Bearer t0ken"}
    status, _, me = await acall(port, "GET", "/api/session", headers=token, tls=tls)
    assert me == {"user": None, "via": "token", "csrf": None, "expires": None}
    assert (await acall(port, "GET", "/api/overview",
                        headers={"Authorization": "Bearer nope"}, tls=tls))[0] == 401
    status, got, _ = await acall(port, "GET", "/api/overview", tls=tls)
    assert status == 401 and "Bearer" in got["www-authenticate"]
    assert (await acall(port, "GET", "/api/overview", headers=basic("ops", "ops-secret"),
                        tls=tls))[0] == 200
    cookie, csrf, line = await log_in(port, "ops", "ops-secret", tls=tls)
    assert "; secure" in line.lower() and "httponly" in line.lower()
    status, _, me = await acall(port, "GET", "/api/session", headers={"Cookie": cookie},
                                tls=tls)
    assert (status, me["user"]) == (200, "ops")


@pytest_twisted.ensureDeferred
async def test_without_users_or_token_the_endpoint_stays_open(server):
    port = server.port("admin")
    status, _, me = await acall(port, "GET", "/api/session")
    assert me == {"user": None, "via": "open", "csrf": None, "expires": None}
    assert (await acall(port, "GET", "/api/overview"))[0] == 200
    status, _, answer = await acall(port, "POST", "/api/login", {"user": "a", "password": "b"})
    assert status == 404
    mqks = await server.mqks()
    assert await mqks.request("c1 consume --confirm open-q ev") == "c1 ok "
    assert (await acall(port, "POST", "/api/queues/open-q/pause", {}))[0] == 200



@pytest_twisted.ensureDeferred
async def test_cli_admin_commands_log_in_from_the_environment(running, tmp_path, monkeypatch):
    broker = await running(broker_config(tmp_path))
    base = f"http://127.0.0.1:{broker.port('admin')}"
    with pytest.raises(cli_admin.AdminError, match="^401: log in"):
        await deferToThread(cli_admin.call, base, "/api/overview")
    monkeypatch.setenv("MQKSBRIDGE_ADMIN_USER", "jobs")
    monkeypatch.setenv("MQKSBRIDGE_ADMIN_PASSWORD", "jobs-secret")
    assert (await deferToThread(cli_admin.call, base, "/api/session"))["user"] == "jobs"
    await with_jobs(broker)
    with pytest.raises(cli_admin.AdminError, match="^403: jobs may not manage queue 'other'"):
        await deferToThread(cli_admin.call, base, "/api/queues/other/purge", "POST", {})


def test_a_full_login_queue_is_503_and_no_failure_of_the_peer(tmp_path):
    """Security.login refuses at once when MAX_PENDING checks wait (here: checks that never
    finish): the admin answers 503 and does not count it against the peer."""
    from twisted.web.test.requesthelper import DummyRequest

    from mqksbridge.bridge.admin.auth import AdminAuth
    from mqksbridge.bridge.security import MAX_PENDING, Security
    from mqksbridge.bridge.security.users import load
    security = Security(load(users_file(tmp_path / "users.toml")),
                        run=lambda f, *args: defer.Deferred())
    auth = AdminAuth(security, "", task.Clock(), 60.0, 1, 60.0)
    waiting = [auth.check_password(DummyRequest([b""]), "ops", "x") for _ in range(MAX_PENDING)]
    refused = []
    auth.check_password(DummyRequest([b""]), "ops", "x").addErrback(refused.append)
    assert refused[0].value.status == 503 and not auth.failures.peers
    fired = []
    for d in waiting:
        d.addBoth(fired.append)
    assert fired == []                       # the 64 still wait for their checks
