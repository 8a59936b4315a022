"""bridge.memory: past the watermark every connection that published is held (reason
MEMORY), connections that only consume are read on; under CLEAR of it all are let go."""
from twisted.internet.testing import StringTransport

from mqksbridge.bridge.memory import CLEAR, MemoryWatermark, watermark_bytes
from mqksbridge.bridge.traffic import DoorTraffic


class Door:
    def __init__(self, name):
        self.traffic = DoorTraffic(name, lambda: 0.0)


def connection(door, published):
    transport = StringTransport()
    traffic = door.traffic.open("peer", transport, None, lambda: None)
    traffic.messages_in = published
    return transport, traffic


def test_publishers_are_held_over_the_watermark_until_memory_falls():
    used = [100]
    doors = {"a": Door("a"), "b": Door("b")}
    pub, pub_traffic = connection(doors["a"], 5)
    sub, _ = connection(doors["b"], 0)
    trims = []
    watch = MemoryWatermark(1000, doors, used=lambda: used[0], trim=lambda: trims.append(1))
    watch.check()
    assert not watch.alarm and pub.producerState == "producing"
    used[0] = 1001
    watch.check()
    assert watch.alarm and pub.producerState == "paused" and sub.producerState == "producing"
    late, late_traffic = connection(doors["b"], 0)
    late_traffic.messages_in = 1                  # published during the alarm
    watch.check()
    assert late.producerState == "paused" and watch.state()["held"] == 2
    doors["b"].traffic.close(late_traffic)        # gone meanwhile: forgotten
    used[0] = int(1000 * CLEAR) + 1               # under the mark, not under CLEAR of it
    watch.check()
    assert watch.alarm and watch.state()["held"] == 1 and trims
    used[0] = int(1000 * CLEAR) - 1
    watch.check()
    assert not watch.alarm and pub.producerState == "producing"
    assert watch.state() == {"alarm": False, "watermark": 1000, "resident": 899, "alarms": 1,
                             "held": 0, "spill": None}


def test_another_reason_keeps_the_connection_paused_after_the_alarm():
    used = [2000]
    doors = {"a": Door("a")}
    pub, traffic = connection(doors["a"], 1)
    watch = MemoryWatermark(1000, doors, used=lambda: used[0], trim=lambda: None)
    watch.check()
    traffic.input.hold("flow")
    used[0] = 0
    watch.check()
    assert pub.producerState == "paused" and traffic.input.reasons == {"flow"}


def test_watermark_setting():
    assert watermark_bytes("max") is None
    assert watermark_bytes(5 << 20) == 5 << 20
    assert 0 < watermark_bytes(0.5) < watermark_bytes(1.0)
