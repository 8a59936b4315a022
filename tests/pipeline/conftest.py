"""One real Spark session (local[2]) for every pipeline test of a pytest run.

A session takes 10-20 s to start, so it is shared (scope "session"); its Python
workers run this venv's Python (PYSPARK_PYTHON, set by session.spark_session), which
has mqksbridge installed, so the data source is importable by the workers.
"""
import pytest

from mqksbridge.pipeline.session import spark_session


@pytest.fixture(scope="session")
def spark():
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "4",
                                         "spark.ui.enabled": "false"})
    yield session
    session.stop()
