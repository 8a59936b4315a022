"""`report` on realistic journals: every table checked against a plain-Python count of the
same files (the incremental parser and journal.decode, nothing of pipeline/), and the page:
one self-contained HTML file with its charts embedded."""
import base64
import datetime
import math
import re
from collections import Counter, defaultdict

import pytest

from mqksbridge.pipeline import report, report_scan
from mqksbridge.pipeline.session import read
from tests.pipeline import plain, traffic

UTC = datetime.timezone.utc


@pytest.fixture
def journals(report_journals):
    return report_journals


@pytest.fixture
def made(local_report):
    return local_report


def _messages(root):
    return [r for r in plain.read_tree(root) if r.status != "comment"]


def _ms(seconds):
    return round(seconds * 1000)


def _percentile(values, p):
    """Spark's exact percentile: linear interpolation between closest ranks."""
    values = sorted(values)
    position = p * (len(values) - 1)
    low, high = math.floor(position), math.ceil(position)
    return values[low] + (values[high] - values[low]) * (position - low)


def _fate(row):
    e = row.envelope
    if e.settled is not None and e.settled.door:
        return e.settled.door
    if row.status == "queued":
        return "waiting"
    return e.settled.reason if e.settled else "unknown"


def test_queue_table_matches_a_plain_count(made, journals):
    out, frames, facts = made
    rows = _messages(journals)
    as_of = max(max(r.envelope.created_at, r.envelope.settled.at if r.envelope.settled else 0)
                for r in rows)
    assert facts["as_of"].timestamp() == pytest.approx(as_of)
    assert facts["messages"] == len(rows) and facts["unit"] == "minute"
    got = {r["queue"]: r for r in frames["queues"].to_dict("records")}
    assert set(got) == set(traffic.QUEUES)
    for queue in traffic.QUEUES:
        mine = [r for r in rows if r.queue == queue]
        reasons = Counter(r.envelope.settled.reason for r in mine if r.envelope.settled)
        waits = [_ms(r.envelope.settled.at) - _ms(r.envelope.created_at) for r in mine
                 if r.envelope.settled and r.envelope.settled.reason == "acked"]
        queued = [r.envelope.created_at for r in mine if r.status == "queued"]
        g = got[queue]
        assert (g["messages"], g["bytes"], g["queued"], g["done"], g["error"]) == (
            len(mine), sum(sum(map(len, r.envelope.frames)) for r in mine),
            sum(r.status == "queued" for r in mine), sum(r.status == "done" for r in mine),
            sum(r.status == "error" for r in mine))
        assert (g["dead_letters"], g["expired"], g["removed"], g["acked"]) == (
            reasons["dead-lettered"], reasons["expired"], reasons["removed"], len(waits))
        assert g["retried"] == sum(r.envelope.retry > 0 for r in mine)
        for p in report.PERCENTILES:
            assert g[f"wait_p{round(p * 100)}_ms"] == pytest.approx(_percentile(waits, p))
        assert g["wait_max_ms"] == max(waits)
        assert g["oldest_queued"].timestamp() == pytest.approx(min(queued))
        assert g["backlog_age_s"] == pytest.approx(as_of - min(queued), abs=1e-3)


def test_traffic_flow_retries_and_dead_letters_match_a_plain_count(made, journals):
    out, frames, facts = made
    rows = _messages(journals)

    def settle(r, attribute):
        s = r.envelope.settled
        return getattr(s, attribute) if s else None

    def table(name, keys, value="messages"):
        frame = frames[name].astype(object).where(frames[name].notna(), None)
        return {tuple(r[k] for k in keys): r[value] for r in frame.to_dict("records")}

    traffic_want = Counter((r.queue, r.envelope.subject, r.envelope.origin, settle(r, "door"),
                            r.status, settle(r, "reason")) for r in rows)
    keys = ["queue", "subject", "origin", "consumer", "status", "settle_reason"]
    assert table("traffic", keys) == traffic_want
    retries_want = defaultdict(int)
    for r in rows:
        retries_want[(r.queue, r.status, r.envelope.retry)] += 1
    assert table("retries", ["queue", "status", "retry"]) == retries_want
    assert table("flow", ["origin", "consumer"]) == Counter((r.envelope.origin, _fate(r)) for r in rows)
    dead = [r for r in rows if settle(r, "reason") == "dead-lettered"]
    assert table("dead_letters", ["queue", "subject", "origin", "consumer"]) == Counter(
        (r.queue, r.envelope.subject, r.envelope.origin, settle(r, "door")) for r in dead)
    assert sum(frames["traffic"]["retries"]) == sum(r.envelope.retry for r in rows)


