"""The admin JSON API and /metrics against a live broker with traffic through every door.

Every answer is checked against the OpenAPI file that ships with the package, and the
numbers against what the test itself sent: messages in per door, deliveries per
connection and the door-to-door flows.
"""
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.threads import deferToThread

from tests.support.admin import aget, fetch, response_schema, validate
from tests.support.waits import until

LISTS = {"/api/connections": "ConnectionList", "/api/queues": "QueueList",
         "/api/streams": "StreamList", "/api/mailboxes": "MailboxList",
         "/api/channels": "ChannelList"}


async def traffic(server):
    """MQKS consumer of `jobs`; 3 MQKS publishes, 2 Malamute requests and 2 Twino pushes to
    it; a Malamute stream reader of the MQKS events. Returns the clients."""
    consumer, publisher = await server.mqks(), await server.mqks()
    assert await consumer.request("c1 consume --confirm jobs ev") == "c1 ok "
    reader = await server.malamute("watcher")
    await reader.set_consumer("mqks", "ev")
    publisher.send(*(f"m{i} publish ev hello{i}" for i in range(3)))
    worker = await server.malamute("sender")
    for i in range(2):
        await worker.sendfor("jobs", "job", f"mlm{i}")
    await worker.ping()
    twino = await server.twino(name="pusher")
    for i in range(2):
        result = await twino.push("jobs", 0, f"tw{i}", wait_ack=True)
        assert result.ok, result
    got = [await consumer.line() for _ in range(7)]
    assert sorted(line.rsplit(" ", 1)[1] for line in got) == [
        "hello0", "hello1", "hello2", "mlm0", "mlm1", "tw0", "tw1"]
    for _ in range(3):
        assert (await reader.recv(5)).subject == "ev"
    return consumer, publisher, reader, worker, twino


@pytest_twisted.ensureDeferred
async def test_every_route_answers_its_schema_with_the_traffic_sent(server):
    consumer, publisher, *_ = await traffic(server)
    server.advance(1.0)                  # the sampler's next pass: the counters it shows
    port = server.port("admin")
    overview = await aget(port, "/api/overview")
    validate(overview, response_schema("/api/overview"))
    doors = {d["name"]: d for d in overview["doors"]}
    assert set(doors) == {"mqks", "malamute", "twino", "textqueue"}
    assert (doors["mqks"]["messages_in"], doors["malamute"]["messages_in"],
            doors["twino"]["messages_in"]) == (3, 2, 2)
    assert doors["mqks"]["messages_out"] == 7 and doors["malamute"]["messages_out"] == 3
    assert doors["mqks"]["listeners"][0]["bound"] == f"127.0.0.1:{server.port('mqks')}"
    assert doors["malamute"]["listeners"][0]["bound"] == server.endpoint("malamute")
    flows = {(f["from"], f["to"]): f["messages"] for f in overview["flows"]}
    assert flows == {("mqks", "mqks"): 3, ("malamute", "mqks"): 2, ("twino", "mqks"): 2,
                     ("mqks", "malamute"): 3}
    assert overview["totals"]["connections"] == 5
    assert overview["totals"]["messages_in"] == 7 and overview["totals"]["messages_out"] == 10
    assert overview["uptime"] >= 0 and overview["version"]

    for path, schema in LISTS.items():
        assert response_schema(path) == schema
        validate(await aget(port, path), schema)

    connections = (await aget(port, "/api/connections"))["items"]
    by_door = {}
    for c in connections:
        by_door.setdefault(c["door"], []).append(c)
    assert sorted(by_door) == ["malamute", "mqks", "twino"]
    mqks_out = sorted(c["messages_out"] for c in by_door["mqks"])
    mqks_in = sorted(c["messages_in"] for c in by_door["mqks"])
    assert mqks_out == [0, 7] and mqks_in == [0, 3]
    assert all(c["bytes_in"] > 0 for c in connections)
    mqks_consumer = next(c for c in by_door["mqks"] if c["messages_out"] == 7)
    assert mqks_consumer["bytes_out"] > 7 * len("c1 ok m0 event=ev hello0\n")
    assert mqks_consumer["consumers"] == 1 and mqks_consumer["client"]["id"]
    pusher = by_door["twino"][0]
    assert pusher["client"]["name"] == "pusher" and pusher["messages_in"] == 2
    one = await aget(port, f"/api/connections/{pusher['id']}")
    validate(one, "Connection")
    assert one["id"] == pusher["id"]

    jobs = await aget(port, "/api/queues/jobs")
    validate(jobs, response_schema("/api/queues/{name}"))
    assert (jobs["published"], jobs["delivered"], jobs["depth"]) == (7, 7, 0)
    assert jobs["consumers_by_door"] == {"mqks": 1} and jobs["durable"] is False
    assert jobs["journal_bytes"] is None and jobs["mode"] == "round-robin"

    streams = {s["name"]: s for s in (await aget(port, "/api/streams"))["items"]}
    assert streams["mqks"]["published"] == 3
    assert streams["mqks"]["subscriptions_by_door"] == {"mqks": 1, "malamute": 1}
    mailboxes = {m["name"]: m for m in (await aget(port, "/api/mailboxes"))["items"]}
    assert mailboxes["watcher"]["owner_door"] == "malamute"
    channels = {c["name"]: c for c in (await aget(port, "/api/channels"))["items"]}
    assert channels["jobs"]["queues"] == ["jobs"]
    limited = await aget(port, "/api/connections?limit=2")
    assert limited["total"] == 5 and len(limited["items"]) == 2


