"""TLS on every TCP door and the admin API, through endpoint strings (`ssl:`, and `mtls:`
with client certificates: bridge.tls), with real TLS clients: Python's ssl module for MQKS
and the admin API, the project's Twino client for Twino. Certificates are made per test."""
import json
import socket
import ssl
import urllib.error
import urllib.request

import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from mqksbridge.bridge import config as configuration
from tests.support.certs import Certificates
from tests.twino.helpers import make_queue


REFUSED = {"EOF", "SSLError", "SSLEOFError", "SSLZeroReturnError", "ConnectionResetError",
           "BrokenPipeError"}


@pytest.fixture
def certs(tmp_path):
    return Certificates(tmp_path)


def lines_over_tls(port, context, lines, replies):
    """Send MQKS lines over TLS; the first `replies` lines back ([] if the server hangs up
    or refuses the handshake: then the exception's type name is the only item)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"".join(line + b"\n" for line in lines))
                data = b""
                while data.count(b"\n") < replies:
                    chunk = tls.recv(65536)
                    if not chunk:
                        return ["EOF"]
                    data += chunk
                return data.split(b"\n")[:replies]
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as exc:
            return [type(exc).__name__]          # (a str: never a reply line)


class TlsLines:
    """A blocking MQKS line client over TLS (run its calls in a thread)."""

    def __init__(self, port, context):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname="localhost")
        self.buffer = b""

    def send(self, line):
        self.sock.sendall(line + b"\n")

    def line(self):
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def close(self):
        self.sock.close()


@pytest_twisted.ensureDeferred
async def test_mqks_over_ssl_endpoint_with_python_ssl(certs, running):
    broker = await running({"mqks": {"listen": [certs.endpoint("ssl")]}})
    got = await deferToThread(lines_over_tls, broker.port("mqks"), certs.context(),
                              [b"c1 consume --confirm q e1", b"m1 publish e1 over-tls",
                               b"p1 ping done"], 3)
    assert got[0] == b"c1 ok "
    assert got[1] == b"c1 ok m1 event=e1 over-tls"
    assert got[2] == b"p1 ok done"


@pytest_twisted.ensureDeferred
async def test_plain_client_on_tls_listener_gets_no_service(certs, running):
    broker = await running({"mqks": {"listen": [certs.endpoint("ssl")]}})

    def plain():
        with socket.create_connection(("127.0.0.1", broker.port("mqks")), timeout=10) as s:
            s.sendall(b"p1 ping x\n")
            data = b""
            try:
                while chunk := s.recv(4096):
                    data += chunk
            except ConnectionResetError:
                pass
            return data
    assert b"p1 ok" not in await deferToThread(plain)


@pytest_twisted.ensureDeferred
async def test_mtls_requires_a_client_certificate_from_the_ca(certs, running):
    broker = await running({"mqks": {"listen": [certs.endpoint(ca=True)]}})
    port = broker.port("mqks")
    good = certs.context(certs.client("app"))
    assert await deferToThread(lines_over_tls, port, good, [b"p1 ping a"], 1) == [b"p1 ok a"]
    for context in (certs.context(), certs.context(certs.client("eve", other_ca=True))):
        got = await deferToThread(lines_over_tls, port, context, [b"p1 ping a"], 1)
        assert len(got) == 1 and got[0] in REFUSED


@pytest_twisted.ensureDeferred
async def test_mtls_optional_client_certificate(certs, running):
    broker = await running({"mqks": {"listen": [certs.endpoint(ca=True,
                                                               client_cert="optional")]}})
    port = broker.port("mqks")
    assert await deferToThread(lines_over_tls, port, certs.context(), [b"p1 ping a"], 1) \
        == [b"p1 ok a"]
    bad = certs.context(certs.client("eve", other_ca=True))
    got = await deferToThread(lines_over_tls, port, bad, [b"p1 ping a"], 1)
    assert len(got) == 1 and got[0] in REFUSED


@pytest_twisted.ensureDeferred
async def test_admin_api_over_tls(certs, running):
    broker = await running({"admin": {"listen": [certs.endpoint("ssl")]}})
    url = f"https://localhost:{broker.port('admin')}/api/overview"

    def get(context):
        with urllib.request.urlopen(url, timeout=10, context=context) as response:
            return response.status, json.loads(response.read())
    status, body = await deferToThread(get, certs.context())
    assert status == 200 and isinstance(body, dict)
    with pytest.raises(urllib.error.URLError):          # a client that does not trust it
        await deferToThread(get, ssl.create_default_context())


@pytest_twisted.ensureDeferred
async def test_twino_client_over_tls_meets_mqks_over_tls(certs, running):
    broker = await running({"twino": {"listen": [certs.endpoint("ssl")]},
                            "mqks": {"listen": [certs.endpoint(ca=True)]}})
    producer = await broker.twino(tls=certs.context())
    consumer = await broker.twino(tls=certs.context())
    await make_queue(producer, "tq", 1, "pull")
    await producer.push("tq", 1, b"secured")
    await producer.ping()
    assert await consumer.join("tq") == 0
    assert [f.content for f in await consumer.pull("tq", 1, 1)] == [b"secured"]
    # a push queue, consumed by an MQKS client with a client certificate
    await make_queue(producer, "tq", 2, "push")
    mqks = await deferToThread(TlsLines, broker.port("mqks"), certs.context(certs.client("app")))
    try:
        mqks.send(b"c1 consume --confirm tq/2")
        assert await deferToThread(mqks.line) == b"c1 ok "
        await producer.push("tq", 2, b"to-mqks")
        assert (await deferToThread(mqks.line)).endswith(b" to-mqks")
    finally:
        mqks.close()

def test_configuration_checks_tls_files(certs):
    configuration.load(overrides={"mqks": {"listen": [certs.endpoint(ca=True)]}})
    missing = certs.endpoint(ca=True).replace(certs.ca_file, certs.ca_file + ".missing")
    with pytest.raises(configuration.ConfigError):
        configuration.load(overrides={"mqks": {"listen": [missing]}})
    with pytest.raises(configuration.ConfigError):
        configuration.load(overrides={"mqks": {"listen": [certs.endpoint(ca=True,
                                                                         client_cert="maybe")]}})


@pytest_twisted.ensureDeferred
async def test_admin_api_over_tls_with_a_bearer_token(certs, running):
    broker = await running({"admin": {"listen": [certs.endpoint("ssl")], "token": "t0ken"}})
    base = f"https://localhost:{broker.port('admin')}"

    def get(path, token=None):
        request = urllib.request.Request(base + path)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10, context=certs.context()) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code
    assert await deferToThread(get, "/api/overview") == 401
    assert await deferToThread(get, "/api/overview", "wrong") == 401
    assert await deferToThread(get, "/metrics", "wrong") == 401
    assert await deferToThread(get, "/api/overview", "t0ken") == 200
    assert await deferToThread(get, "/") == 200            # the dashboard's page itself
