"""One real Spark session (local[2]) for every pipeline test of a pytest run, and the
standalone-cluster run started in the background when the pipeline tests start.

A session takes 10-20 s to start, so it is shared (scope "session"); its Python
workers run this venv's Python (PYSPARK_PYTHON, set by session.spark_session), which
has mqksbridge installed, so the data source is importable by the workers. The cluster
test (test_cluster.py) mostly waits on JVMs for minutes: its cluster and report start
with the first pipeline test (when the cluster test is selected) and the test itself
runs after the other pipeline tests.
"""
import pytest

from mqksbridge.pipeline import report
from mqksbridge.pipeline.session import spark_session
from tests.pipeline import traffic
from tests.pipeline.cluster import ClusterReport

CLUSTER_TEST = "tests/pipeline/test_cluster.py::"


def pytest_collection_modifyitems(items):
    """The cluster test after the other pipeline tests (its run overlaps theirs)."""
    cluster = [item for item in items if item.nodeid.startswith(CLUSTER_TEST)]
    if not cluster:
        return
    rest = [item for item in items if not item.nodeid.startswith(CLUSTER_TEST)]
    last = max((i for i, item in enumerate(rest) if item.nodeid.startswith("tests/pipeline/")),
               default=len(rest) - 1)
    items[:] = rest[:last + 1] + cluster + rest[last + 1:]


@pytest.fixture(scope="session")
def spark():
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "4",
                                         "spark.ui.enabled": "false"})
    yield session
    session.stop()


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


@pytest.fixture(scope="session", autouse=True)
def cluster_report(request, tmp_path_factory):
    """The ClusterReport of the report journals, started now when the cluster test
    is selected (None otherwise)."""
    if not any(item.nodeid.startswith(CLUSTER_TEST) for item in request.session.items):
        yield None
        return
    journals = request.getfixturevalue("report_journals")
    workdir = tmp_path_factory.mktemp("spark-cluster")
    run = ClusterReport(workdir, journals, workdir / "cluster-report").start()
    yield run
    run.stop()
