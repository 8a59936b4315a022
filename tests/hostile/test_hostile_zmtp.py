"""ZMTP messages made of empty or tiny MORE frames. Unguarded, their frames did not count
toward the message size: empty frames (2 bytes each on the wire) grew the
broker from 38 MB to 853 MB and were never refused. Now each frame counts its body plus
FRAME_COST and a message has at most `malamute.max_frames` frames: the sender is refused
(its connection closed) after a few KB, and the broker does not grow."""
import socket

import pytest

from mqksbridge.protocols.zmtp import codec as zmtp
from tests.hostile.hostile import MB, rss
from tests.support.process import BrokerProcess

BOUND = 32 * MB              # what the broker may grow by while the attacker sends
ATTACK = 256 * MB            # wire bytes the attacker would send if never refused


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path, doors=("mqks", "malamute")).start()
    yield process
    process.stop()


def send_until_refused(broker, chunk):
    """Send `chunk` repeatedly (one never-ending message); return the bytes sent before the
    broker closed the connection. Fails as soon as the broker grew past BOUND."""
    sock = socket.create_connection(("127.0.0.1", broker.ports["malamute"]), timeout=10)
    sock.sendall(zmtp.Connection("DEALER").preamble())
    start, sent = rss(broker.process.pid), 0
    try:
        while sent < ATTACK:
            sock.sendall(chunk)
            sent += len(chunk)
            growth = rss(broker.process.pid) - start
            assert growth < BOUND, f"the broker grew by {growth // MB} MB ({sent} bytes sent)"
        raise AssertionError(f"{sent} bytes of one message and the connection still open")
    except (BrokenPipeError, ConnectionResetError):
        return sent
    finally:
        sock.close()


@pytest.mark.parametrize("frame", [b"", b"x"], ids=["empty", "one-byte"])
def test_tiny_more_frames_are_refused(broker, frame):
    sent = send_until_refused(broker, zmtp.frame(frame, zmtp.MORE) * 65536)
    assert sent < 64 * MB
    with socket.create_connection(("127.0.0.1", broker.ports["malamute"]), timeout=10) as other:
        other.sendall(zmtp.Connection("DEALER").preamble())
        assert other.recv(1)                 # still serving: our greeting comes back
