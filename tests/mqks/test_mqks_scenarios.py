"""The MQKS scenarios S1-S28 the original server was checked against, over real loopback.

Each scenario is restated in our own words. Where our documented differences apply the
test says so: a confirm that follows a binding change comes right after the `--update`
lines (no 0.1 s timer), so for consume it always precedes the backlog; S28 drops the
client by closing its socket instead of the original's `_eval ... .shutdown(2)`.

Lines are compared whole, as str: `"c1 ok "` (trailing space) is a confirm.
Every request id is unique within its test; each test gets a fresh broker.
"""
import re

import pytest_twisted

from tests.support.waits import until

ERROR = re.compile(r"^(\S*) error (\d{20}[0-9a-zA-Z]{4})$")
CLIENT_ID = re.compile(r"^127\.0\.0\.1:\d+\.[0-9a-zA-Z]{4}$")


# -- helpers ----------------------------------------------------------------------------

async def ping(c, tag):
    """A round trip on `c`: every line `c` sent before has been handled."""
    assert await c.request(f"{tag} ping sync") == f"{tag} ok sync"


async def publish(p, mid, event, data):
    """Publish and wait until the broker has handled it (ping round trip on `p`)."""
    p.send(f"{mid} publish {event} {data}")
    await ping(p, f"sync-{mid}")


async def drop(server, c):
    """Close `c` and wait until the broker has processed the disconnect."""
    port = c.transport.getHost().port
    await c.close()
    door = server.doors["mqks"]
    await until(lambda: not any(conn.transport.getPeer().port == port
                                for conn in door.connections), what="the disconnect")


def received(c):
    """Take every line `c` has received and nobody awaited yet (as str)."""
    lines = [raw.decode("utf-8", "surrogateescape") for raw in c.lines]
    c.lines.clear()
    return lines


async def cleanup(c, consumers=(), queues=()):
    """A scenario's usual ending: delete_consumer then delete_queue, each confirmed."""
    for cid in consumers:
        assert await c.request(f"dc-{cid} delete_consumer --confirm {cid}") == f"dc-{cid} ok "
    for queue in queues:
        assert await c.request(f"dq-{queue} delete_queue --confirm {queue}") == f"dq-{queue} ok "


async def evaluate(c, rid, expression):
    return await c.request(f"{rid} _eval {expression}")


# -- S1-S28 -----------------------------------------------------------------------------

