"""One real Spark session (local[2]) for every pipeline test of a pytest run.

A session takes 10-20 s to start, so it is shared (scope "session"); its Python
workers run this venv's Python (PYSPARK_PYTHON, set by session.spark_session), which
has mqksbridge installed, so the data source is importable by the workers.

The test JVMs (this session's, and the standalone cluster's in test_cluster.py) run
short jobs on small data on a 2-core machine shared with the rest of the suite, so they
compile with the quick JIT only and collect garbage on one thread (LEAN_JVM): the
optimising compiler's and the parallel collector's threads cost more CPU than they save
in a run this short.
"""
import pytest

from mqksbridge.pipeline import report
from mqksbridge.pipeline.session import spark_session, stop
from tests.pipeline import dead_letters, traffic


LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="session")
def spark():
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "4",
                                         "spark.ui.enabled": "false",
                                         "spark.driver.extraJavaOptions": LEAN_JVM})
    yield session
    stop(session)           # the JVM and its Python workers end here, not at exit


@pytest.fixture(scope="session")
def report_journals(tmp_path_factory):
    """Journals for the report tests, local and on the cluster."""
    root = tmp_path_factory.mktemp("report-journals")
    traffic.write_tree(str(root), traffic.envelopes(4000, seed=11, step_ms=40), segment_records=300)
    return root


@pytest.fixture(scope="session")
def local_report(spark, report_journals, tmp_path_factory):
    """(out dir, tables as pandas, facts) of `report` run on local[2]."""
    out = tmp_path_factory.mktemp("report")
    frames, facts = report.run(spark, [report_journals], str(out), show_progress=False)
    return out, frames, facts


@pytest.fixture(scope="session")
def broker_journal(tmp_path_factory):
    """(broker workdir, message ids, journal dir) of tests/pipeline/dead_letters.py."""
    workdir = tmp_path_factory.mktemp("dead-letters")
    ids, journal = dead_letters.write(workdir)
    return workdir, ids, journal
