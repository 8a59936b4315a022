"""The `textqueue` Spark data source on real files: every column against the plain-Python
reading, byte ranges cut anywhere, Arrow batches of exactly the declared schema, filters
pushed down and applied exactly, undeclared columns left undecoded, files, directories,
globs, live and archived journals, torn last records, empty files, files written and
marked by the reference `textqueue` package."""
import datetime
import json
import os

import pyarrow as pa
import pytest
import textqueue
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual, Not, StringStartsWith
from pyspark.sql.pandas.types import to_arrow_schema

from mqksbridge.pipeline import files, schema
from mqksbridge.pipeline.session import read
from mqksbridge.pipeline.source import TextQueueDataSource
from mqksbridge.protocols.textqueue import encode_record, journal
from mqksbridge.protocols.textqueue.journal import Envelope, Settle
from tests.pipeline import plain, traffic
from tests.textqueue.strategies import write_file

UTC = datetime.timezone.utc


def _ms(ts):
    return None if ts is None else round(ts.timestamp() * 1000)


def _expected(row: plain.Row):
    """A plain-Python row in the data source's column terms."""
    e = row.envelope
    s = e.settled
    return {
        "file": row.file, "offset": row.offset, "queue": row.queue, "status": row.status,
        "id": e.id, "subject": e.subject, "origin": e.origin, "sender": e.sender,
        "consumer": None if s is None else s.door, "tracker": e.tracker,
        "priority": e.priority, "created": round(e.created_at * 1000),
        "expires": None if e.expires_at is None else round(e.expires_at * 1000),
        "settled": None if s is None else round(s.at * 1000),
        "settle_reason": None if s is None else s.reason, "retry": e.retry,
        "headers": e.headers, "frame_count": len(e.frames), "size": sum(map(len, e.frames)),
        "body_bytes": b"".join(e.frames), "frames": list(e.frames), "checksum": row.checksum,
    }


def _actual(row):
    d = row.asDict()
    for key in ("created", "expires", "settled"):
        d[key] = _ms(d[key])
    d["body_bytes"] = bytes(d["body_bytes"])
    d["frames"] = [bytes(f) for f in d["frames"]]
    return {k: v for k, v in d.items() if k not in ("body", "variables")}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    traffic.write_tree(str(root), traffic.envelopes(3000, seed=7), segment_records=150)
    return root


def test_every_column_equals_the_plain_python_reading(spark, tree):
    want = sorted((_expected(r) for r in plain.read_tree(tree)), key=lambda d: (d["file"], d["offset"]))
    rows = read(spark, [tree]).orderBy("file", "offset").collect()
    got = [_actual(r) for r in rows]
    assert len(got) == len(want) == 3000
    assert got == want
    # body: the stored text; variables: what the record says, as written
    by_key = {(r.file, r.offset): r for r in rows}
    for row in plain.read_tree(tree)[:200]:
        spark_row = by_key[(row.file, row.offset)]
        raw = _raw_at(row.file, row.offset)
        assert spark_row.body == journal.decode_fields(raw, ["body"])[0].decode()
        assert spark_row.variables["c"] == journal.value_of(raw, b"c").decode()


def _raw_at(path, offset):
    data = open(path, "rb").read()
    end = data.find(b"\n", offset)
    while end + 1 < len(data) and data[end + 1:end + 2] in (b" ", b"\\"):
        end = data.find(b"\n", end + 1)
    return data[offset:end]


def _small_journal():
    envs = [Envelope("a", "s.1", (b"one",), None, "c1", "mqks", created_at=1.0),
            Envelope("b", "s.2", (b"two\nlines\n\\not a variable",), {"k": "v"}, "c2", "twino",
                     created_at=2.0),
            Envelope("c", "", (b"\x00bin", b""), None, "c3", "malamute", "trk", True, created_at=3.0),
            Envelope("d", "s.4", (b"-",), None, "", "textqueue", created_at=4.0)]
    data = journal.encode_header("jobs", 1, 0) + b"".join(
        journal.encode_message(e, status=s, settled=st) for e, s, st in zip(
            envs, "-=!-", [None, Settle("acked", 2.5, "mqks"), Settle("expired", 9.0), None]))
    return data, envs


