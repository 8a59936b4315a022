"""Twino buffers. Unguarded, a client that had sent no hello could make the broker buffer
a partial frame of up to max_frame_size (a 60 MB one was held before any check), and
partial frames of connections that had gone stayed resident: the connection and its client
refer to each other and the raised GC thresholds make full collections rare. Now a stranger
is closed once it sent `twino.max_hello` bytes without a complete hello, and a connection
lets go of its partial frame when it goes."""
import socket

import pytest

from mqksbridge.protocols.twino.codec import PROTOCOL, ContentType, Frame, MessageType, encode
from tests.hostile.hostile import MB, rss
from tests.support.process import BrokerProcess
from tests.support.waits import wait_until

BOUND = 24 * MB


@pytest.fixture
def broker(tmp_path, monkeypatch):
    # glibc returns a freed block to the system at once only above its mmap threshold, which
    # it raises to the size of the last such block freed: fixed, freed memory shows in RSS.
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(256 * 1024))
    process = BrokerProcess(tmp_path, doors=("mqks", "twino")).start()
    yield process
    process.stop()


def hello_frame_head(size):
    """What a Server/101 hello of `size` content bytes starts with, cut before the content."""
    whole = encode(Frame(MessageType.SERVER, content_type=ContentType.HELLO,
                         content=b"h" * size))
    return whole[:len(whole) - size]


def direct_frame_head(size):
    whole = encode(Frame(MessageType.DIRECT_MESSAGE, target="nobody", content=b"d" * size))
    return whole[:len(whole) - size]


def test_a_stranger_cannot_make_the_broker_hold_a_large_hello(broker):
    pid = broker.process.pid
    start = rss(pid)
    sock = socket.create_connection(("127.0.0.1", broker.ports["twino"]), timeout=10)
    sock.sendall(PROTOCOL + hello_frame_head(60 * MB))
    chunk, sent = b"h" * (1 * MB), 0
    try:
        while sent < 60 * MB - MB:
            sock.sendall(chunk)
            sent += len(chunk)
            growth = rss(pid) - start
            assert growth < BOUND, f"the broker grew by {growth // MB} MB before any hello"
        raise AssertionError("a 60 MB hello frame was taken in whole")
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    assert sent <= 8 * MB                # closed after max_hello and what the kernel holds


def test_partial_frames_of_closed_connections_are_freed(broker):
    pid, port = broker.process.pid, broker.ports["twino"]
    start = rss(pid)
    size = 16 * MB
    for i in range(4):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        hello = encode(Frame(MessageType.SERVER, content_type=ContentType.HELLO,
                             content=f"CONNECT /\r\nClient-Id: partial-{i}\r\n".encode()))
        sock.sendall(PROTOCOL + hello + direct_frame_head(size) + b"d" * (size - 1))
        sock.recv(8)                     # the protocol echo: the hello was accepted
        wait_until(lambda: rss(pid) - start > size // 2,
                   30.0, f"connection {i}'s partial frame to be held", step=0.02)
        sock.close()
        wait_until(lambda: rss(pid) - start < size // 2,
                   10, f"connection {i}'s partial frame to be freed once it closed", step=0.02)
