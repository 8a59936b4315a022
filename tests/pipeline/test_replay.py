"""`replay` end to end into a real broker (`twistd -n mqksbridge`, every door on loopback): an
MQKS, a Twino and a Malamute consumer each receive exactly the selected messages, in journal
order, with what their protocol keeps (docs/mapping.md); an inbox file gets every field; rate
limit, dry run and the count."""
import json
import time

import pytest

from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.bridge.clients.mqks import MqksClient
from mqksbridge.pipeline import cli, replay
from mqksbridge.protocols.textqueue import journal, scan
from tests.pipeline import plain, traffic
from tests.support.process import BrokerProcess

WAIT = 30


@pytest.fixture(scope="module")
def journals(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay-journals")
    traffic.write_tree(str(root), traffic.envelopes(1200, seed=5, step_ms=13), segment_records=100)
    return root


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("broker"), doors=("mqks", "malamute", "twino"))
    process.start()
    yield process
    process.stop()


def _selected(journals, test):
    rows = [r for r in plain.read_tree(journals) if r.status != "comment" and test(r)]
    return sorted(rows, key=lambda r: (r.envelope.created_at, r.file, r.offset))


def test_mqks_consumer_gets_exactly_the_selected_messages_in_order(spark, journals, broker):
    where = "queue = 'orders' and status = 'done' and origin in ('mqks', 'textqueue')"
    want = _selected(journals, lambda r: r.queue == "orders" and r.status == "done"
                     and r.envelope.origin in ("mqks", "textqueue"))
    fits = [r for r in want if b"\n" not in r.envelope.frames[0]]
    assert 20 < len(fits) < len(want)               # some have several lines: MQKS cannot
    consumer = MqksClient(port=broker.ports["mqks"], timeout=WAIT)
    try:
        cid = consumer.consume("replayed-orders", ["replayed.order"])
        to = replay.target(f"mqks://127.0.0.1:{broker.ports['mqks']}/replayed.order")
        result = replay.run(spark, [journals], where, to, show_progress=False)
        assert (result.selected, result.sent) == (len(want), len(fits))
        assert dict(result.skipped) == {
            "body not one MQKS line (empty, LF, TAB or trailing whitespace)": len(want) - len(fits)}
        got = [consumer.recv(WAIT) for _ in fits]
        assert [(d.id, d.event, d.data) for d in got] == [
            (r.envelope.id, "replayed.order", r.envelope.frames[0]) for r in fits]
        assert all(d.consumer == cid for d in got)
        assert consumer.ping("nothing-more") == "nothing-more" and not consumer._pending
    finally:
        consumer.close()


def test_twino_consumer_gets_ids_subjects_headers_and_frames(spark, journals, broker):
    want = _selected(journals, lambda r: r.queue == "img" and r.envelope.origin in ("twino", "malamute"))
    port = broker.ports["twino"]
    with twino.connect(port=port, timeout=WAIT) as admin, \
            twino.connect(port=port, timeout=WAIT) as member:
        answer = admin.operation(610, "audit", [("Channel-Name", "audit"), ("Queue-Id", "1"),
                                                ("Queue-Status", "round-robin")],
                                 json.dumps({"RequestAcknowledge": False}).encode())
        assert answer.content_type in (0, 481), answer
        assert member.join("audit") == 0
        to = replay.target(f"twino://127.0.0.1:{port}/audit/1")
        result = replay.run(spark, [journals], "queue = 'img' and origin in ('twino', 'malamute')",
                            to, show_progress=False)
        assert (result.selected, result.sent, sum(result.skipped.values())) == (len(want), len(want), 0)
        got = []
        for _ in want:
            frame = member.recv(WAIT)
            assert frame is not None, f"only {len(got)} of {len(want)} arrived"
            got.append((frame.message_id, twino.crossed(frame), frame.high_priority))
    assert [(mid, c.subject, c.frames, dict(c.headers), priority) for mid, c, priority in got] == [
        (r.envelope.id, r.envelope.subject, r.envelope.frames, r.envelope.headers or {},
         r.envelope.priority) for r in want]
    assert any(len(r.envelope.frames) > 1 for r in want) and any(r.envelope.headers for r in want)


