"""The bulk column decoder the data pipeline builds its record batches with.

The decoder is the codec's (protocols/textqueue/arrow_columns.py: one definition of the
journal record, its fast paths beside it); the pipeline takes it from here.
"""
from mqksbridge.protocols.textqueue.arrow_columns import Fields, status_array

__all__ = ["Fields", "status_array"]
