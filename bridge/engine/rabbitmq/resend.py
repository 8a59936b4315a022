"""Publishes RabbitMQ nacked, sent again a few times before they count as refused.

A quorum queue nacks a publish it never took when it cannot take one yet: the queue
another gateway is still creating (RabbitMQ answers a second declare of a quorum queue
as soon as the queue is named, before its replicas run), or one electing a leader after
a node came back. A full queue that rejects publishes nacks too, and nothing in the nack
tells the two apart: so a nacked publish to one queue goes out again after DELAYS (a
queue that was starting takes it; one that stays full refuses it for good, that much
later). Only a publish that reached one queue is sent again: a nacked publish to an
exchange may have reached its other queues, and a second copy would duplicate it there.

One timer per wave (the publishes nacked for the n-th time within DELAYS[n]), not one per
publish: a full queue under a flood nacks thousands."""

DELAYS = (0.05, 0.1, 0.2, 0.4)   # seconds before each resend: refused 0.75 s after the first


class Resends:
    """`send(number, publish)` sends one again; `take` keeps a nacked one for its next
    wave (False once it was nacked len(delays) + 1 times: refused)."""

    def __init__(self, reactor, send, delays=DELAYS):
        self.reactor, self.send, self.delays = reactor, send, delays
        self.tries = {}                 # number -> resends made or waiting
        self.waves = [None] * len(delays)   # per try: (DelayedCall, [(number, publish)])
        self.resent = 0                 # publishes sent again (/metrics)

    def take(self, number, publish):
        tries = self.tries.get(number, 0)
        if tries == len(self.delays):
            del self.tries[number]
            return False
        self.tries[number] = tries + 1
        wave = self.waves[tries]
        if wave is None:
            wave = self.waves[tries] = (
                self.reactor.callLater(self.delays[tries], self._due, tries), [])
        wave[1].append((number, publish))
        return True

    def answered(self, number):
        """RabbitMQ's verdict on it is in: forgotten."""
        self.tries.pop(number, None)

    def _due(self, tries):
        _, due = self.waves[tries]
        self.waves[tries] = None
        self.resent += len(due)
        for number, publish in due:
            self.send(number, publish)

    def stop(self):
        """The engine stops: no timer is left behind (what waited is not sent)."""
        for i, wave in enumerate(self.waves):
            if wave is not None and wave[0].active():
                wave[0].cancel()
            self.waves[i] = None