@pytest_twisted.ensureDeferred
async def test_s01_publish_order(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    p.send("m0 publish e1 0", "m1 publish e1 1", "m2 publish e1 2")
    assert await c.lines_n(3) == ["c1 ok m0 event=e1 0", "c1 ok m1 event=e1 1",
                                  "c1 ok m2 event=e1 2"]
    await c.nothing()
    await cleanup(c, ["c1"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s02_ping(server):
    c = await server.mqks()
    assert await c.request("p1 ping d1") == "p1 ok d1"


@pytest_twisted.ensureDeferred
async def test_s03_bad_request(server):
    c = await server.mqks()
    c.send("m1 publish e1 mydata")
    await c.nothing()
    reply = await c.request("blabla 123")
    match = ERROR.match(reply)
    assert match and match.group(1) == "None" and len(match.group(2)) == 24


@pytest_twisted.ensureDeferred
async def test_s04_auto_ack_is_not_redelivered(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    c.send("d1 delete_consumer c1")
    assert await c.request("c2 consume --confirm q1 e1") == "c2 ok "
    await c.nothing()
    await cleanup(c, ["c2"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s05_manual_ack_redelivered_after_disconnect(server):
    p = await server.mqks()
    c1 = await server.mqks()
    assert await c1.request("c1 consume --confirm q1 e1 --manual-ack") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c1.line() == "c1 ok m1 event=e1 1"
    await drop(server, c1)

    c2 = await server.mqks()
    c2.send("c2 consume --confirm q1 e1 --manual-ack")
    assert await c2.lines_n(2) == ["c2 ok ", "c2 ok m1 event=e1,retry=1 1"]
    c2.send("a1 ack c2 m1")
    await drop(server, c2)

    c3 = await server.mqks()
    assert await c3.request("c3 consume --confirm q1 e1 --manual-ack") == "c3 ok "
    await c3.nothing()
    await cleanup(c3, ["c3"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s06_two_manual_ack_queues(server):
    p, c1, c2 = await server.mqks(), await server.mqks(), await server.mqks()
    c1.send("c1 consume q1 e1 --manual-ack")
    assert await c2.request("c2 consume --confirm q2 e1 --manual-ack") == "c2 ok "
    # The legacy v0.2 form deletes a queue literally named "qN --when-unused=5": no reply.
    c1.send("x1 delete_queue q1 --when-unused=5")
    c2.send("x2 delete_queue q2 --when-unused=5")
    await ping(c1, "s1")
    await ping(c2, "s2")

    p.send("m1 publish e1 1")
    assert await c1.line() == "c1 ok m1 event=e1 1"
    assert await c2.line() == "c2 ok m1 event=e1 1"
    c1.send("a1 ack c1 m1")
    await drop(server, c2)

    c3 = await server.mqks()
    c3.send("c3 consume --confirm q2 e1 --manual-ack", "x3 delete_queue q2 e1 --when-unused=5")
    assert await c3.lines_n(2) == ["c3 ok ", "c3 ok m1 event=e1,retry=1 1"]
    c3.send("a3 ack c3 m1")
    await c3.nothing()
    await c1.nothing()
    await cleanup(c1, ["c1"], ["q1"])
    await cleanup(c3, ["c3"], ["q2"])


@pytest_twisted.ensureDeferred
async def test_s07_simple_consume(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    p.send("m1 publish e1 hello")
    assert await c.line() == "c1 ok m1 event=e1 hello"
    await c.nothing()
    await cleanup(c, ["c1"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s08_consume_add_extends_kept_bindings(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    assert await c.request("d1 delete_consumer --confirm c1") == "d1 ok "
    # Difference: the confirm follows the --update at once (no 0.1 s timer).
    c.send("c2 consume --confirm q1 --add e2")
    assert await c.lines_n(2) == ["c2 ok --update q1 e1 e2", "c2 ok "]
    p.send("m1 publish e1 1")
    assert await c.line() == "c2 ok m1 event=e1 1"
    p.send("m2 publish e2 2")
    assert await c.line() == "c2 ok m2 event=e2 2"
    await publish(p, "m3", "e3", "3")
    await c.nothing()
    await cleanup(c, ["c2"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s09_fan_out_to_two_queues(server):
    p, c1, c2 = await server.mqks(), await server.mqks(), await server.mqks()
    c1.send("c1 consume q1 e1")
    await ping(c1, "s1")
    assert await c2.request("c2 consume --confirm q2 e1") == "c2 ok "
    p.send("m1 publish e1 1")
    assert await c1.line() == "c1 ok m1 event=e1 1"
    assert await c2.line() == "c2 ok m1 event=e1 1"
    await cleanup(c1, ["c1"], ["q1"])
    await cleanup(c2, ["c2"], ["q2"])


@pytest_twisted.ensureDeferred
async def test_s10_one_queue_two_consumers_each_message_once(server):
    p, c1, c2 = await server.mqks(), await server.mqks(), await server.mqks()
    c1.send("c1 consume q1 e1")
    await ping(c1, "s1")
    assert await c2.request("c2 consume --confirm q1 e1") == "c2 ok "
    receivers = []
    for n in (1, 2):
        await publish(p, f"m{n}", "e1", str(n))
        await c1.sync()
        await c2.sync()
        got = [(cid, received(conn)) for cid, conn in (("c1", c1), ("c2", c2))]
        got = [(cid, lines) for cid, lines in got if lines]
        assert len(got) == 1, got
        cid, lines = got[0]
        assert lines == [f"{cid} ok m{n} event=e1 {n}"]
        receivers.append(cid)
    assert sorted(receivers) == ["c1", "c2"]    # the original alternates, and so do we
    await cleanup(c1, ["c1"])
    await cleanup(c2, ["c2"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s11_delete_consumer_stops_delivery(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    assert await c.request("d1 delete_consumer --confirm c1") == "d1 ok "
    await publish(p, "m2", "e1", "2")
    await c.nothing()
    await cleanup(c, (), ["q1"])


@pytest_twisted.ensureDeferred
async def test_s12_queue_keeps_messages_until_delete_queue(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    assert await c.request("d1 delete_consumer --confirm c1") == "d1 ok "

    await publish(p, "m2", "e1", "2")
    await c.nothing()
    c.send("c2 consume --confirm q1 e1")
    assert await c.lines_n(2) == ["c2 ok ", "c2 ok m2 event=e1 2"]

    c.send("dq delete_queue --confirm q1")
    assert await c.lines_n(2) == ["c2 ok --update q1", "dq ok "]
    await publish(p, "m3", "e1", "2")
    await c.nothing()
    # c2 went with its queue: delete_consumer gets no reply, even with --confirm.
    c.send("d2 delete_consumer c2", "d3 delete_consumer --confirm c2")
    assert await c.request("p1 ping after") == "p1 ok after"


@pytest_twisted.ensureDeferred
async def test_s13_bare_when_unused_deletes_with_last_consumer(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1 --delete-queue-when-unused") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    assert await c.request("d1 delete_consumer --confirm c1") == "d1 ok "
    assert await evaluate(p, "v1", "len(state.queues)") == "v1 ok 0"
    await publish(p, "m2", "e1", "2")
    c.send("c2 consume q1 e1 --delete-queue-when-unused")
    await c.nothing()
    assert await c.request("d2 delete_consumer --confirm c2") == "d2 ok "


@pytest_twisted.ensureDeferred
async def test_s14_when_unused_timer_is_cancelled_by_a_consume(server):
    c, p = await server.mqks(), await server.mqks()
    consume = "consume --confirm q1 e1 --delete-queue-when-unused=1"
    assert await c.request(f"c1 {consume}") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    assert await c.request("d1 delete_consumer --confirm c1") == "d1 ok "

    await publish(p, "m2", "e1", "2")
    await c.nothing()
    c.send(f"c2 {consume}")                      # well within the 1 s
    assert await c.lines_n(2) == ["c2 ok ", "c2 ok m2 event=e1 2"]
    assert await c.request("d2 delete_consumer --confirm c2") == "d2 ok "

    server.advance(1.1)
    assert await evaluate(p, "v1", "len(state.queues)") == "v1 ok 0"
    # The race note: the publish must be handled before the consume on the other connection.
    await publish(p, "m3", "e1", "3")
    assert await c.request(f"c3 {consume}") == "c3 ok "
    await c.nothing()
    await cleanup(c, ["c3"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s15_eval_counts_queues(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await evaluate(p, "v1", "--worker=0 len(state.queues)") == "v1 ok 1"
    assert await c.line() == "c1 ok m1 event=e1 1"
    await cleanup(c, ["c1"], ["q1"])
    assert await evaluate(p, "v2", "--worker=0 len(state.queues)") == "v2 ok 0"


@pytest_twisted.ensureDeferred
async def test_s16_full_rebind(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    c.send("r1 rebind --confirm q1 e2")
    assert await c.lines_n(2) == ["c1 ok --update q1 e2", "r1 ok "]
    await publish(p, "m2", "e1", "1")
    await c.nothing()
    p.send("m3 publish e2 2")
    assert await c.line() == "c1 ok m3 event=e2 2"
    await cleanup(c, ["c1"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s17_add_rebind(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    await publish(p, "m2", "e2", "2")
    await c.nothing()
    c.send("r1 rebind --confirm q1 --add e2 e3")
    assert await c.lines_n(2) == ["c1 ok --update q1 e1 e2 e3", "r1 ok "]
    p.send("m3 publish e1 1", "m4 publish e2 2", "m5 publish e3 3")
    assert await c.lines_n(3) == ["c1 ok m3 event=e1 1", "c1 ok m4 event=e2 2",
                                  "c1 ok m5 event=e3 3"]
    await cleanup(c, ["c1"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s18_remove_rebind(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1 e2 e3") == "c1 ok "
    p.send("m1 publish e2 2")
    assert await c.line() == "c1 ok m1 event=e2 2"
    c.send("r1 rebind --confirm q1 --remove e2")
    assert await c.lines_n(2) == ["c1 ok --update q1 e1 e3", "r1 ok "]
    await publish(p, "m2", "e2", "2")
    await c.nothing()
    p.send("m3 publish e1 1", "m4 publish e3 3")
    assert await c.lines_n(2) == ["c1 ok m3 event=e1 1", "c1 ok m4 event=e3 3"]
    await cleanup(c, ["c1"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s19_remove_mask(server):
    c, p = await server.mqks(), await server.mqks()
    events = "e1 e2.abc.c e2.abc.u e2.efg.c e2.efg.u e3.123.c e3.123.u"
    assert await c.request(f"c1 consume --confirm q1 {events}") == "c1 ok "
    p.send("m1 publish e1 x", "m2 publish e2.abc.u x", "m3 publish e2.efg.u x",
           "m4 publish e3.123.u x")
    assert await c.lines_n(4) == ["c1 ok m1 event=e1 x", "c1 ok m2 event=e2.abc.u x",
                                  "c1 ok m3 event=e2.efg.u x", "c1 ok m4 event=e3.123.u x"]

    c.send("r1 rebind --confirm q1 --remove-mask e2.*.u e2.*.c")
    assert await c.lines_n(2) == ["c1 ok --update q1 e1 e3.123.c e3.123.u", "r1 ok "]
    for n, event in enumerate(["e2.abc.c", "e2.abc.u", "e2.efg.c", "e2.efg.u"]):
        p.send(f"n{n} publish {event} x")
    await ping(p, "s1")
    await c.nothing()
    p.send("m5 publish e1 x", "m6 publish e3.123.c x", "m7 publish e3.123.u x")
    assert await c.lines_n(3) == ["c1 ok m5 event=e1 x", "c1 ok m6 event=e3.123.c x",
                                  "c1 ok m7 event=e3.123.u x"]

    assert await c.request("r2 rebind --confirm q1 --remove-mask e3.*") == "r2 ok "
    p.send("m8 publish e3.123.u x")
    assert await c.line() == "c1 ok m8 event=e3.123.u x"
    assert await c.request("r3 rebind --confirm q1 --remove-mask e1000.*.u.*") == "r3 ok "
    await c.nothing()
    await cleanup(c, ["c1"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s20_mixed_rebinds(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1 e2 e3") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    await c.nothing()
    c.send("r1 rebind --confirm q1 --add e4 e5")
    assert await c.lines_n(2) == ["c1 ok --update q1 e1 e2 e3 e4 e5", "r1 ok "]
    p.send("m2 publish e4 4")
    assert await c.line() == "c1 ok m2 event=e4 4"
    c.send("r2 rebind --confirm q1 --remove e4")
    assert await c.lines_n(2) == ["c1 ok --update q1 e1 e2 e3 e5", "r2 ok "]
    await publish(p, "m3", "e4", "4")
    await c.nothing()
    p.send("m4 publish e5 5")
    assert await c.line() == "c1 ok m4 event=e5 5"
    await cleanup(c, ["c1"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s21_removing_an_unbound_event_sends_no_update(server):
    c = await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1 e2 e3") == "c1 ok "
    assert await c.request("r1 rebind --confirm q1 --remove e5") == "r1 ok "
    await c.nothing()
    await cleanup(c, ["c1"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s22_rebind_of_a_never_consumed_queue(server):
    p, c1, c2 = await server.mqks(), await server.mqks(), await server.mqks()
    assert await c1.request("c1 consume --confirm q1 e1 e2 e3") == "c1 ok "
    assert await c2.request("r1 rebind --confirm q2 --add e5") == "r1 ok "
    await publish(p, "m1", "e5", "5")
    await c1.nothing()
    await c2.nothing()
    assert await c2.request("c2 consume --confirm q2 e6") == "c2 ok "   # replaces e5
    await publish(p, "m2", "e5", "5")
    await c2.nothing()
    p.send("m3 publish e6 6")
    assert await c2.line() == "c2 ok m3 event=e6 6"
    await c1.nothing()
    await cleanup(c1, ["c1"], ["q1"])
    await cleanup(c2, ["c2"], ["q2"])


@pytest_twisted.ensureDeferred
async def test_s23_reject_goes_to_the_other_consumer(server):
    p, c1, c2 = await server.mqks(), await server.mqks(), await server.mqks()
    c1.send("c1 consume q1 e1 --manual-ack")
    await ping(c1, "s1")
    assert await c2.request("c2 consume --confirm q1 e1 --manual-ack") == "c2 ok "
    await publish(p, "m1", "e1", "1")
    await c1.sync()
    await c2.sync()
    first, second = (c1, c2) if c1.lines else (c2, c1)
    first_id, second_id = ("c1", "c2") if first is c1 else ("c2", "c1")
    assert await first.line() == f"{first_id} ok m1 event=e1 1"
    first.send(f"j1 reject {first_id} m1")
    assert await second.line() == f"{second_id} ok m1 event=e1,retry=1 1"
    second.send(f"a1 ack {second_id} m1")
    await ping(second, "s2")
    await c1.nothing()
    await c2.nothing()
    await cleanup(c1, ["c1"])
    await cleanup(c2, ["c2"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s24_hello_world(server):
    a, b, c, d = [await server.mqks() for _ in range(4)]
    assert await a.request("A consume --confirm greetings hi hello") == "A ok "
    assert await b.request("B consume --confirm greetings hi hello") == "B ok "
    assert await c.request("C consume --confirm greetings-and-byes hi hello bye good-bye") \
        == "C ok "
    assert await d.request("D publish --confirm hello world") == "D ok "
    assert await c.line() == "C ok D event=hello world"
    await a.sync()
    await b.sync()
    got = received(a) + received(b)
    assert got in (["A ok D event=hello world"], ["B ok D event=hello world"])


@pytest_twisted.ensureDeferred
async def test_s25_eval_error_has_three_parts(server):
    c = await server.mqks()
    reply = await c.request("e25 _eval 1/0")
    parts = reply.split(" ")
    assert len(parts) == 3 and parts[:2] == ["e25", "error"] and len(parts[2]) == 24
    assert ERROR.match(reply)


@pytest_twisted.ensureDeferred
async def test_s26_manual_ack_reject_and_all(server):
    c, p = await server.mqks(), await server.mqks()
    consume = "consume --confirm q1 e1 --manual-ack"
    assert await c.request(f"c1 {consume}") == "c1 ok "
    assert await p.request("m1 publish --confirm e1 d1") == "m1 ok "
    assert await c.line() == "c1 ok m1 event=e1 d1"

    assert await c.request("d1 delete_consumer --confirm c1") == "d1 ok "
    c.send(f"c2 {consume}")
    assert await c.lines_n(2) == ["c2 ok ", "c2 ok m1 event=e1,retry=1 d1"]
    assert await c.request("a1 ack --confirm c2 m1") == "a1 ok "

    assert await c.request("d2 delete_consumer --confirm c2") == "d2 ok "
    assert await c.request(f"c3 {consume}") == "c3 ok "
    await c.nothing()
    assert await p.request("m2 publish --confirm e1 d2") == "m2 ok "
    assert await c.line() == "c3 ok m2 event=e1 d2"

    c.send("j1 reject --confirm c3 m2")
    assert await c.lines_n(2) == ["j1 ok ", "c3 ok m2 event=e1,retry=1 d2"]
    c.send("j2 reject --confirm c3 --all")
    assert await c.lines_n(2) == ["j2 ok ", "c3 ok m2 event=e1,retry=2 d2"]
    assert await c.request("a2 ack --confirm c3 --all") == "a2 ok "

    assert await c.request("d3 delete_consumer --confirm c3") == "d3 ok "
    assert await c.request(f"c4 {consume}") == "c4 ok "
    await c.nothing()
    await cleanup(c, ["c4"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s27_rebind_with_every_argument(server):
    c = await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1 e2 u.42.e1 u.43.e1") == "c1 ok "
    c.send("r1 rebind --confirm q1 --remove e2 --add e3 e4 --remove-mask u.*.e1")
    assert await c.lines_n(2) == ["c1 ok --update q1 e1 e3 e4", "r1 ok "]
    await c.nothing()
    await cleanup(c, ["c1"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_s28_update_and_reconnect(server):
    events_q1 = "' '.join(sorted(state.events_by_queues['q1']))"
    c, p = await server.mqks(), await server.mqks()
    opts = "--delete-queue-when-unused=5.0 --manual-ack"
    assert await c.request(f"c1 consume --confirm q1 e1 e2 {opts}") == "c1 ok "
    c.send("r1 rebind --confirm q1 e2 e3")
    assert await c.lines_n(2) == [f"c1 ok --update q1 e2 e3 {opts}", "r1 ok "]
    first_client = (await evaluate(c, "v1", "request['client']"))[len("v1 ok "):]
    assert CLIENT_ID.match(first_client)

    # Difference: the original forced this drop with `_eval ... .shutdown(2)`.
    await drop(server, c)
    c = await server.mqks()
    c.send(f"c2 consume q1 e2 e3 {opts}")
    second_client = (await evaluate(c, "v2", "request['client']"))[len("v2 ok "):]
    assert CLIENT_ID.match(second_client) and second_client != first_client
    assert await evaluate(p, "v3", events_q1) == "v3 ok e2 e3"
    assert await evaluate(p, "v4", "len(state.queues)") == "v4 ok 1"

    assert await p.request("m1 publish --confirm e3 d1") == "m1 ok "
    assert await c.line() == "c2 ok m1 event=e3 d1"

    assert await c.request("d2 delete_consumer --confirm c2") == "d2 ok "
    c.send(f"c3 consume --confirm q1 --add e3 e4 {opts}")
    assert await c.lines_n(3) == [f"c3 ok --update q1 e2 e3 e4 {opts}", "c3 ok ",
                                  "c3 ok m1 event=e3,retry=1 d1"]   # d1 was never acked
    assert await evaluate(p, "v5", events_q1) == "v5 ok e2 e3 e4"
    c.send("a1 ack c3 m1")
    await cleanup(c, ["c3"], ["q1"])


# -- beyond the scenarios: rules of specs/mqks.md sections 4 to 8 --------------------------

@pytest_twisted.ensureDeferred
async def test_update_seconds_use_py2_float_text(server):
    c = await server.mqks()
    assert await c.request("w consume --confirm q1 e1") == "w ok "
    cases = [("5", "5.0"), ("0.1", "0.1"), ("1e-05", "1e-05"), ("inf", "inf"), ("0", "0.0"),
             ("1e11", "1e+11"), ("123456789012", "1.23456789012e+11"), ("2.50", "2.5")]
    for n, (given, shown) in enumerate(cases):
        c.send(f"x{n} consume --confirm q1 --delete-queue-when-unused={given}")
        # x{n} caused it without --add, so only the other consumer w hears about it.
        assert await c.lines_n(2) == [
            f"w ok --update q1 e1 --delete-queue-when-unused={shown}", f"x{n} ok "]
        assert await c.request(f"d{n} delete_consumer --confirm x{n}") == f"d{n} ok "
    # A consume without the option removes the setting: that is a change too.
    c.send("y consume --confirm q1")
    assert await c.lines_n(2) == ["w ok --update q1 e1", "y ok "]
    await cleanup(c, ["y", "w"], ["q1"])


@pytest_twisted.ensureDeferred
async def test_bad_seconds_are_an_error_and_change_nothing(server):
    c = await server.mqks()
    assert await c.request("w consume --confirm q1 e1") == "w ok "
    assert ERROR.match(await c.request("x consume --confirm q1 e2 --delete-queue-when-unused=abc"))
    assert ERROR.match(await c.request("x consume --confirm q1 e2 --bogus"))
    assert await evaluate(c, "v1", "' '.join(sorted(state.events_by_queues['q1']))") == "v1 ok e1"
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_true_equals_one_point_zero_keeps_the_first_setting(server):
    c = await server.mqks()
    # Bare first, then =1: no change, no update, the stored setting stays bare.
    assert await c.request("a consume --confirm q1 e1 --delete-queue-when-unused") == "a ok "
    assert await c.request("b consume --confirm q1 --delete-queue-when-unused=1") == "b ok "
    c.send("r1 rebind --confirm q1 e2")
    first = await c.lines_n(3)
    assert sorted(first[:2]) == ["a ok --update q1 e2 --delete-queue-when-unused",
                                 "b ok --update q1 e2 --delete-queue-when-unused"]
    assert first[2] == "r1 ok "
    # And the reverse: =1 first, then bare, keeps `=1.0`.
    assert await c.request("f consume --confirm q2 e1 --delete-queue-when-unused=1") == "f ok "
    assert await c.request("g consume --confirm q2 --delete-queue-when-unused") == "g ok "
    c.send("r2 rebind --confirm q2 e2")
    second = await c.lines_n(3)
    assert sorted(second[:2]) == ["f ok --update q2 e2 --delete-queue-when-unused=1.0",
                                  "g ok --update q2 e2 --delete-queue-when-unused=1.0"]
    assert second[2] == "r2 ok "
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_update_shows_manual_ack_per_receiving_consumer(server):
    c1, c2, c3 = await server.mqks(), await server.mqks(), await server.mqks()
    assert await c1.request("a consume --confirm q1 e1 --manual-ack") == "a ok "
    assert await c2.request("b consume --confirm q1 e1") == "b ok "
    assert await c3.request("r1 rebind --confirm q1 e2") == "r1 ok "
    assert await c1.line() == "a ok --update q1 e2 --manual-ack"
    assert await c2.line() == "b ok --update q1 e2"
    # With --add the consuming consumer gets the update too, in its own mode.
    c3.send("c consume --confirm q1 --add e3 --manual-ack")
    assert await c3.lines_n(2) == ["c ok --update q1 e2 e3 --manual-ack", "c ok "]
    assert await c1.line() == "a ok --update q1 e2 e3 --manual-ack"
    assert await c2.line() == "b ok --update q1 e2 e3"
    # Without --add a replacing consume updates only the others.
    c3.send("d consume --confirm q1 e4")
    assert await c3.lines_n(2) == ["c ok --update q1 e4 --manual-ack", "d ok "]
    assert await c1.line() == "a ok --update q1 e4 --manual-ack"
    assert await c2.line() == "b ok --update q1 e4"
    await c3.nothing()


@pytest_twisted.ensureDeferred
async def test_rebind_applies_lists_in_fixed_order(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 a e1") == "c1 ok "
    c.send("r1 rebind --confirm q1 --add e5 --remove a e5")
    assert await c.lines_n(2) == ["c1 ok --update q1 e1 e5", "r1 ok "]
    p.send("m1 publish e5 5")
    assert await c.line() == "c1 ok m1 event=e5 5"
    # Plain tokens replace, whatever comes after them.
    c.send("r2 rebind --confirm q1 --remove e1 x y --add z")
    assert await c.lines_n(2) == ["c1 ok --update q1 e5 z", "r2 ok "]
    assert await c.request("r3 rebind --confirm q1 --remove") == "r3 ok "
    assert ERROR.match(await c.request("r4 rebind --confirm q1"))
    assert ERROR.match(await c.request("r5 rebind --confirm q1 --confirm e1"))
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_masks_apply_only_to_dotted_events(server):
    c = await server.mqks()
    assert await c.request("c1 consume --confirm q1 a b C w x.y x.y.z a.b") == "c1 ok "
    assert await c.request("r1 rebind --confirm q1 --remove-mask * w C") == "r1 ok "
    c.send("r2 rebind --confirm q1 --remove-mask *.*")
    assert await c.lines_n(2) == ["c1 ok --update q1 C a b w x.y.z", "r2 ok "]
    c.send("r3 rebind --confirm q1 --remove-mask x.y.z")
    assert await c.lines_n(2) == ["c1 ok --update q1 C a b w", "r3 ok "]
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_rebind_of_unconsumed_queue_drops_messages_until_consume(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("r1 rebind --confirm q9 e9") == "r1 ok "
    await publish(p, "m1", "e9", "lost")
    assert await evaluate(p, "v1", "len(state.queues)") == "v1 ok 0"
    assert await c.request("c1 consume --confirm q9") == "c1 ok "   # keeps e9: no update
    await c.nothing()
    p.send("m2 publish e9 kept")
    assert await c.line() == "c1 ok m2 event=e9 kept"
    await cleanup(c, ["c1"], ["q9"])


@pytest_twisted.ensureDeferred
async def test_unknown_consumers_get_silence_even_with_confirm(server):
    c = await server.mqks()
    c.send("a1 ack --confirm ghost m1", "a2 ack --confirm ghost --all",
           "j1 reject --confirm ghost m1", "j2 reject --confirm ghost --all",
           "d1 delete_consumer --confirm ghost", "d2 delete_consumer --confirm two words")
    assert await c.request("p1 ping after") == "p1 ok after"
    # A known consumer is enough, even for an unknown message or an auto-ack consumer.
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    assert await c.request("a3 ack --confirm c1 nosuch") == "a3 ok "
    assert await c.request("j3 reject --confirm c1 --all") == "j3 ok "
    assert ERROR.match(await c.request("a4 ack --confirm c1"))
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_delete_queue_always_confirms(server):
    c = await server.mqks()
    assert await c.request("d1 delete_queue --confirm nosuch") == "d1 ok "
    assert await c.request("d2 delete_queue --confirm name with spaces") == "d2 ok "
    c.send("d3 delete_queue nosuch")
    assert await c.request("p1 ping after") == "p1 ok after"


@pytest_twisted.ensureDeferred
async def test_ack_and_delete_consumer_from_another_connection(server):
    c, o, p = await server.mqks(), await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1 --manual-ack") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    assert await o.request("a1 ack --confirm c1 m1") == "a1 ok "
    assert await o.request("d1 delete_consumer --confirm c1") == "d1 ok "
    await publish(p, "m2", "e1", "2")
    await c.nothing()
    # m1 was acked, so only m2 (kept by the queue) comes to the next consumer.
    c.send("c2 consume --confirm q1 e1 --manual-ack")
    assert await c.lines_n(2) == ["c2 ok ", "c2 ok m2 event=e1 2"]
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_reject_all_confirms_before_redelivery(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1 --manual-ack") == "c1 ok "
    p.send("m1 publish e1 1", "m2 publish e1 2", "m3 publish e1 3")
    assert await c.lines_n(3) == ["c1 ok m1 event=e1 1", "c1 ok m2 event=e1 2",
                                  "c1 ok m3 event=e1 3"]
    c.send("j1 reject --confirm c1 --all")
    assert await c.line() == "j1 ok "
    # The original's requeue order under --all is arbitrary (py2 dict order).
    assert sorted(await c.lines_n(3)) == ["c1 ok m1 event=e1,retry=1 1",
                                          "c1 ok m2 event=e1,retry=1 2",
                                          "c1 ok m3 event=e1,retry=1 3"]
    assert await c.request("a1 ack --confirm c1 --all") == "a1 ok "
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_disconnect_requeues_unacked_at_the_back_with_retry(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1 --manual-ack") == "c1 ok "
    p.send("m1 publish e1 1", "m2 publish e1 2")
    assert await c.lines_n(2) == ["c1 ok m1 event=e1 1", "c1 ok m2 event=e1 2"]
    assert await c.request("a1 ack --confirm c1 m1") == "a1 ok "
    await drop(server, c)
    await publish(p, "m3", "e1", "3")
    c = await server.mqks()
    c.send("c2 consume --confirm q1 e1 --manual-ack")
    assert await c.lines_n(3) == ["c2 ok ", "c2 ok m2 event=e1,retry=1 2",
                                  "c2 ok m3 event=e1 3"]
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_disconnect_with_bare_when_unused_deletes_the_queue(server):
    c, p = await server.mqks(), await server.mqks()
    consume = "consume --confirm q1 e1 --manual-ack --delete-queue-when-unused"
    assert await c.request(f"c1 {consume}") == "c1 ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    assert await evaluate(p, "v1", "len(state.queues)") == "v1 ok 1"
    await drop(server, c)
    assert await evaluate(p, "v2", "len(state.queues)") == "v2 ok 0"
    c = await server.mqks()
    assert await c.request(f"c2 {consume}") == "c2 ok "
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_round_robin_strictly_alternates(server):
    a, b, p = await server.mqks(), await server.mqks(), await server.mqks()
    assert await a.request("ca consume --confirm q1 e1") == "ca ok "
    assert await b.request("cb consume --confirm q1 e1") == "cb ok "
    p.send(*[f"m{n} publish e1 {n}" for n in range(20)])
    assert await a.lines_n(10) == [f"ca ok m{n} event=e1 {n}" for n in range(0, 20, 2)]
    assert await b.lines_n(10) == [f"cb ok m{n} event=e1 {n}" for n in range(1, 20, 2)]
    await a.nothing()
    await b.nothing()


@pytest_twisted.ensureDeferred
async def test_reusing_a_live_consumer_id_is_an_error(server):
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("c1 consume --confirm q1 e1") == "c1 ok "
    assert ERROR.match(await c.request("c1 consume --confirm q2 e2")).group(1) == "c1"
    p.send("m1 publish e1 1")
    assert await c.line() == "c1 ok m1 event=e1 1"
    assert await evaluate(c, "v1", "len(state.queues)") == "v1 ok 1"
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_delete_consumer_confirms_before_the_redelivery(server):
    """As with reject, the original queues the confirm before another consumer's loop
    picks up the requeued message, so on one connection `ok ` comes first."""
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("ca consume --confirm q1 e1 --manual-ack") == "ca ok "
    assert await c.request("cb consume --confirm q1 e1") == "cb ok "
    p.send("m1 publish e1 1")
    assert await c.line() == "ca ok m1 event=e1 1"
    c.send("d1 delete_consumer --confirm ca")
    assert await c.lines_n(2) == ["d1 ok ", "cb ok m1 event=e1,retry=1 1"]
    await c.nothing()
