"""The Spark data source `textqueue`: TextQueue journals and files as a DataFrame.

    spark.dataSource.register(TextQueueDataSource)
    spark.read.format("textqueue").load("/var/lib/mqksbridge/journal")

Options: `path` (one path) or `paths` (a JSON list; either may be a file, a directory
read recursively, or a glob), `recursive` (default true), `pathGlobFilter` (a glob the
file names must match), `splitBytes` (the largest byte range a task reads, default
32 MiB), `minPartitions` (the cores that will read, default 1: the tasks come in whole
rounds of that many, equal in size, so no core idles in the last round; the jobs'
`read` sets it to Spark's default parallelism). Files are cut into byte ranges that
resynchronise on a record start (pipeline/files.py), small files share a task, and each
task yields Arrow record batches. With `pushFilters` true (default false), filters on
status, queue, file, offset and the created and settled times are pushed down (Spark
must have `spark.sql.python.filterPushdown.enabled=true`; the jobs' session sets it)
and applied exactly here: files whose queue is not wanted are not opened, rows whose
status or time is not wanted are not decoded. It is off by default because PySpark
keeps the read that filter pushdown planned on the DataFrame's data source (not on the
query) and reuses it for a later query on that DataFrame that pushes no filter, which
would then miss the rows the earlier query's filters dropped; the jobs turn it on for
their own DataFrames, whose every query pushes the same filters. Declare the
columns you need with `.schema(columns(...))`: the others are not decoded.
"""
import datetime
import json

from pyspark.sql.datasource import (
    DataSource, DataSourceReader, EqualTo, GreaterThan, GreaterThanOrEqual, In, InputPartition,
    LessThan, LessThanOrEqual, Not, StringStartsWith)
from pyspark.sql.pandas.types import to_arrow_schema

from mqksbridge.pipeline import files
from mqksbridge.pipeline import schema as columns
from mqksbridge.pipeline.batches import CONTROL_OF, STATUS_OF, Bounds, Selection, record_batch, select

NAME = "textqueue"
SPLIT_BYTES = 32 << 20


class Task(InputPartition):
    """The byte ranges one Spark task reads (one range of a big file, or small files)."""

    def __init__(self, ranges):
        super().__init__(None)
        self.ranges = ranges

    def __repr__(self):
        return f"Task({len(self.ranges)} ranges, {sum(r.end - r.start for r in self.ranges)} bytes)"


class TextQueueDataSource(DataSource):
    """`spark.read.format("textqueue")`: see the module docstring and docs/pipeline.md."""

    @classmethod
    def name(cls):
        return NAME

    def schema(self):
        return columns.spark_schema()

    def reader(self, schema):
        return TextQueueReader(self.options, schema)


def _paths(options):
    if options.get("paths"):
        paths = json.loads(options["paths"])
        if isinstance(paths, str):
            paths = [paths]
    elif options.get("path"):
        paths = [options["path"]]
    else:
        raise ValueError("textqueue needs a path: load(PATH) or .option('paths', JSON list)")
    return paths


def _flag(options, key, default):
    value = str(options.get(key, default)).lower()
    if value not in ("true", "false"):
        raise ValueError(f"textqueue option {key} is true or false, not {value!r}")
    return value == "true"