def test_malamute_worker_gets_subjects_trackers_and_frames(spark, journals, broker):
    want = _selected(journals, lambda r: r.queue == "jobs" and r.status == "error")
    endpoint = f"tcp://127.0.0.1:{broker.ports['malamute']}"
    with MalamuteClient(endpoint, "replay-worker", timeout=WAIT) as worker:
        worker.set_worker("audit-jobs", ".*")
        to = replay.target(f"malamute://{endpoint}/audit-jobs")
        result = replay.run(spark, [journals], "queue = 'jobs' and status = 'error'", to,
                            show_progress=False)
        assert (result.selected, result.sent) == (len(want), len(want)) and len(want) > 20
        got = [worker.recv(WAIT) for _ in want]
    assert [(d.command, d.address, d.subject, d.tracker, d.frames) for d in got] == [
        ("SERVICE DELIVER", "audit-jobs", r.envelope.subject, r.envelope.tracker, r.envelope.frames)
        for r in want]


def test_an_inbox_file_gets_every_field(spark, journals, tmp_path):
    inbox = tmp_path / "inbox.tq"
    inbox.write_bytes(b"-already there\n")
    want = _selected(journals, lambda r: r.queue == "audit/1" and r.envelope.retry > 0)
    result = replay.run(spark, [journals], "queue = 'audit/1' and retry > 0",
                        replay.target(str(inbox)), show_progress=False)
    assert result.sent == len(want) > 10
    data = inbox.read_bytes()
    records = list(scan(data).records())[1:] + [scan(data).incomplete.record()]
    got = [journal.decode(r) for r in records]
    assert [(e.status, e.id, e.subject, e.frames, e.headers, e.sender, e.origin, e.tracker,
             e.priority, e.created_at, e.expires_at, e.retry, e.settled) for e in got] == [
        ("-", r.envelope.id, r.envelope.subject, r.envelope.frames, r.envelope.headers,
         r.envelope.sender, r.envelope.origin, r.envelope.tracker, r.envelope.priority,
         r.envelope.created_at, r.envelope.expires_at, 0, None) for r in want]


def test_rate_limit_and_dry_run(spark, journals, broker, tmp_path):
    where = "queue = 'orders' and status = 'error' and retry = 5"
    selected = _selected(journals, lambda r: r.queue == "orders" and r.status == "error"
                         and r.envelope.retry == 5)
    n = len(selected)
    one_line = sum(len(r.envelope.frames) == 1 and b"\n" not in r.envelope.frames[0] for r in selected)
    assert n > 20 and 0 < one_line < n
    started = time.monotonic()
    result = replay.run(spark, [journals], where, replay.target(str(tmp_path / "paced.tq")),
                        rate=100, show_progress=False)
    assert result.sent == n and time.monotonic() - started >= (n - 1) / 100
    nowhere = replay.target("mqks://127.0.0.1:1/never")            # nothing listens there
    dry = replay.run(spark, [journals], where, nowhere, dry_run=True, show_progress=False)
    assert (dry.selected, dry.sent, sum(dry.skipped.values()), dry.dry_run) == (
        n, one_line, n - one_line, True)
    assert dry.summary().startswith(f"replay: would replay {one_line} of {n} selected messages")


@pytest.mark.parametrize("url, error", [
    ("mqks://127.0.0.1/x", "mqks://HOST:PORT/EVENT"),
    ("twino://127.0.0.1:22200/jobs", "CHANNEL/QUEUE-ID"),
    ("malamute://127.0.0.1:9999/jobs", "malamute://tcp://"),
    ("malamute://tcp://127.0.0.1:9999/jobs?service", "?stream"),
    ("amqp://127.0.0.1/x", "no replay target"),
])
def test_bad_targets_are_refused_before_anything_starts(url, error, capsys):
    with pytest.raises(ValueError, match=error.replace("?", r"\?")):
        replay.target(url)
    assert cli.main(["replay", "j", "--to", url]) == 2
    assert error in capsys.readouterr().err


def test_targets_parse():
    m = replay.target("malamute://tcp://127.0.0.1:9999/audit%2Fjobs?stream")
    assert (m.endpoint, m.name, m.stream) == ("tcp://127.0.0.1:9999", "audit/jobs", True)
    t = replay.target("twino://localhost:22200/my%20channel/3")
    assert (t.host, t.port, t.channel, t.queue_id) == ("localhost", 22200, "my channel", 3)
    q = replay.target("mqks://localhost:25000/")
    assert (q.host, q.port, q.event) == ("localhost", 25000, "")
    assert replay.columns_for("body like '%x%' and queue = 'a'", ["id"]) == ["id", "body", "queue"]
