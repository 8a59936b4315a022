"""The reactor seen through the core's Clock interface."""


class ReactorClock:
    def __init__(self, reactor):
        self._reactor = reactor

    def now(self):
        return self._reactor.seconds()

    def call_later(self, delay, fn, *args):
        return self._reactor.callLater(delay, fn, *args)
