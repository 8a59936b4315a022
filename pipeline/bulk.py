"""The bulk column decoder the data pipeline builds its record batches with.

The decoder is the codec's (protocols/textqueue/arrow_columns.py, a named fast path of the
journal record defined in protocols/textqueue/record.py); the pipeline takes it from here.
"""
from mqksbridge.protocols.textqueue.arrow_columns import Fields, status_array

__all__ = ["Fields", "status_array"]
