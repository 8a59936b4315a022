"""The columns of the `textqueue` data source (docs/pipeline.md has the table).

Spark's Python data source API has no column pruning (PySpark 4.x): a reader produces
every column of the schema it was given. So a query that needs a few columns declares
them, `spark.read.format("textqueue").schema(columns("queue", "status"))`, and only
those are decoded; without a schema every column is.
"""
from pyspark.sql.types import (
    ArrayType, BinaryType, BooleanType, IntegerType, LongType, MapType, StringType,
    StructField, StructType, TimestampType)

_STRING = StringType()
_TIME = TimestampType()

#: name -> (Spark type, what it holds)
COLUMNS = {
    "file": (_STRING, "absolute path of the file the record is in"),
    "offset": (LongType(), "byte offset of the record's control character in the file"),
    "queue": (_STRING, "the journal segment's queue (its header); null for a file that is no journal"),
    "status": (_STRING, "queued (-), done (=), error (!), comment (#), or the control character "
                        "itself when it is none of these"),
    "id": (_STRING, "message id"),
    "subject": (_STRING, "subject (MQKS event, Malamute subject, Twino Subject header)"),
    "origin": (_STRING, "the door it came in by: mqks, malamute, twino, textqueue"),
    "sender": (_STRING, "the publishing client, as its door names it"),
    "consumer": (_STRING, "the door of the consumer that settled it (acked, or rejected it "
                          "last before it was dead-lettered); null when not recorded"),
    "tracker": (_STRING, "Malamute tracker"),
    "priority": (BooleanType(), "high priority"),
    "created": (_TIME, "when it was published"),
    "expires": (_TIME, "when it expires; null: never"),
    "settled": (_TIME, "when it was settled; null while it is not"),
    "settle_reason": (_STRING, "acked, dead-lettered, expired, removed, moved; null while not settled"),
    "retry": (IntegerType(), "deliveries that were not acked (rejects, consumers that left)"),
    "headers": (MapType(_STRING, _STRING), "headers (Twino); null when it has none"),
    "frame_count": (IntegerType(), "number of frames (Malamute messages may have several)"),
    "size": (LongType(), "message bytes: all frames"),
    "body": (_STRING, "the body as stored: the text, or the base64 of a binary body "
                      "(bytes that are not UTF-8 read as U+FFFD)"),
    "body_bytes": (BinaryType(), "the message's bytes: the body decoded when it is base64, "
                                 "frames joined"),
    "frames": (ArrayType(BinaryType()), "the frames, each as bytes"),
    "variables": (MapType(_STRING, _STRING), "every variable of the record, name to value as "
                                             "written (the first of a name wins)"),
    "checksum": (_STRING, "ok, edited (vouched for by hand), missing or mismatch"),
}


def spark_schema(names=None) -> StructType:
    """The schema of `names` (every column by default), in the order given."""
    names = list(COLUMNS) if names is None else list(names)
    unknown = [n for n in names if n not in COLUMNS]
    if unknown:
        raise ValueError(f"textqueue has no column {unknown[0]!r}; columns: {', '.join(COLUMNS)}")
    return StructType([StructField(n, COLUMNS[n][0], True) for n in names])


def columns(*names) -> StructType:
    """The schema to declare for a read that needs only these columns."""
    return spark_schema(names)


def check(schema: StructType) -> list:
    """The column names of a schema a user declared; each must be one of ours, with
    our type."""
    names = []
    for field in schema.fields:
        if field.name not in COLUMNS:
            raise ValueError(f"textqueue has no column {field.name!r}; columns: {', '.join(COLUMNS)}")
        ours = COLUMNS[field.name][0]
        if field.dataType != ours:
            raise ValueError(f"textqueue column {field.name!r} is {ours.simpleString()}, "
                             f"not {field.dataType.simpleString()}")
        names.append(field.name)
    return names
