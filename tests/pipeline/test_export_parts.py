"""The export's Parquet, written by the Python tasks (pipeline/parquet_parts.py), equals
what Spark's own writer makes of the same journals: the same partition directories, the
same rows read back with Spark and with pyarrow, on random journals (queue names that
need escaping, spans of minutes to years, a file that is no journal), with and without
a `--where`; and the write modes do what docs/pipeline.md says."""
import datetime
import os

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mqksbridge.pipeline import export, parquet_parts
from tests.pipeline import traffic

QUEUE_TEXT = st.text("ab1/%=:#?*'\"\\{[]^ \u00e9\x01\x7f", min_size=1, max_size=5)


def _write(root, queues, n, seed, start_ms, step_ms):
    items = [traffic.Item(queues[i % len(queues)], item.envelope) for i, item in
             enumerate(traffic.envelopes(n, seed=seed, start_ms=start_ms, step_ms=step_ms))]
    written = traffic.write_tree(str(root), items, segment_records=70)
    inbox = root / "inbox"
    inbox.mkdir()
    first = sorted(written)[0]
    with open(first, "rb") as f:
        (inbox / "in.tq").write_bytes(f.read().split(b"\n", 1)[1])     # no header: no queue


def _layout(out):
    return sorted(os.path.relpath(folder, out) for folder, _, files in os.walk(out)
                  if any(f.endswith(".parquet") for f in files))


def _spark_rows(spark, out):
    return sorted(map(repr, spark.read.parquet(out).collect()))


def _arrow_rows(out):
    return sorted(map(repr, pq.read_table(out).to_pylist()))


@pytest.mark.timeout(900)      # each example is two exports and four reads back
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(queues=st.lists(QUEUE_TEXT, min_size=1, max_size=3, unique=True),
       n=st.integers(1, 250), seed=st.integers(0, 1000),
       start_ms=st.integers(0, 4_000_000_000_000),
       step_ms=st.sampled_from([7, 60_000, 3_600_000, 40 * 86_400_000]),
       where=st.sampled_from([None, "status = 'error' or retry > 0", "subject like '%e%'"]),
       with_comments=st.booleans())
@example(queues=["1"], n=1, seed=0, start_ms=0, step_ms=7,        # nothing selected: the
         where="status = 'error' or retry > 0", with_comments=False)  # out holds _SUCCESS
def test_python_parts_equal_sparks_writer(spark, tmp_path_factory, queues, n, seed, start_ms,
                                          step_ms, where, with_comments):
    root = tmp_path_factory.mktemp("journals")
    _write(root, queues, n, seed, start_ms, step_ms)
    ours, theirs = str(root / "ours"), str(root / "theirs")
    wanted = export.DEFAULT
    count = export.run(spark, [root / "journal", root / "inbox"], ours, where=where,
                       show_progress=False, with_comments=with_comments)
    expected = export.spark_write(spark, [root / "journal", root / "inbox"], theirs, wanted,
                                  where, False, "errorifexists", with_comments)
    assert count == expected
    assert _layout(ours) == _layout(theirs)
    visible = sorted(n for n in os.listdir(theirs) if not n.startswith("."))   # not Spark's .crc
    assert sorted(os.listdir(ours)) == visible
    if count:                        # none selected: `_SUCCESS` alone, no schema to read
        assert _spark_rows(spark, ours) == _spark_rows(spark, theirs)
        assert _arrow_rows(ours) == _arrow_rows(theirs)


def test_days_and_partition_values_as_spark_prints_them():
    epoch = datetime.date(1970, 1, 1)
    for day in (datetime.date(2024, 6, 13), datetime.date(5, 3, 1), datetime.date(1, 1, 1),
                datetime.date(9999, 12, 31), datetime.date(2000, 2, 29),
                datetime.date(1969, 12, 31)):
        assert parquet_parts.day_text((day - epoch).days) == day.isoformat()
    assert parquet_parts.day_text((datetime.date(1, 1, 1) - epoch).days - 366) == "0000-01-01"
    cycle = 146_097                 # days in 400 Gregorian years; as Spark printed them:
    assert parquet_parts.day_text((datetime.date(2000, 1, 1) - epoch).days + 25 * cycle) == (
        "+12000-01-01")
    assert parquet_parts.day_text((datetime.date(356, 3, 15) - epoch).days - cycle) == "-0044-03-15"
    assert parquet_parts.partition_path(None, "a/b#\u00e9") == (
        "day=__HIVE_DEFAULT_PARTITION__/queue=a%2Fb%23\u00e9")
    assert parquet_parts.partition_path(0, "") == "day=1970-01-01/queue=__HIVE_DEFAULT_PARTITION__"


def test_write_modes(spark, tmp_path):
    root = tmp_path / "j"
    _write(root, ["orders", "jobs"], 150, 3, traffic.BASE_MS, 60_000)
    paths, out = [root / "journal"], str(tmp_path / "out")
    first = export.run(spark, paths, out, show_progress=False)
    assert first > 0 and os.path.exists(os.path.join(out, "_SUCCESS"))
    assert not os.path.exists(os.path.join(out, parquet_parts.TEMPORARY))
    with pytest.raises(FileExistsError):
        export.run(spark, paths, out, show_progress=False)
    assert export.run(spark, paths, out, show_progress=False, mode="ignore") == 0
    assert spark.read.parquet(out).count() == first
    assert export.run(spark, paths, out, show_progress=False, mode="append") == first
    assert spark.read.parquet(out).count() == 2 * first
    narrowed = export.run(spark, paths, out, where="queue = 'jobs'", show_progress=False,
                          mode="overwrite")
    back = spark.read.parquet(out)
    assert 0 < narrowed == back.count() < first
    assert {r.queue for r in back.select("queue").distinct().collect()} == {"jobs"}
    assert "_SUCCESS" in os.listdir(out) and parquet_parts.TEMPORARY not in os.listdir(out)