def test_byte_ranges_cut_at_every_offset_read_each_record_once(tmp_path):
    data, envs = _small_journal()
    path = str(write_file(tmp_path / "jobs.tq", data))
    header = files.read_header(path)
    size = len(data)

    def offsets(ranges):
        out = []
        for r in ranges:
            for block in files.read_range(r, header, block=7):
                out += block.offsets.tolist()
        return out

    whole = offsets([files.Range(path, 0, size, size)])
    assert len(whole) == len(envs)
    for cut in range(size + 1):
        ranges = [files.Range(path, 0, cut, size), files.Range(path, cut, size, size)]
        assert offsets(ranges) == whole, cut
    for a in range(0, size + 1, 5):
        for b in range(a, size + 1, 11):
            ranges = [files.Range(path, 0, a, size), files.Range(path, a, b, size),
                      files.Range(path, b, size, size)]
            assert offsets(ranges) == whole, (a, b)


def test_tasks_come_in_whole_rounds_of_the_cores(tmp_path):
    """A big file is cut into tasks of about equal size, a multiple of the cores in
    number (none idles in the last round); small files share a task."""
    big = tmp_path / "big.tq"
    big.write_bytes(b"-x\n" * 500_000)                            # 1,500,000 bytes
    for cores, tasks in ((1, 5), (2, 6), (3, 6), (4, 8)):
        source = TextQueueDataSource({"path": str(big), "splitBytes": "320000",
                                      "minPartitions": str(cores)})
        reader = source.reader(schema.spark_schema(["offset"]))
        sizes = [sum(r.end - r.start for r in task.ranges) for task in reader.partitions()]
        assert len(sizes) == tasks and sum(sizes) == 1_500_000, (cores, sizes)
        assert max(sizes) - min(sizes) <= 3 * tasks and max(sizes) <= 320_000, (cores, sizes)
        offsets = [b.column(0) for t in reader.partitions() for b in reader.read(t)]
        assert sum(map(len, offsets)) == 500_000
    assert files.balanced_split([str(big)], 320_000, 2, least=400_000) == 320_000
    assert files.balanced_split([str(big)], 320_000, 200) == 64 << 10


def test_spark_reads_the_same_rows_in_many_small_tasks(spark, tmp_path):
    """Ranges of 41 bytes, each a Spark task (the reader itself is tested at every cut
    above; every other Spark test reads files in one range)."""
    data, envs = _small_journal()
    path = write_file(tmp_path / "jobs.tq", data)
    df = read(spark, [path], ["offset", "id", "frames"], splitBytes=41)
    rows = df.orderBy("offset").collect()
    assert [(r.id, tuple(map(bytes, r.frames))) for r in rows] == [(e.id, e.frames) for e in envs]


def test_the_reader_yields_arrow_batches_of_exactly_the_declared_schema(tree):
    for names in (None, ["status", "created", "headers", "frames"], ["offset"]):
        spark_schema = schema.spark_schema(names)
        source = TextQueueDataSource({"path": str(tree)})
        reader = source.reader(spark_schema)
        expected = to_arrow_schema(spark_schema, timezone="UTC")
        batches = [b for task in reader.partitions() for b in reader.read(task)]
        assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
        assert all(b.schema.equals(expected) for b in batches)
        assert sum(b.num_rows for b in batches) == 3000


def test_undeclared_columns_are_not_decoded(spark, tmp_path):
    """A record whose created time does not decode: reading other columns works,
    declaring `created` raises the codec's error."""
    good = journal.encode_message(Envelope("ok", "s", (b"x",), created_at=5.0))
    bad = good.replace(b"\\t=5000", b"\\t=soon")
    path = write_file(tmp_path / "q.tq", good + bad + good)
    assert read(spark, [path], ["offset", "id", "subject"]).count() == 3
    with pytest.raises(Exception, match="t is not an integer"):
        read(spark, [path], ["offset", "created"]).collect()


def _plan(df):
    return df._jdf.queryExecution().executedPlan().toString()


def _not_pushed(predicate, column):
    """The same predicate on an expression of the column that Spark cannot push down."""
    return predicate.replace(f"{column} ", f"coalesce({column}, {column}) ")


PREDICATES = [
    "status = 'error'",
    "status in ('queued', 'comment')",
    "status <> 'done'",
    "status = '-'",
    "queue = 'orders'",
    "queue in ('jobs', 'audit/1')",
    "queue like 'aud%'",
    "queue <> 'img'",
    "created > timestamp'2024-06-13 19:26:20.5'",
    "created <= timestamp'2024-06-13 19:26:20.5' and created >= timestamp'2024-06-13 19:26:15'",
    "created = timestamp'2024-06-13 19:26:15.123'",
    "settled < timestamp'2024-06-13 19:26:25'",
    "offset > 5000",
    "file like '%/archive/%'",
]
FILTERED = ["file", "offset", "queue", "status", "created", "settled"]


