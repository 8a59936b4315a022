"""Durable queue definitions survive a restart: MQKS bindings, Twino channel and queue
options and statuses, Malamute service queues, each queue's durability itself."""
import json
import os
import shutil

import pytest_twisted

from tests.conftest import RunningBroker
from tests.support.journal import Harness
from tests.twino.helpers import make_queue, update_queue


async def started(tmp_path, queues=("jobs", "svc*")):
    running = RunningBroker({"durability": {"queues": list(queues), "max_deliveries": 4}},
                            data_dir=tmp_path)
    await running.start()
    return running


@pytest_twisted.ensureDeferred
async def test_definitions_come_back_after_a_restart(tmp_path):
    running = await started(tmp_path)
    try:
        mqks = await running.mqks()
        assert await mqks.request("c1 consume --confirm jobs job.new job.retry") == "c1 ok "
        twino = await running.twino()
        await make_queue(twino, "orders", 1, status="round-robin", handler="persistent:received",
                         ack_timeout=5000, hide=True)
        assert await update_queue(twino, "orders", 1, Status=3) == 0       # pull
        worker = await running.malamute("w1")
        await worker.set_worker("svc.render", "")
        assert await mqks.request("p1 ping x") == "p1 ok x"
    finally:
        await running.stop()
    document = json.loads(open(os.path.join(tmp_path, "definitions.json")).read())
    assert set(document["queues"]) == {"jobs", "orders/1", "svc.render"}
    again = await started(tmp_path, queues=())    # no pattern now: the file decides
    try:
        broker = again.broker
        jobs = broker.queues["jobs"]
        assert jobs.journal is not None and jobs.max_deliveries == 4
        assert broker.streams["mqks"].bound_subjects("jobs") == {"job.new", "job.retry"}
        orders = broker.queues["orders/1"]
        state = orders.attrs["twino"]
        assert orders.journal is not None and orders.mode == "pull"
        assert orders.channel is broker.channels["orders"] and orders.ack_timeout == 5.0
        assert (state.persistent, state.policy, state.hide_names) == (True, "received", True)
        assert broker.queues["svc.render"].journal is not None
        publisher = await again.mqks()           # routed by the restored binding at once
        assert await publisher.request("p1 publish --confirm job.new hello") == "p1 ok "
        assert [e.message.frames for e in jobs.entries] == [(b"hello",)]
    finally:
        await again.stop()


@pytest_twisted.ensureDeferred
async def test_a_data_directory_that_does_not_exist_yet_is_made(tmp_path):
    """The first durable queue of a new install: the definitions file's directory is
    made, and the confirmation behind it is not held up by a failing batch."""
    data_dir = tmp_path / "new" / "var"
    running = await started(data_dir)
    try:
        consumer, mqks = await running.mqks(), await running.mqks()
        assert await consumer.request("c1 consume --confirm jobs job.new") == "c1 ok "
        assert await mqks.request("p1 publish --confirm job.new x") == "p1 ok "
        assert await mqks.request("p2 ping x") == "p2 ok x"
        assert running.top.durability.writer.failures == 0
    finally:
        await running.stop()
    assert set(json.loads((data_dir / "definitions.json").read_text())["queues"]) == {"jobs"}


# A definitions file as the previous version wrote it (version 1: each queue's Twino side
# in a `twino` section), saved by that version's writer after the first test's steps.
VERSION_1 = os.path.join(os.path.dirname(__file__), "..", "data", "definitions-v1.json")
ORDERS_TWINO = json.load(open(VERSION_1))["queues"]["orders/1"]["twino"]


def assert_orders_restored(broker):
    orders = broker.queues["orders/1"]
    state = orders.attrs["twino"]
    assert orders.journal is not None and orders.mode == "pull" and orders.ack_timeout == 5.0
    assert orders.channel is broker.channels["orders"]
    assert (state.persistent, state.policy, state.hide_names) == (True, "received", True)
    assert broker.channels["orders"].attrs["twino"]["allow_multiple_queues"] is True


@pytest_twisted.ensureDeferred
async def test_a_version_1_file_loads_and_is_written_back_in_the_generic_form(tmp_path):
    """An upgrade keeps a data directory's queues; the next write is version 2, where a
    queue's Twino side is its Twino arguments and its channel a definition of its own,
    and that form comes back as well."""
    shutil.copy(VERSION_1, tmp_path / "definitions.json")
    running = await started(tmp_path)
    try:
        assert_orders_restored(running.broker)
        assert running.broker.streams["mqks"].bound_subjects("jobs") == {"job.new", "job.retry"}
        mqks = await running.mqks()        # a new durable queue: the file is written again
        assert await mqks.request("c1 consume --confirm svc.more x") == "c1 ok "
        assert await mqks.request("p1 ping x") == "p1 ok x"
    finally:
        await running.stop()
    document = json.loads((tmp_path / "definitions.json").read_text())
    assert document["version"] == 2
    orders = document["queues"]["orders/1"]
    assert "twino" not in orders and orders["arguments"] == {"twino": ORDERS_TWINO["options"]}
    settings = dict(ORDERS_TWINO["channel_settings"])
    assert document["channels"]["orders"] == {
        "defaults": ORDERS_TWINO["channel_defaults"],
        "destroy_when_empty": settings.pop("destroy_when_empty"),
        "arguments": {"twino": settings}}
    again = await started(tmp_path, queues=())
    try:
        assert_orders_restored(again.broker)
        assert again.broker.queues["svc.more"].journal is not None
    finally:
        await again.stop()


def test_definitions_are_restored_without_any_door(tmp_path):
    """Recovery is the core's: with no door at all each queue is what it was, in its
    channel, its door arguments kept for a door to read and saved again as they are."""
    shutil.copy(VERSION_1, tmp_path / "definitions.json")
    broker = Harness(tmp_path, {"queues": []}).broker      # a broker and its journals only
    orders = broker.queues["orders/1"]
    assert orders.journal is not None and orders.mode == "pull" and orders.ack_timeout == 5.0
    assert orders.channel is broker.channels["orders"] and "twino" not in orders.attrs
    assert orders.attrs["arguments"] == {"twino": ORDERS_TWINO["options"]}
    assert broker.queues["jobs"].max_deliveries == 4
    snapshot = Harness(tmp_path, {"queues": []}).durability.definitions.snapshot()
    assert snapshot["queues"]["orders/1"]["arguments"] == {"twino": ORDERS_TWINO["options"]}
    assert snapshot["channels"]["orders"]["defaults"] == ORDERS_TWINO["channel_defaults"]
