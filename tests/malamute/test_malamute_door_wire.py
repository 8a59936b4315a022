"""Malamute door over real loopback ZeroMQ, raw DEALER sockets: the bytes a real
mlm_client sees (reference vectors), the state table, and malformed input."""
import pytest_twisted

from mqksbridge.protocols.malamute import codec

H = bytes.fromhex
OK = [H("aaa80e00c800")]
E500 = [H("aaa80f01f400")]
E300 = [H("aaa80f012c00")]
PONG = [H("aaa803")]


@pytest_twisted.ensureDeferred
async def test_open_and_stream_deliver_are_byte_exact(server):
    writer, reader = await server.malamute_raw(), await server.malamute_raw()
    writer.send_frames([H("aaa801084d414c414d555445000106777269746572")])
    assert await writer.frames() == OK
    await reader.open("reader")
    reader.send_frames([H("aaa80607776561746865720674656d702e2a")])      # READ weather temp.*
    assert await reader.frames() == OK
    writer.send_frames([H("aaa8050777656174686572")])                    # WRITE weather
    assert await writer.frames() == OK
    writer.send_frames([H("aaa8070b74656d702e6d6f73636f77"), b"10"])
    assert await reader.frames() == [
        H("aaa808077765617468657206777269746572""0b74656d702e6d6f73636f77"), b"10"]
    await writer.nothing()


@pytest_twisted.ensureDeferred
async def test_mailbox_and_service_deliver_are_byte_exact(server):
    writer = await server.malamute_raw("writer")
    reader = await server.malamute_raw("reader")
    writer.send_frames([H("aaa80906726561646572047375626a0374726b000003e8"), b"hi"])
    assert await reader.frames() == [
        H("aaa80a0677726974657206726561646572047375626a0374726b"), b"hi"]
    reader.send_frames([H("aaa80c03737663057265712e2a")])               # OFFER svc req.*
    assert await reader.frames() == OK
    writer.send_frames([H("aaa80b03737663057265712e31027431" "00000000"), b"a", b"b"])
    assert await reader.frames() == [
        H("aaa80d0677726974657203737663057265712e31027431"), b"a", b"b"]
    writer.send_frames([H("aaa80b03737663057265712e3100" "00000000")])   # no content
    assert await reader.frames() == [H("aaa80d0677726974657203737663057265712e3100")]
    await writer.nothing()                      # the SENDs are never answered


@pytest_twisted.ensureDeferred
async def test_start_state(server):
    peer = await server.malamute_raw()
    for command in (codec.ConnectionPing(), codec.StreamWrite("s"), codec.StreamRead("s", ""),
                    codec.StreamCancel("s"), codec.ServiceOffer("s", ""), codec.Credit(3),
                    codec.StreamSend("x", (b"1",)), codec.MailboxSend("a", "s", "", 0, ()),
                    codec.Confirm("t", 200, ""), codec.Ok()):
        peer.send(command)
        assert await peer.frames() == E500, command
    peer.send(codec.ConnectionClose())            # malamute 1.2.0 segfaults here
    assert await peer.frames() == OK
    other = await server.malamute_raw("other")
    assert await other.call(codec.ConnectionPing()) == codec.ConnectionPong()


@pytest_twisted.ensureDeferred
async def test_connected_state_replies_and_silences(server):
    peer = await server.malamute_raw("me")
    for command, reply in ((codec.ConnectionPing(), PONG), (codec.StreamWrite("w"), OK),
                           (codec.StreamRead("w", "x"), OK), (codec.StreamCancel("new"), OK),
                           (codec.ServiceOffer("svc", ""), OK)):
        peer.send(command)
        assert await peer.frames() == reply
    peer.send(codec.StreamSend("s", (b"x",)), codec.MailboxSend("nobody", "s", "", 0, (b"x",)),
              codec.ServiceSend("nowhere", "s", "", 0, (b"x",)), codec.Credit(10))
    await peer.nothing()
    peer.send(codec.ConnectionClose())
    assert await peer.frames() == OK
    peer.send(codec.ConnectionPing())
    assert await peer.frames() == E500


@pytest_twisted.ensureDeferred
async def test_offer_ok_is_200_after_another_peers_error(server):
    """The original reused one reply buffer and answered OK 500 here."""
    stranger = await server.malamute_raw()
    worker = await server.malamute_raw("w")
    stranger.send(codec.ConnectionPing())
    assert await stranger.frames() == E500
    worker.send(codec.ServiceOffer("svc", ""), codec.StreamCancel("s"))
    assert [await worker.frames(), await worker.frames()] == [OK, OK]


@pytest_twisted.ensureDeferred
async def test_errors_that_end_the_session(server):
    for command, reply in ((codec.Confirm("t", 200, ""), E300),
                           (codec.ConnectionOpen("again"), E500),
                           (codec.StreamSend("no-writer", (b"x",)), E300),
                           (codec.MailboxDeliver("a", "b", "c", "", ()), E500)):
        peer = await server.malamute_raw("x")
        peer.send(command)
        assert await peer.frames() == reply
        peer.send(codec.ConnectionPing())
        assert await peer.frames() == E500
        assert server.doors["malamute"].peers == {}


@pytest_twisted.ensureDeferred
async def test_ping_with_trailing_bytes_gets_pong(server):
    """Malamute 1.2 ignores bytes after a command's last field (a newer client may add
    fields); so do we, for every command."""
    peer = await server.malamute_raw("me")
    peer.send_frames([H("aaa802 0001ff")])
    assert await peer.frames() == PONG
    peer.send_frames([H("aaa805 0177 00"), b"x"])                    # WRITE w + 1 byte, + frame
    assert await peer.frames() == OK


@pytest_twisted.ensureDeferred
async def test_extra_frame_after_a_contentless_command_is_ignored(server):
    """This froze malamute 1.2.0 for good (it took the frame for the next routing id);
    here the command is answered as if it came alone. Cut-short headers are counted."""
    peer = await server.malamute_raw("me")
    peer.send_frames([H("aaa802"), b"extra"])
    assert await peer.frames() == PONG
    peer.send_frames([H("aaa8"), b""])
    peer.send_frames([H("aaa805"), b"x"])
    assert await peer.call(codec.ConnectionPing()) == codec.ConnectionPong()   # nothing else
    assert server.doors["malamute"].counters["malformed"] == 2


@pytest_twisted.ensureDeferred
async def test_pipelined_replay_after_open(server):
    """What mlm_client sends after ERROR 500: OPEN, then every WRITE/READ/OFFER at once."""
    writer = await server.malamute_raw("w")
    await writer.call(codec.StreamWrite("s"))
    peer = await server.malamute_raw()
    peer.send(codec.ConnectionOpen("r"), codec.StreamWrite("other"), codec.StreamRead("s", ""),
              codec.ServiceOffer("svc", ""))
    assert [await peer.frames() for _ in range(4)] == [OK] * 4
    writer.send(codec.StreamSend("hello", (b"1",)))
    assert (await peer.recv()).subject == "hello"
