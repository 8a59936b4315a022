"""SERVICE-SENDs arriving many to a read are handled as if each came alone.

The door takes a read's run of SERVICE-SENDs with one header together (MalamuteDoor.
_service_sends). Here one plain ZMTP socket writes a whole script in one `sendall`, then
the same script one message per read (each followed by a PING it waits for): workers must
see the same requests, in the same order, and a malformed SEND in the middle of a run
must cost only itself.
"""
import pytest_twisted
from twisted.internet import threads

from bench.zmtp_dealer import ZmtpDealer
from mqksbridge.protocols.malamute import codec
from mqksbridge.protocols.zmtp import codec as zmtp


def script(prefix):
    def send(service, subject, *content, tracker=""):
        return codec.encode(codec.ServiceSend(f"{prefix}-{service}", subject, tracker, 0,
                                              content))
    bad = send("a", "s1", b"never")
    bad[0] = bad[0][:6]                       # a header cut short: malformed
    return [send("a", "s1", b"1"), send("a", "s1", b"2"), send("a", "s2", b"3"), bad,
            send("a", "s1", b"4"), send("b", "xy", b"5"), send("b", "zz", b"6"),
            send("a", "s1", b"7a", b"7b"), send("a", "s1", b"8", tracker="t8"),
            send("a", "s1", b"9")]


def dealer(endpoint, address):
    peer = ZmtpDealer(endpoint)
    peer.call(codec.ConnectionOpen(address))
    return peer


def one_by_one(peer, messages):
    peer.sock.settimeout(5)
    for frames in messages:
        peer.send(zmtp.message(frames) + zmtp.message(codec.encode(codec.ConnectionPing())))
        assert isinstance(codec.decode(peer.recv()), codec.ConnectionPong)


async def requests(worker, n):
    got = []
    for _ in range(n):
        deliver = await worker.recv()
        got.append((deliver.subject, deliver.tracker, deliver.content))
    await worker.nothing()
    return got


@pytest_twisted.ensureDeferred
async def test_a_burst_of_service_sends_matches_one_send_per_read(server):
    endpoint = server.endpoint("malamute")
    door = server.doors["malamute"]
    outcomes = []
    for prefix, burst in (("single", False), ("burst", True)):
        worker_a = await server.malamute_raw(f"{prefix}-wa")
        worker_b = await server.malamute_raw(f"{prefix}-wb")
        assert await worker_a.call(codec.ServiceOffer(f"{prefix}-a", "")) == codec.Ok(200, "")
        assert await worker_b.call(codec.ServiceOffer(f"{prefix}-b", "^x")) == codec.Ok(200, "")
        malformed = door.counters["malformed"]
        sender = await threads.deferToThread(dealer, endpoint, f"{prefix}-sender")
        try:
            messages = script(prefix)
            if burst:
                sender.send(b"".join(zmtp.message(frames) for frames in messages))
            else:
                await threads.deferToThread(one_by_one, sender, messages)
            outcomes.append((await requests(worker_a, 7), await requests(worker_b, 1),
                             len(server.broker.queues[f"{prefix}-b"]),
                             door.counters["malformed"] - malformed))
        finally:
            sender.close()
    single, burst = outcomes
    assert burst == single
    assert burst == (
        [("s1", "", (b"1",)), ("s1", "", (b"2",)), ("s2", "", (b"3",)), ("s1", "", (b"4",)),
         ("s1", "", (b"7a", b"7b")), ("s1", "t8", (b"8",)), ("s1", "", (b"9",))],
        [("xy", "", (b"5",))], 1, 1)
