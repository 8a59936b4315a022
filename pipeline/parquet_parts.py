"""Parquet partitioned by day and queue, written by the Python tasks themselves and
committed by the driver, in the layout Spark's own writer makes.

Each task groups its rows by day (UTC, of `created`) and queue and writes one file per
group, `day=D/queue=Q/part-NNNNN-JOB.c000.snappy.parquet`, into its own staging
directory `OUT/_temporary/JOB/TASK-ATTEMPT/` (a retried attempt never mixes with a
failed one), and returns the files it wrote. When every task is done, the driver
applies the write mode, moves the files of the attempts that succeeded into place and
writes `_SUCCESS`; a job that fails leaves nothing behind but what `OUT` held before.

What Spark's writer does, this does: partition values escaped as Spark escapes them
(`audit/1` is `audit%2F1`), null or empty as `__HIVE_DEFAULT_PARTITION__`, days
formatted as Spark's `to_date` prints them; snappy; timestamps as INT96 (Spark's
default, so pyarrow reads both alike) with Spark's schema and version in the file
metadata. tests/pipeline/test_export_parts.py holds the output equal to Spark's.
"""
import json
import os
import shutil
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
TEMPORARY = "_temporary"
MODES = ("errorifexists", "error", "overwrite", "append", "ignore")
FLUSH_BYTES = 64 << 20          # a row group at most about this big, per partition
# Columns of few distinct values get dictionaries; trying one on ids and bodies (unique)
# costs more CPU than the whole rest of the write and ends in plain pages anyway.
DICTIONARY = ("file", "status", "subject", "origin", "sender", "consumer", "priority",
              "settle_reason", "retry", "frame_count", "checksum")
_DAY_US = 86_400_000_000
# The characters Spark's ExternalCatalogUtils.escapePathName escapes (on Unix).
_ESCAPED = frozenset(map(chr, range(1, 32))) | frozenset("\"#%'*/:=?\\\x7f{[]^")


def escape(value: str) -> str:
    """A partition value as Spark writes it in a path."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def day_text(days: int) -> str:
    """Days since 1970-01-01 as Spark prints a date: yyyy-MM-dd, proleptic Gregorian,
    `+` before a year past 9999 and `-` before one before year 0."""
    z = days + 719468                           # civil_from_days (H. Hinnant)
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    sign = "+" if year > 9999 else "-" if year < 0 else ""
    return f"{sign}{abs(year):04d}-{month:02d}-{day:02d}"


def partition_path(day, queue) -> str:
    """`day=D/queue=Q` of a day (days since the epoch, None: null) and a queue."""
    d = DEFAULT_PARTITION if day is None else day_text(day)
    q = DEFAULT_PARTITION if not queue else escape(queue)
    return f"day={d}/queue={q}"


class Job:
    """One export's output: where it goes, its mode, and its staging directory."""

    def __init__(self, out, mode, spark_schema, spark_version):
        if mode not in MODES:
            raise ValueError(f"write mode is one of {', '.join(MODES)}, not {mode!r}")
        self.out = os.path.abspath(out)
        self.mode = mode
        self.id = str(uuid.uuid4())
        self.staging = os.path.join(self.out, TEMPORARY, self.id)
        self.existed = True
        self.metadata = {"org.apache.spark.version": spark_version,
                         "org.apache.spark.sql.parquet.row.metadata": spark_schema.json()}

    def skip(self) -> bool:
        """True when nothing is to be written (mode ignore, OUT there); raises
        FileExistsError in mode error when OUT is there."""
        exists = self.existed = os.path.exists(self.out)
        if exists and self.mode in ("errorifexists", "error"):
            raise FileExistsError(f"{self.out} exists (give --overwrite to replace it)")
        return exists and self.mode == "ignore"

    def writer(self, partition_id, attempt):
        return TaskWriter(self, os.path.join(self.staging, f"{partition_id}-{attempt}"),
                          f"part-{partition_id:05d}-{self.id}.c000.snappy.parquet")

    def commit(self, written):
        """Move the files of `written` ((staged path, rows), from the tasks that
        succeeded) into place by the mode, write `_SUCCESS`; returns the rows."""
        os.makedirs(self.out, exist_ok=True)
        if self.mode == "overwrite":
            for name in os.listdir(self.out):
                if name != TEMPORARY:
                    path = os.path.join(self.out, name)
                    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        for staged, _ in written:
            relative = os.path.relpath(staged, self.staging).split(os.sep, 1)[1]  # no TASK-ATTEMPT
            final = os.path.join(self.out, relative)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(staged, final)
        self.clean(failed=False)
        open(os.path.join(self.out, "_SUCCESS"), "wb").close()
        return sum(rows for _, rows in written)

    def clean(self, failed=True):
        """Remove the staging directory, `_temporary` when no other job uses it, and
        `OUT` when this job made it and left it empty because it failed (a job that
        succeeded with no rows keeps it, holding `_SUCCESS`, as Spark's writer does)."""
        shutil.rmtree(self.staging, ignore_errors=True)
        made = failed and not self.existed
        for folder in [os.path.dirname(self.staging)] + ([self.out] if made else []):
            try:
                os.rmdir(folder)
            except OSError:
                pass


