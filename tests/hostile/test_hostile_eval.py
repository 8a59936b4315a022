"""An MQKS `_eval` that builds a 3.4 GB string (12 s of a frozen broker, unbounded) gets
an error reply at once, and another client is served meanwhile."""
import time

import pytest

from mqksbridge.bridge.clients.mqks import MqksError

A = "'" + "a" * 1500 + "'"
BOMB = f"len({A}.join({A}.join({A})))"


def test_eval_bomb_is_refused_and_others_are_served(broker):
    attacker, bystander = broker.mqks(), broker.mqks()
    started = time.monotonic()
    request = attacker.request("_eval", BOMB, wait=False)
    pings = []
    for _ in range(5):                  # the later ones queue behind the bomb if it blocks
        sent = time.monotonic()
        bystander.ping()
        pings.append(time.monotonic() - sent)
    with pytest.raises(MqksError):
        attacker._reply(request)
    assert time.monotonic() - started < 1.0
    assert max(pings) < 1.0, pings
    assert bystander.eval("WORKERS") == "1"
