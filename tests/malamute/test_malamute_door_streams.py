"""Streams through the Malamute door with the Python client over loopback ZeroMQ."""
import pytest_twisted

from mqksbridge.protocols.malamute import codec


async def pair(server, pattern="", stream="weather"):
    writer = await server.malamute("writer")
    reader = await server.malamute("reader")
    await reader.set_consumer(stream, pattern)
    await writer.set_producer(stream)
    return writer, reader


@pytest_twisted.ensureDeferred
async def test_delivery_fields_and_no_echo_to_the_writer(server):
    writer, reader = await pair(server, "temp.")
    await writer.set_consumer("weather", "")
    await writer.send("temp.moscow", b"10", b"C")
    await writer.send("rain.moscow", b"0")
    got = await reader.recv(10)
    assert got.command == "STREAM DELIVER"
    assert (got.address, got.sender, got.subject, got.frames) == (
        "weather", "writer", "temp.moscow", (b"10", b"C"))
    await writer.ping()                              # rain.moscow handled too
    await reader.nothing()
    await writer.nothing()


@pytest_twisted.ensureDeferred
async def test_order_is_kept_per_writer(server):
    writer, reader = await pair(server)
    await writer.run(lambda c: [c.send("n", b"%d" % i) for i in range(2000)])
    got = [int((await reader.recv(5)).frames[0]) for _ in range(2000)]
    assert got == list(range(2000))


@pytest_twisted.ensureDeferred
async def test_patterns_are_zrex_not_python_re(server):
    writer = await server.malamute("writer")
    await writer.set_producer("s")
    readers = {}
    for pattern in ("[a-c]", r"^\a+$", "x{2}", "^$"):
        readers[pattern] = r = await server.malamute("")
        await r.send_command(codec.StreamRead("s", pattern))
        assert await r.recv_command(2) == codec.Ok()
    for subject in ("b", "-", "abc", "xx", "x{2}", ""):
        await writer.send(subject)
    await writer.ping()                              # every send handled

    async def subjects(r):
        return [got.subject for got in await r.received()]
    assert await subjects(readers["[a-c]"]) == ["-", "abc"]       # a set of a, -, c
    assert await subjects(readers[r"^\a+$"]) == ["b", "abc", "xx"]  # \a is alphabetic
    assert await subjects(readers["x{2}"]) == ["x{2}"]             # braces are literal
    assert await subjects(readers["^$"]) == [""]


@pytest_twisted.ensureDeferred
async def test_two_matching_patterns_deliver_twice_and_cancel_stops_both(server):
    writer, reader = await pair(server, "temp")
    await reader.set_consumer("weather", "moscow")
    await reader.set_consumer("weather", "temp")          # same pattern again: idempotent
    await writer.send("temp.moscow", b"1")
    assert [(await reader.recv(10)).frames for _ in range(2)] == [(b"1",), (b"1",)]
    await reader.nothing()
    await reader.remove_consumer("weather")
    await writer.send("temp.moscow", b"2")
    await writer.ping()
    await reader.nothing()


@pytest_twisted.ensureDeferred
async def test_no_history_and_several_streams(server):
    writer = await server.malamute("writer")
    await writer.set_producer("a")
    await writer.send("early", b"lost")
    reader = await server.malamute("reader")
    await reader.set_consumer("a", "")
    await reader.set_consumer("b", "")
    await writer.send("one", b"1")
    await writer.set_producer("b")                   # one current stream per writer
    await writer.send("two", b"2")
    got = [await reader.recv(10) for _ in range(2)]
    assert [(d.address, d.subject) for d in got] == [("a", "one"), ("b", "two")]
    await reader.nothing()


@pytest_twisted.ensureDeferred
async def test_anonymous_writer_has_empty_sender(server):
    writer = await server.malamute("")
    reader = await server.malamute("r")
    await reader.set_consumer("s", "")
    await writer.set_producer("s")
    await writer.send("x", b"1")
    assert (await reader.recv(10)).sender == ""