def test_throughput_per_minute_matches_a_plain_count(made, journals):
    out, frames, facts = made
    rows = _messages(journals)

    def minute(seconds):
        return datetime.datetime.fromtimestamp(seconds, UTC).replace(second=0, microsecond=0)

    published = Counter((r.queue, minute(r.envelope.created_at)) for r in rows)
    settled = Counter((r.queue, minute(r.envelope.settled.at)) for r in rows if r.envelope.settled)
    got = {(r["queue"], r["bucket"].to_pydatetime().replace(tzinfo=UTC)): (r["published"], r["settled"])
           for r in frames["throughput"].to_dict("records")}
    assert got == {key: (published[key], settled[key]) for key in set(published) | set(settled)}


def test_the_page_is_one_file_with_its_charts(made):
    out, frames, facts = made
    page = (out / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 6
    for data in images:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "http://" not in page and "https://" not in page and "<script" not in page
    for queue in traffic.QUEUES:
        assert queue in page
    assert sorted(p.name for p in (out / "charts").iterdir()) == [
        "dead_letters.png", "flow.png", "queues.png", "retries.png", "throughput.png",
        "time_in_queue.png"]
    for name in report.TABLES:
        assert (out / "tables" / f"{name}.parquet").stat().st_size > 0


def test_a_where_clause_narrows_the_report(spark, journals, tmp_path):
    frames, facts = report.run(spark, [journals], str(tmp_path), where="queue = 'img' and origin = 'twino'",
                               show_progress=False, html=False)
    want = [r for r in _messages(journals) if r.queue == "img" and r.envelope.origin == "twino"]
    assert list(frames["queues"]["queue"]) == ["img"]
    assert int(frames["queues"]["messages"][0]) == len(want) > 0


def _spark_sql(spark, paths, where, as_of):
    """The tables by their Spark SQL definition, `report.tables`, as pandas frames."""
    df = read(spark, paths, report.COLUMNS)
    if where:
        df = df.where(where)
    result, facts = report.tables(df, as_of)
    return {name: result[name].toPandas() for name in report.TABLES}, facts


def _rows(frame):
    frame = frame.astype(object).where(frame.notna(), None)
    return sorted(frame.itertuples(index=False, name=None), key=repr)


@pytest.mark.parametrize("where, as_of", [
    (None, None),
    ("queue = 'img' or queue is null", datetime.datetime(2024, 6, 14, 1, 2, 3, 456789, UTC)),
    ("subject = 'no such subject'", None),
])
def test_the_one_scan_tables_equal_their_spark_sql_definition(spark, journals, tmp_path, where, as_of):
    """report.run's tables (report_scan: one scan, partials merged on the driver) are
    the Spark SQL definition's, value for value and type for type; with a file that is
    no journal (no queue), a where clause, a given as-of time, and nothing at all."""
    segment = sorted(p for p in journals.rglob("*.tq"))[0]
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "in.tq").write_bytes(segment.read_bytes().split(b"\n", 1)[1])    # no header
    paths = [str(journals), str(inbox)]
    want, want_facts = _spark_sql(spark, paths, where, as_of)
    got, facts = report_scan.tables(spark, paths, where, as_of)
    assert facts == want_facts
    for name in report.TABLES:
        assert list(got[name].columns) == list(want[name].columns), name
        assert list(got[name].dtypes) == list(want[name].dtypes), name
        assert _rows(got[name]) == _rows(want[name]), name
