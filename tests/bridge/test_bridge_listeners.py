"""bridge.listeners: every stream listener, TLS with client certificates (`mtls:`) included,
listens with a backlog of BACKLOG unless its endpoint string names one (Twisted's default
of 50 makes most of a burst of simultaneous connects wait out a SYN retry)."""
import pytest
import pytest_twisted
from twisted.internet import protocol, reactor

from mqksbridge.bridge.listeners import BACKLOG, ListenerService, with_backlog
from tests.support.certs import Certificates


@pytest.mark.parametrize("description", [
    "tcp:0", "tcp6:0", "ssl:0:privateKey=k.pem", "mtls:0:privateKey=k.pem", "unix:/tmp/s",
    "MTLS:0", " tcp:0"])
def test_every_stream_kind_gets_the_backlog(description):
    assert with_backlog(description) == f"{description}:backlog={BACKLOG}"


@pytest.mark.parametrize("description", ["tcp:0:backlog=5", "mtls:0:backlog=7:privateKey=k"])
def test_a_backlog_the_endpoint_names_is_kept(description):
    assert with_backlog(description) == description


@pytest_twisted.ensureDeferred
async def test_an_mtls_listener_listens_with_the_backlog(tmp_path):
    certs = Certificates(tmp_path)
    listener = ListenerService(
        reactor, f"mtls:0:interface=127.0.0.1:privateKey={certs.server_key}:"
                 f"certKey={certs.server_cert}:caCerts={certs.ca_file}",
        protocol.Factory.forProtocol(protocol.Protocol))
    listener.startService()
    try:
        port = await listener.ready
        assert port.getHost().port > 0
        assert port.backlog == BACKLOG
    finally:
        await listener.stopService()
