"""The writer's batched in-place edits (writer.patch) leave a file exactly as one pwrite
per edit, in order, would: overlapping edits, repeated offsets, edits far apart, edits
past the end of the file, on real files."""
import os

from hypothesis import HealthCheck, given, settings, strategies as st

from mqksbridge.bridge.journal.files import Files
from mqksbridge.bridge.journal.writer import patch

edits_of = st.lists(st.tuples(st.integers(0, 3000), st.binary(min_size=1, max_size=12)),
                    min_size=1, max_size=40)


@given(st.binary(min_size=0, max_size=2500), edits_of, st.sampled_from([0, 8, 100, 1 << 16]))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_patch_equals_one_pwrite_per_edit(tmp_path, content, edits, gap):
    one, batched = tmp_path / "one", tmp_path / "batched"
    for path in (one, batched):
        path.write_bytes(content)
    fd = os.open(one, os.O_RDWR)
    try:
        for offset, data in edits:
            os.pwrite(fd, data, offset)
    finally:
        os.close(fd)
    fd = os.open(batched, os.O_RDWR)
    try:
        patch(Files(), fd, edits, gap)
    finally:
        os.close(fd)
    assert batched.read_bytes() == one.read_bytes()
