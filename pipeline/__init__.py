"""The data pipeline: the broker's TextQueue journals read, reported on, replayed and
exported with PySpark (docs/pipeline.md).

- `source`: the Spark data source `textqueue` (byte ranges, Arrow batches, pushdown).
- `session`: a SparkSession with the source registered; `read` a DataFrame of journals.
- `cli`: the console script `mqksbridge-pipeline` (report, replay, export, compact).

Needs the `pipeline` extra (pyspark, pyarrow, matplotlib, tqdm, pandas); the broker
never imports this package.
"""
