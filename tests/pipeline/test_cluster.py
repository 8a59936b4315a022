"""The pipeline on a real Spark cluster, not local mode: a standalone master and a worker
started from the pyspark installation's own `spark-class`, bound to loopback on free ports;
`mqksbridge-pipeline report --master spark://127.0.0.1:PORT` runs there (a separate driver
process, an executor the worker launches) and writes the same tables as local[*].

The cluster and its report run in the background from the start of the pipeline tests
(tests/pipeline/cluster.py, conftest.py); this test runs last of them and checks the
outcome."""
import os
import re

import pandas
import pytest

from mqksbridge.pipeline import report

WAIT = 540          # run alone, the test waits for the whole cluster run


def _sorted_rows(frame):
    frame = frame.astype(object).where(frame.notna(), None)
    columns = sorted(frame.columns)
    return sorted((tuple(row[c] for c in columns) for row in frame.to_dict("records")), key=repr)


@pytest.mark.timeout(WAIT + 60)
def test_report_on_a_standalone_cluster_equals_local(cluster_report, local_report):
    try:
        run = cluster_report.result(WAIT)
        master_log = cluster_report.master.log()
    finally:
        cluster_report.stop()
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]
    assert "report: 3" in run.stdout
    assert re.search(r"Launching executor app-\S+/\d+ on worker", master_log), master_log[-2000:]
    local = local_report[1]
    out = cluster_report.out
    for name in report.TABLES:
        remote = pandas.read_parquet(f"{out}/tables/{name}.parquet")
        assert len(remote) == len(local[name]) > 0, name
        assert _sorted_rows(remote) == _sorted_rows(local[name]), name
    assert os.path.getsize(f"{out}/report.html") > 10_000
