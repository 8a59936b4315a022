"""`--delete-queue-when-unused=nan` (or -1, -inf) was once taken; the timer it
asked for raised inside the connection's teardown, another of the client's consumers stayed
attached to the dead connection and half the messages published to its queue were lost.
Now a numeric argument that is not finite and in range gets the door's error reply (MQKS
`{id} error`, Twino 400 Bad Request), and the others are served as if it had never asked."""
import pytest

from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.mqks import MqksError
from mqksbridge.protocols.twino.codec import ContentType, ResultCode
from tests.support.process import BrokerProcess

BAD = ["nan", "-1", "-inf", "-0.5", "1e13", "-1e400"]


@pytest.mark.parametrize("seconds", BAD)
def test_bad_seconds_are_refused_and_teardown_completes(broker, seconds):
    attacker, worker, publisher = broker.mqks(), broker.mqks(), broker.mqks()
    with pytest.raises(MqksError):
        attacker.consume("when-unused-bad", ["ev.bad"], when_unused=seconds)
    attacker.consume("shared", ["ev.shared"], manual_ack=True)   # what it holds goes back
    worker.consume("shared", ["ev.shared"])
    attacker.close()
    for i in range(20):
        publisher.publish("ev.shared", f"m{i}")
    assert sorted(worker.recv().data for _ in range(20)) == sorted(f"m{i}".encode()
                                                                   for i in range(20))


def test_good_seconds_still_work(broker):
    client = broker.mqks()
    client.consume("when-unused-good", ["ev.good"], when_unused="0.5")
    client.consume("when-unused-zero", ["ev.good"], when_unused="0")
    assert client.ping("ok") == "ok"


BAD_OPTIONS = ["NaN", "Infinity", "-Infinity", "-1", "-1000", "1e400", "2199023255552", "1.5",
               '"15000"']


@pytest.fixture
def twino_port(tmp_path):
    process = BrokerProcess(tmp_path, doors=("twino",)).start()
    yield process.ports["twino"]
    process.stop()


@pytest.mark.parametrize("option", ["AcknowledgeTimeout", "MessageTimeout", "MessageLimit",
                                    "MessageSizeLimit", "Status"])
def test_twino_numeric_options_out_of_range_are_bad_requests(twino_port, option):
    client = twino.connect(port=twino_port)
    try:
        for n, value in enumerate(BAD_OPTIONS):
            headers = [("Channel-Name", "opts"), ("Queue-Id", str(n + 1))]
            answer = client.operation(ContentType.CREATE_QUEUE, "opts", headers,
                                      b'{"%s": %s}' % (option.encode(), value.encode()))
            assert answer.content_type == ResultCode.BAD_REQUEST, (option, value)
            answer = client.operation(ContentType.UPDATE_QUEUE, "opts",
                                      [("Channel-Name", "opts"), ("Queue-Id", "100")],
                                      b'{"%s": %s}' % (option.encode(), value.encode()))
            assert answer.content_type in (ResultCode.BAD_REQUEST, ResultCode.NOT_FOUND)
        made = client.operation(ContentType.CREATE_QUEUE, "opts",
                                [("Channel-Name", "opts"), ("Queue-Id", "100")],
                                b'{"%s": 1}' % option.encode())
        assert made.content_type == ResultCode.OK
        for value in BAD_OPTIONS:
            answer = client.operation(ContentType.UPDATE_QUEUE, "opts",
                                      [("Channel-Name", "opts"), ("Queue-Id", "100")],
                                      b'{"%s": %s}' % (option.encode(), value.encode()))
            assert answer.content_type == ResultCode.BAD_REQUEST, (option, value)
        assert client.ping() < 5
    finally:
        client.close()
