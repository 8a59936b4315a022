"""A client that asks for output and never reads it. Unguarded, the broker kept reading
such a client: 3,000 MQKS `_eval`s made 2.99 GB of replies, and a client sending
to its own Twino or Malamute address filled its mailbox without end. Now a connection whose
unread output passes its door's high-water mark is not read any further (`input_held`
shows `output` in the admin API) and the broker's memory stays put while others are served.

Each attacker sends about 300 MB worth of requests (scaled down from the
3 GB that once got through).
"""
import pytest

from mqksbridge.bridge.clients.mqks import MqksClient
from mqksbridge.protocols.malamute import codec as malamute
from mqksbridge.protocols.twino.codec import (PROTOCOL, ContentType, Frame, MessageType, encode,
                                              new_id)
from mqksbridge.protocols.zmtp import codec as zmtp
from tests.hostile.hostile import MB, connection_of, deaf_socket, flood, rss
from tests.support.process import BrokerProcess
from tests.support.waits import unless, wait_until

BOUND = 48 * MB          # what the broker may grow by while the attacker waits
ATTACK = 300             # requests, each asking for about 1 MB


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path, doors=("mqks", "malamute", "twino", "admin")).start()
    yield process
    process.stop()


def held_for_output(broker, sock, start):
    pid, admin = broker.process.pid, broker.ports["admin"]

    def held():
        conn = connection_of(admin, sock)
        return conn is not None and "output" in conn.get("input_held", ())

    def grown():
        growth = rss(pid) - start
        if growth > BOUND:
            return f"the broker grew by {growth // MB} MB while the attacker did not read"
    return held, grown


def attack(broker, sock, data):
    start = rss(broker.process.pid)
    held, grown = held_for_output(broker, sock, start)
    flood(sock, data, stop=lambda: held() or grown())
    wait_until(unless(held, grown), 30.0, "the attacker's input to be held", step=0.02)
    bystander = MqksClient(port=broker.ports["mqks"])
    assert bystander.ping("still here") == "still here"
    bystander.close()
    growth = rss(broker.process.pid) - start
    assert growth < BOUND, f"the broker grew by {growth // MB} MB"
    assert connection_of(broker.ports["admin"], sock)["bytes_out"] < 16 * MB


def test_mqks_evals_never_read(broker):
    big = "'" + "a" * 1000 + "'"
    request = f"e _eval {big}.join({big})\n".encode()       # about 1 MB of reply each
    sock = deaf_socket(broker.ports["mqks"])
    attack(broker, sock, request * ATTACK)
    sock.close()


def test_twino_direct_messages_to_itself_never_read(broker):
    sock = deaf_socket(broker.ports["twino"])
    hello = Frame(MessageType.SERVER, first_acquirer=True, message_id=new_id(),
                  content_type=ContentType.HELLO, content=b"CONNECT /\r\nClient-Id: deaf\r\n")
    sock.sendall(PROTOCOL + encode(hello))
    body = b"x" * MB
    direct = b"".join(encode(Frame(MessageType.DIRECT_MESSAGE, message_id=new_id(),
                                   target="deaf", content=body)) for _ in range(ATTACK))
    attack(broker, sock, direct)
    sock.close()


def test_malamute_mail_to_itself_never_read(broker):
    sock = deaf_socket(broker.ports["malamute"])
    dealer = zmtp.Connection("DEALER")
    sock.sendall(dealer.preamble() + zmtp.message(malamute.encode(
        malamute.ConnectionOpen("deaf"))))
    mail = zmtp.message(malamute.encode(malamute.MailboxSend("deaf", "s", "", 0,
                                                            (b"x" * MB,))))
    attack(broker, sock, mail * ATTACK)
    sock.close()
