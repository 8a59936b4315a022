"""Names as the Twino server reads them: channel names, list filters, direct targets."""
import pytest
from hypothesis import given, strategies as st

from mqksbridge.protocols.twino.names import name_matches, target_of, valid_name


@pytest.mark.parametrize("name, ok", [
    ("jobs", True), ("a/b.c-d", True), ("é" * 127, True), ("é" * 128, False), ("x" * 255, True),
    ("", False), ("a b", False), ("a@b", False), ("a;b", False), ("a*", False)])
def test_valid_channel_names(name, ok):
    assert valid_name(name) is ok


@pytest.mark.parametrize("pattern, value, ok", [
    ("", "anything", True), (None, None, True), ("*ob*", "jobs", True), ("*ob*", "ob", True),
    ("*bs", "jobs", True), ("jo*", "jobs", True), ("jo*", "ajobs", False),
    ("jobs", "jobs", True), ("jobs", "jobs2", False), ("*", "", True), ("**", "x", True),
    ("x*", None, False)])
def test_list_filters(pattern, value, ok):
    assert name_matches(pattern, value) is ok


@given(st.text(max_size=10))
def test_a_filter_without_stars_is_equality(value):
    assert name_matches(value.replace("*", "") or "x", value) is (
        (value.replace("*", "") or "x") == value)


def test_direct_targets():
    assert target_of("@name:worker") == ("name", "worker")
    assert target_of("@type:svc") == ("type", "svc")
    assert target_of("client-1") == ("id", "client-1")
    assert target_of("@other:x") == ("id", "@other:x")