@pytest.fixture(scope="module")
def evaluated(spark, tree):
    """The rows each predicate selects when Spark evaluates it (on an expression of the
    column, which it cannot push down): every predicate in one query."""
    df = read(spark, [tree], FILTERED)
    tests = [F.expr(_not_pushed(p, p.split()[0])).alias(f"p{i}") for i, p in enumerate(PREDICATES)]
    rows = df.select(*FILTERED, *tests).collect()
    return {p: sorted(tuple(r[:len(FILTERED)]) for r in rows if r[f"p{i}"])
            for i, p in enumerate(PREDICATES)}


@pytest.mark.parametrize("predicate", PREDICATES)
def test_filters_are_pushed_down_and_exact(spark, tree, evaluated, predicate):
    df = read(spark, [tree], FILTERED, pushFilters=True)
    column = predicate.split()[0]
    pushed = df.where(predicate)
    rows = sorted(tuple(r) for r in pushed.collect())
    assert rows == evaluated[predicate]
    matches_none = predicate.startswith(("created =", "status = '-'"))
    assert (not rows) == matches_none
    spark_filters = [line.replace(f"isnotnull({column}#", "") for line in
                     _plan(pushed).splitlines() if "Filter " in line and "BatchScan" not in line]
    if "like '%" not in predicate:          # '%x%' is StringContains: Spark keeps it
        assert not [f for f in spark_filters if f"{column}#" in f], spark_filters


def test_pushed_filters_reach_the_reader(tree):
    filters = [EqualTo(("status",), "queued"), Not(In(("queue",), ("jobs",))),
               StringStartsWith(("queue",), "o"),
               GreaterThan(("created",), datetime.datetime(2024, 6, 13, 19, 26, 20, tzinfo=UTC)),
               LessThanOrEqual(("retry",), 1)]
    columns = schema.spark_schema(["offset", "status", "queue", "created"])
    by_default = TextQueueDataSource({"path": str(tree)}).reader(columns)
    assert list(by_default.pushFilters(filters)) == filters      # takes none unless asked
    reader = TextQueueDataSource({"path": str(tree), "pushFilters": "true"}).reader(columns)
    left = list(reader.pushFilters(filters))
    assert left == [filters[-1]]
    batches = [b for task in reader.partitions() for b in reader.read(task)]
    table = pa.Table.from_batches(batches).to_pylist()
    assert table and all(r["status"] == "queued" and r["queue"] == "orders" for r in table)
    assert all(r["created"] > datetime.datetime(2024, 6, 13, 19, 26, 20, tzinfo=UTC) for r in table)
    want = [r for r in plain.read_tree(tree) if r.status == "queued" and r.queue == "orders"
            and r.envelope.created_at > datetime.datetime(2024, 6, 13, 19, 26, 20, tzinfo=UTC).timestamp()]
    assert len(table) == len(want)


def _reader_rows(paths, column="file", **options):
    """The values of one column the reader gives for `paths`, read in this process (what
    each Spark task does, without Spark)."""
    source = TextQueueDataSource({"paths": json.dumps([str(p) for p in paths]), **options})
    reader = source.reader(schema.spark_schema([column]))
    return [v for task in reader.partitions() for b in reader.read(task) for v in b.column(0).to_pylist()]


def test_files_directories_recursion_and_globs(spark, tree):
    archived = read(spark, [f"{tree}/journal/*/archive/*.tq"], ["file"]).count()
    with pytest.raises(Exception, match="no journal file"):
        read(spark, [f"{tree}/nothing-here"], ["file"]).count()
    everything = len(_reader_rows([tree]))
    live = len(_reader_rows([f"{tree}/journal/*/0*.tq"]))
    assert archived and live and archived + live == everything == 3000
    assert archived == len(_reader_rows([f"{tree}/journal/*/archive/*.tq"]))
    deep = set(_reader_rows([f"{tree}/**/00000001.tq"], "queue"))
    assert deep == set(traffic.QUEUES)
    orders = traffic.queue_dir(str(tree), "orders")
    flat = _reader_rows([orders], recursive="false")
    assert flat and all("/archive/" not in f for f in flat)
    one = sorted(f for f in os.listdir(orders) if f.endswith(".tq"))[-1]
    assert len(_reader_rows([os.path.join(orders, one)])) == len(
        plain.read_file(os.path.join(orders, one)))
    assert len(_reader_rows([tree, f"{tree}/journal/img"])) == 3000   # each file once
    with pytest.raises(FileNotFoundError, match="no journal file"):
        _reader_rows([f"{tree}/nothing-here"])