class TextQueueReader(DataSourceReader):
    def __init__(self, options, spark_schema):
        self.names = columns.check(spark_schema)
        self.spark_schema = spark_schema
        self.paths = _paths(options)
        self.recursive = _flag(options, "recursive", "true")
        self.name_glob = options.get("pathGlobFilter")
        self.split_bytes = int(options.get("splitBytes", SPLIT_BYTES))
        self.min_partitions = int(options.get("minPartitions", 1))
        self.push_filters = _flag(options, "pushFilters", "false")
        if self.split_bytes < 1 or self.min_partitions < 1:
            raise ValueError("textqueue options splitBytes and minPartitions must be positive")
        self.selection = Selection()
        self.queues = None           # None: any; else a predicate list, all must hold
        self.file_tests = []

    # -- filters ------------------------------------------------------------------------

    def pushFilters(self, filters):
        """Take what can be applied here when the `pushFilters` option is on; otherwise
        take nothing, so that the read Spark plans (and may reuse for another query on
        the same DataFrame) is the whole one and Spark applies every filter itself."""
        for f in filters:
            if not (self.push_filters and self._push(f)):
                yield f

    def _push(self, f):
        """Take a filter when it can be applied exactly here; True when taken."""
        inner = f.child if isinstance(f, Not) else f
        attribute = getattr(inner, "attribute", ())
        column = attribute[0] if len(attribute) == 1 else None
        if column == "status":
            values = _values_of(f)
            if values is None:
                return False
            controls = frozenset(_control(v) for v in values)
            if isinstance(f, Not):
                controls = _NotSet(controls)
            sel = self.selection
            sel.controls = controls if sel.controls is None else _intersect(sel.controls, controls)
            return True
        if column in ("queue", "file"):
            test = _string_test(f)
            if test is None:
                return False
            if column == "queue":
                self.queues = (self.queues or []) + [test]
            else:
                self.file_tests.append(test)
            return True
        if column in ("created", "settled", "offset") and inner is f:
            bound = _bound(f, column == "offset")
            if bound is None:
                return False
            target = getattr(self.selection, "offsets" if column == "offset" else column)
            _narrow(target, *bound)
            return True
        return False

    # -- planning -----------------------------------------------------------------------

    def partitions(self):
        found = files.expand(self.paths, self.recursive, self.name_glob)
        found = [f for f in found if all(test(f) for test in self.file_tests)]
        split = files.balanced_split(found, self.split_bytes, self.min_partitions)
        ranges = files.plan(found, split)
        tasks, small, small_bytes = [], [], 0
        for r in ranges:
            if r.size >= split:
                tasks.append(Task([r]))
                continue
            small.append(r)
            small_bytes += r.size
            if small_bytes >= split:
                tasks.append(Task(small))
                small, small_bytes = [], 0
        if small:
            tasks.append(Task(small))
        return tasks or [Task([])]

    # -- reading ------------------------------------------------------------------------

    def read(self, task):
        arrow_schema = to_arrow_schema(self.spark_schema, timezone="UTC")
        for r in task.ranges:
            header = files.read_header(r.path)
            if self.queues is not None and not all(test(header.queue) for test in self.queues):
                continue
            for block in files.read_range(r, header):
                block = select(block, self.selection, header.base_ms)
                if len(block):
                    yield record_batch(self.names, arrow_schema, r.path, header.queue,
                                       header.base_ms, block)


def _control(status):
    """The control character of a status value; a known control character itself is
    no status value (the column shows its name), so it matches nothing."""
    if status in CONTROL_OF:
        return CONTROL_OF[status]
    return "" if status in STATUS_OF else status


class _NotSet(frozenset):
    """Every control character but these."""

    def __contains__(self, item):
        return not frozenset.__contains__(self, item)


def _intersect(a, b):
    if isinstance(a, _NotSet) and isinstance(b, _NotSet):
        return _NotSet(frozenset(a) | frozenset(b))
    if isinstance(a, _NotSet):
        a, b = b, a
    return frozenset(c for c in a if c in b)


def _values_of(f):
    """The values an EqualTo / In (or their Not) on a string column allows."""
    inner = f.child if isinstance(f, Not) else f
    if isinstance(inner, EqualTo) and isinstance(inner.value, str):
        return [inner.value]
    if isinstance(inner, In) and all(isinstance(v, str) for v in inner.value):
        return list(inner.value)
    return None


def _string_test(f):
    """A predicate on a string value (None never matches, as in SQL) for EqualTo, In,
    StringStartsWith and their Not."""
    negate = isinstance(f, Not)
    inner = f.child if negate else f
    if isinstance(inner, StringStartsWith) and isinstance(inner.value, str):
        prefix = inner.value
        test = lambda v: v.startswith(prefix)  # noqa: E731
    else:
        values = _values_of(inner)
        if values is None:
            return None
        wanted = frozenset(values)
        test = wanted.__contains__
    if negate:
        return lambda v: v is not None and not test(v)
    return lambda v: v is not None and test(v)


def _millis(value):
    """A timestamp literal as milliseconds since the epoch (float: sub-ms kept)."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return delta // datetime.timedelta(microseconds=1) / 1000
    return None


def _bound(f, integer):
    """(op, value) for a comparison of a time (or offset) column with a literal."""
    ops = {GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<=",
           EqualTo: "="}
    op = ops.get(type(f))
    if op is None:
        return None
    if integer:
        value = f.value if isinstance(f.value, int) and not isinstance(f.value, bool) else None
    else:
        value = _millis(f.value)
    return None if value is None else (op, value)


def _narrow(bounds: Bounds, op, value):
    if op in (">", ">=", "="):
        open_ = op == ">"
        if bounds.low is None or value > bounds.low or (value == bounds.low and open_):
            bounds.low, bounds.low_open = value, open_
    if op in ("<", "<=", "="):
        open_ = op == "<"
        if bounds.high is None or value < bounds.high or (value == bounds.high and open_):
            bounds.high, bounds.high_open = value, open_