@pytest_twisted.ensureDeferred
async def test_metrics_parse_with_prometheus_clients_own_parser(server):
    await traffic(server)
    server.advance(1.0)                  # the sampler's next pass: the counters it shows
    status, ctype, raw = await deferToThread(fetch, server.port("admin"), "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(raw.decode())}

    def value(family, **labels):
        for sample in families[family].samples:
            if sample.labels == labels and not sample.name.endswith("_created"):
                return sample.value
        raise AssertionError(f"no {family} {labels}: {families[family].samples}")

    assert value("mqksbridge_door_messages_received", door="mqks") == 3
    assert value("mqksbridge_door_messages_received", door="twino") == 2
    assert value("mqksbridge_door_messages_delivered", door="malamute") == 3
    assert value("mqksbridge_door_connections", door="mqks") == 2
    assert value("mqksbridge_flow_messages", **{"from": "twino", "to": "mqks"}) == 2
    assert value("mqksbridge_queue_published", queue="jobs") == 7
    assert value("mqksbridge_queue_messages", queue="jobs") == 0
    assert value("mqksbridge_queue_consumers", queue="jobs", door="mqks") == 1
    assert value("mqksbridge_stream_published", stream="mqks") == 3
    assert value("mqksbridge_stream_subscriptions", stream="mqks", door="malamute") == 1
    assert families["mqksbridge_publish_to_deliver_seconds"].type == "histogram"
    assert families["mqksbridge_fsync_seconds"].type == "histogram"
    info = families["mqksbridge_info"].samples[0]
    assert info.name == "mqksbridge_info" and info.value == 1
    assert info.labels["node"] == "mqksbridge" and info.labels["version"]


@pytest_twisted.ensureDeferred
async def test_latency_histogram_samples_one_delivery_in_256(server):
    """Twino stamps each push with its arrival time: 512 pushes to an MQKS consumer are two
    timed deliveries, each well under the test's own duration."""
    consumer = await server.mqks()
    assert await consumer.request("c1 consume --confirm lat ev") == "c1 ok "
    twino = await server.twino()

    def push_all(client):
        for i in range(512):
            client.push("lat", 0, b"x")
        assert client.ping() >= 0
    await deferToThread(push_all, twino.client)
    for _ in range(512):
        await consumer.line(5)
    raw = (await deferToThread(fetch, server.port("admin"), "/metrics"))[2].decode()
    samples = {s.name: s.value for f in text_string_to_metric_families(raw)
               if f.name == "mqksbridge_publish_to_deliver_seconds" for s in f.samples}
    assert samples["mqksbridge_publish_to_deliver_seconds_count"] == 2
    assert 0 <= samples["mqksbridge_publish_to_deliver_seconds_sum"] < 10
    histogram = server.top.admin.metrics.fsync
    histogram.observe(0.002)                  # the hook the journal calls after each fsync
    raw = (await deferToThread(fetch, server.port("admin"), "/metrics"))[2].decode()
    assert "mqksbridge_fsync_seconds_count 1.0" in raw


@pytest_twisted.ensureDeferred
async def test_errors_are_json_and_actions_need_json(server):
    port = server.port("admin")
    missing = await aget(port, "/api/queues/nope", expect=404)
    validate(missing, "Error")
    await aget(port, "/api/nothing", expect=404)
    await aget(port, "/api/overview", "POST", {}, expect=405)
    await aget(port, "/api/queues?limit=0", expect=400)
    consumer = await server.mqks()
    assert await consumer.request("c1 consume --confirm q1 ev") == "c1 ok "
    refused = await aget(port, "/api/queues/q1/purge", "POST", {}, expect=415,
                         content_type="text/plain")
    assert "application/json" in refused["error"]
    await aget(port, "/api/queues/q1/move", "POST", {}, expect=400)
    await aget(port, "/api/queues/q1/resume", "POST", {}, expect=409)
    html = await deferToThread(fetch, port, "/")
    assert html[0] == 200 and html[1].startswith("text/html") and b"dashboard.js" in html[2]
    for name in ("dashboard.js", "dashboard.css"):
        assert (await deferToThread(fetch, port, f"/static/{name}"))[0] == 200
    spec = await aget(port, "/api/openapi.json")
    assert spec["openapi"].startswith("3.1")


@pytest_twisted.ensureDeferred
async def test_textqueue_files_are_counted_like_connections(running, tmp_path):
    """The fourth door: 3 records of an inbox file reach an MQKS consumer and 2 MQKS
    publishes reach an outbox file; the overview, the connection list and /metrics count
    them as they count sockets (messages in/out, bytes, flows both ways)."""
    inbox, outbox = tmp_path / "inbox", tmp_path / "out.tq"
    inbox.mkdir()
    server = await running({"textqueue": {"inbox": [str(inbox)], "outbox": {"tq-out": str(outbox)},
                                          "watch": "poll", "poll_interval": 0.5, "grace": 0}})
    consumer, publisher = await server.mqks(), await server.mqks()
    assert await consumer.request("c1 consume --confirm tq-in") == "c1 ok "
    assert await publisher.request("b1 rebind --confirm tq-out --add tqev") == "b1 ok "
    (inbox / "tq-in.tq").write_bytes(b"-a\n-b\n-c\n")
    publisher.send("m1 publish tqev one", "m2 publish tqev two")
    assert await publisher.request("p1 ping x") == "p1 ok x"
    server.advance(0.5)                              # the door's poll finds the inbox file
    assert sorted(line.rsplit(" ", 1)[1] for line in await consumer.lines_n(3)) == [
        "a", "b", "c"]
    await until(lambda: outbox.exists() and outbox.read_bytes().count(b"\n-") == 2,
                what="two records in the outbox")

    server.advance(1.0)                  # the sampler's next pass: the counters it shows
    port = server.port("admin")
    overview = await aget(port, "/api/overview")
    validate(overview, "Overview")
    door = next(d for d in overview["doors"] if d["name"] == "textqueue")
    assert (door["messages_in"], door["messages_out"], door["connections"]) == (3, 2, 2)
    assert door["bytes_in"] == len(b"-a\n-b\n-c\n") and door["bytes_out"] > len(b"-one\n-two\n")
    flows = {(f["from"], f["to"]): f["messages"] for f in overview["flows"]}
    assert flows[("textqueue", "mqks")] == 3 and flows[("mqks", "textqueue")] == 2
    files = {c["peer"]: c for c in (await aget(port, "/api/connections"))["items"]
             if c["door"] == "textqueue"}
    assert files[str(outbox)]["messages_out"] == 2 and files[str(outbox)]["consumers"] == 1
    assert files[str(inbox / "tq-in.tq")]["messages_in"] == 3

    raw = (await deferToThread(fetch, port, "/metrics"))[2].decode()
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for f in text_string_to_metric_families(raw) for s in f.samples}
    assert values[("mqksbridge_door_messages_received_total", (("door", "textqueue"),))] == 3
    assert values[("mqksbridge_door_messages_delivered_total", (("door", "textqueue"),))] == 2
    assert values[("mqksbridge_flow_messages_total",
                   (("from", "textqueue"), ("to", "mqks")))] == 3