def test_torn_last_records_and_empty_files(spark, tmp_path):
    envs = [Envelope("i%d" % i, "s", (b"body %d" % i,), created_at=float(i)) for i in range(3)]
    data = journal.encode_header("q", 1, 0) + b"".join(journal.encode_message(e) for e in envs)
    last = data.rindex(b"-body 2")
    folder = tmp_path / "torn"
    folder.mkdir()
    for cut in range(last, len(data) + 1):
        write_file(folder / f"cut{cut:05d}.tq", data[:cut])
    write_file(folder / "empty.tq", b"")
    write_file(folder / "header-only.tq", journal.encode_header("q", 2, 0))
    write_file(folder / "header-torn.tq", journal.encode_header("q", 3, 0)[:-3])
    counts = {os.path.basename(r.file): r["count"] for r in
              read(spark, [folder], ["file", "id"]).groupBy("file").count().collect()}
    for cut in range(last, len(data) + 1):
        want = 3 if cut == len(data) else 2
        assert counts.get(f"cut{cut:05d}.tq") == want, cut
    assert not {"empty.tq", "header-only.tq", "header-torn.tq"} & set(counts)
    # the same files through the plain reading agree
    for cut in (last, last + 10, len(data) - 1, len(data)):
        assert len(plain.read_file(folder / f"cut{cut:05d}.tq")) == counts[f"cut{cut:05d}.tq"]


def test_files_written_and_marked_by_the_reference_package(spark, tmp_path):
    """A TextQueue door file as people and the reference package leave it: plain records
    appended by a shell script, then marked done, failed and annotated by the reference."""
    lines = [encode_record("-", "Buy milk", ["owner=alice", "error=          "]),
             encode_record("-", "Call Bob\nabout Friday", ["owner=bob"]),
             encode_record("#", "a note", []),
             encode_record("-", "Water plants", ["retry=0  "]),
             encode_record("-", "café \U0001F600", [])]
    path = write_file(tmp_path / "inbox.tq", b"".join(lines))
    queue = textqueue.TextQueue()
    queue.add_input(str(path))
    try:
        first = queue.get_next()
        first.mark_as_cleared()
        second = queue.get_next()
        second.mark_as_critical_error()
        first.set_variable(1, "error=E42")
        third = queue.get_next()
        third.set_variable(0, "retry=7")
    finally:
        queue.close()
    rows = read(spark, [path], ["offset", "queue", "status", "body", "retry", "variables",
                                "checksum", "created"]).orderBy("offset").collect()
    assert [(r.status, r.body, r.variables) for r in rows] == [
        ("done", "Buy milk", {"owner": "alice", "error": "E42"}),
        ("error", "Call Bob\nabout Friday", {"owner": "bob"}),
        ("comment", "a note", {}),
        ("queued", "Water plants", {"retry": "7"}),
        ("queued", "café \U0001F600", {}),
    ]
    assert all(r.queue is None and r.checksum == "missing" and r.retry == 0 for r in rows)
    assert [r.offset for r in rows] == [r.offset for r in plain.read_file(path)]


def test_options_are_checked(spark, tree):
    one = os.path.join(traffic.queue_dir(str(tree), "orders"), "00000004.tq")
    with pytest.raises(Exception, match="no column"):
        spark.read.format("textqueue").schema("colour string").load(one).collect()
    with pytest.raises(Exception, match="is timestamp"):
        spark.read.format("textqueue").schema("created string").load(one).collect()
    records = len(plain.read_file(one))
    assert records and spark.read.format("textqueue").load(one).count() == records
    assert spark.read.format("textqueue").option("paths", json.dumps([one])).load().count() == records


def test_queries_on_one_dataframe_do_not_keep_each_others_filters(spark, tree):
    """PySpark keeps the read that filter pushdown planned on the DataFrame's data source
    and reuses it for a later query that pushes no filter: a filter taken by the reader
    would silently drop rows from that query. By default the reader takes none, so every
    order of queries on one `load()` counts right, cached or not."""
    rows = plain.read_tree(tree)
    want = {s: sum(r.status == s for r in rows) for s in ("queued", "error")}
    df = spark.read.format("textqueue").schema(schema.spark_schema(FILTERED)).load(str(tree))
    assert df.where("status = 'queued'").count() == want["queued"]
    assert df.count() == len(rows)                              # filtered, then unfiltered
    assert df.where("status = 'error'").count() == want["error"]   # two filters in a row
    assert df.where("coalesce(status, '') = 'queued'").count() == want["queued"]
    assert df.where("status = 'queued'").count() == want["queued"]
    cached = df.cache()
    try:
        assert cached.count() == len(rows)                      # the cache holds every row
        assert cached.where("status = 'error'").count() == want["error"]
    finally:
        cached.unpersist()
    assert df.count() == len(rows)
