import pytest
from twisted.logger import formatEvent, globalLogPublisher


@pytest.fixture
def logged():
    """The text of every log event while the test runs."""
    seen = []

    def observer(event):
        seen.append(formatEvent(event))
    globalLogPublisher.addObserver(observer)
    yield seen
    globalLogPublisher.removeObserver(observer)