class TaskWriter:
    """The files of one task: record batches in, grouped by day and queue; `close`
    returns [(path, rows)] of the files written."""

    def __init__(self, job, folder, name):
        self.job, self.folder, self.name = job, folder, name
        self.pending = {}           # partition path -> [tables], bytes
        self.writers = {}
        self.rows = {}

    def add(self, batch):
        """Rows of `batch` (a table or record batch with `created` and `queue`)."""
        if not batch.num_rows:
            return
        micros = pc.cast(batch["created"], pa.int64()).to_numpy(zero_copy_only=False)
        valid = pc.is_valid(batch["created"]).to_numpy(zero_copy_only=False)
        days = np.where(valid, np.floor_divide(np.where(valid, micros, 0), _DAY_US), 0)
        queues = pc.dictionary_encode(batch["queue"])
        if isinstance(queues, pa.ChunkedArray):
            queues = queues.combine_chunks()
        names = queues.dictionary.to_pylist() + [None]
        codes = pc.fill_null(queues.indices, len(names) - 1).to_numpy(zero_copy_only=False)
        day_codes = np.where(valid, days - days.min(initial=0) + 1, 0)
        keys = day_codes.astype(np.int64) * len(names) + codes
        data = pa.table(batch).drop_columns(["queue"])
        if (keys == keys[0]).all():
            self._put(days[0] if valid[0] else None, names[codes[0]], data)
            return
        order = np.argsort(keys, kind="stable")
        runs = np.flatnonzero(np.diff(keys[order])) + 1
        for rows in np.split(order, runs):
            first = rows[0]
            self._put(days[first] if valid[first] else None, names[codes[first]], data.take(rows))

    def _put(self, day, queue, table):
        key = partition_path(None if day is None else int(day), queue)
        tables, size = self.pending.get(key, ([], 0))
        tables.append(table)
        size += table.nbytes
        self.pending[key] = (tables, size)
        self.rows[key] = self.rows.get(key, 0) + table.num_rows
        if size >= FLUSH_BYTES:
            self._flush(key)

    def _flush(self, key):
        tables, _ = self.pending.pop(key)
        table = pa.concat_tables(tables)
        writer = self.writers.get(key)
        if writer is None:
            path = os.path.join(self.folder, key, self.name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            schema = table.schema.with_metadata(self.job.metadata)
            writer = self.writers[key] = pq.ParquetWriter(
                path, schema, compression="snappy", use_deprecated_int96_timestamps=True,
                use_dictionary=[c for c in schema.names if c in DICTIONARY])
        writer.write_table(table.replace_schema_metadata(self.job.metadata),
                           row_group_size=table.num_rows)

    def close(self):
        for key in list(self.pending):
            self._flush(key)
        for writer in self.writers.values():
            writer.close()
        return [(os.path.join(self.folder, key, self.name), self.rows[key]) for key in self.writers]


def write_task(job, batches):
    """Write a task's record batches (of the export's columns); yields (path, rows)
    of each file written. Runs in the Python worker of a Spark task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    writer = job.writer(context.partitionId(), context.attemptNumber())
    for batch in batches:
        writer.add(batch)
    yield from writer.close()
