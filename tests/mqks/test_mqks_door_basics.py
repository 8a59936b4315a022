"""MQKS door over real loopback sockets: framing, errors, ping (specs/mqks.md sections 1 to 3)."""
import re
import socket

import pytest_twisted

ERROR = re.compile(r"^(\S*) error (\d{20}[0-9a-zA-Z]{4})$")


@pytest_twisted.ensureDeferred
async def test_ping_echoes_data_with_spaces(server):
    c = await server.mqks()
    assert await c.request("p1 ping d1") == "p1 ok d1"
    assert await c.request("p2 ping x y   ") == "p2 ok x y"
    assert await c.request("p3 ping --confirm") == "p3 ok --confirm"
    await c.close()


@pytest_twisted.ensureDeferred
async def test_bad_requests_get_24_char_error_ids(server):
    c = await server.mqks()
    reply = await c.request("x blabla 123")
    assert ERROR.match(reply).group(1) == "x"
    assert ERROR.match(await c.request("p2 ping")).group(1) == "None"
    assert ERROR.match(await c.request("")).group(1) == "None"
    assert ERROR.match(await c.request(" p1 ping x")).group(1) == ""
    assert ERROR.match(await c.request("p2  ping x")).group(1) == "p2"
    assert ERROR.match(await c.request("x PING a")).group(1) == "x"
    assert await c.request("CONSUME ping upper") == "CONSUME ok upper"
    await c.close()


@pytest_twisted.ensureDeferred
async def test_publish_with_nobody_bound_is_silent(server):
    c = await server.mqks()
    c.send("m1 publish e1 mydata")
    await c.nothing()
    await c.close()


@pytest_twisted.ensureDeferred
async def test_crlf_and_tab(server):
    c = await server.mqks()
    assert await c.request("p1 ping a\r") == "p1 ok a"
    assert ERROR.match(await c.request("p2 ping a\tb")).group(1) == "p2"
    assert await c.request("p3 ping still-open") == "p3 ok still-open"
    await c.close()


@pytest_twisted.ensureDeferred
async def test_line_over_limit_gets_error_then_close(server):
    server.doors["mqks"].max_line = 1000
    c = await server.mqks()
    c.send("p1 ping ok", "p2 ping " + "x" * 2000)
    assert await c.line() == "p1 ok ok"
    assert ERROR.match(await c.line()).group(1) == "None"
    await c.closed


@pytest_twisted.ensureDeferred
async def test_events_longer_than_max_event_are_refused(server):
    """mqks.max_event bytes (1024 by default) bound what stream patterns are tried on."""
    c = await server.mqks()
    assert await c.request("c1 consume --confirm q " + "e" * 1024) == "c1 ok "
    c.send("m1 publish " + "e" * 1024 + " fits")
    assert await c.line() == "c1 ok m1 event=" + "e" * 1024 + " fits"
    assert ERROR.match(await c.request("m2 publish --confirm " + "e" * 1025 + " x")).group(1) == "m2"
    assert ERROR.match(await c.request("m3 publish " + "e" * 1025 + " x")).group(1) == "m3"
    assert await c.request("p1 ping alive") == "p1 ok alive"
    await c.close()


@pytest_twisted.ensureDeferred
async def test_connections_do_not_wait_for_delayed_acks(server):
    """TCP_NODELAY: the outbox already writes once per reactor turn, so Nagle would only
    hold a lone delivery back until the client's delayed ACK (tens of ms)."""
    c = await server.mqks()
    assert await c.request("p1 ping x") == "p1 ok x"
    [conn] = server.doors["mqks"].connections
    assert conn.transport.getHandle().getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    await c.close()
