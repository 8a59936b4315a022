"""Address lists for the blocking clients: connect to the first live address, and when
the connection is lost move on to the next one, with bounded retries.

Several gateways serve one fleet (docs/clients.md, "Failover"): a client given their
addresses must carry on when the gateway it talks to dies. The three clients share this
piece; each brings its own `attempt(address)`, which connects, logs in and re-establishes
the client's session (consumers, registrations, subscriptions), raising OSError (refused,
reset, timed out) when that address cannot serve.
"""
import logging
import time

log = logging.getLogger("mqksbridge.clients")

ROUNDS = 3              # passes over the list before giving up
BACKOFF = 0.1           # seconds before the second pass, doubled before each next one
MAX_BACKOFF = 1.0


class AllAddressesDown(ConnectionError):
    """No address could serve after the bounded passes; the message names each and why."""


def describe(address):
    """`HOST:PORT` for a (host, port) pair, the text itself for an endpoint."""
    if isinstance(address, tuple):
        return "%s:%s" % address
    return str(address)


class Failover:
    """Which address of the list a client is on, and how it moves to the next live one.

    `connect(attempt)` tries the addresses in order, starting after the current one (the
    first at the start), for at most `rounds` passes with a doubling pause between passes;
    every try is bounded by the client's own timeout, so the whole is bounded.
    When the client moves, `on_failover(old, new)` is called, or without one a warning
    is logged (logger `mqksbridge.clients`).
    """

    def __init__(self, addresses, *, rounds=ROUNDS, backoff=BACKOFF, on_failover=None):
        self.addresses = list(addresses)
        if not self.addresses:
            raise ValueError("an address list needs at least one address")
        self.rounds, self.backoff = rounds, backoff
        self.on_failover = on_failover
        self.index = None           # the address in use; None before the first connect
        self.moves = 0              # failovers so far

    @property
    def current(self):
        return None if self.index is None else self.addresses[self.index]

    def connect(self, attempt):
        """`attempt(address)` on each address in turn until one returns; its result."""
        start = 0 if self.index is None else self.index + 1
        count = len(self.addresses)
        failures = {}
        pause = self.backoff
        for done in range(self.rounds):
            if done:
                time.sleep(pause)
                pause = min(pause * 2, MAX_BACKOFF)
            for step in range(count):
                index = (start + step) % count
                address = self.addresses[index]
                try:
                    result = attempt(address)
                except OSError as exc:
                    failures[describe(address)] = exc
                    continue
                self._moved_to(index)
                return result
        raise AllAddressesDown("no address answered after %d passes: %s" % (
            self.rounds, "; ".join("%s: %s" % item for item in failures.items())))

    def _moved_to(self, index):
        previous, self.index = self.index, index
        if previous is None:
            return
        self.moves += 1
        old, new = self.addresses[previous], self.addresses[index]
        if self.on_failover is None:
            log.warning("connection to %s lost; moved to %s", describe(old), describe(new))
        else:
            self.on_failover(old, new)

    def retrying(self, reconnect, operation, *args):
        """`operation(*args)`; after a lost connection (OSError other than a timeout: a
        late answer is the caller's to judge), `reconnect()` and `operation(*args)` again,
        as long as reconnecting succeeds, at most once per address and pass."""
        for _ in range(self.rounds * len(self.addresses)):
            try:
                return operation(*args)
            except TimeoutError:
                raise
            except OSError:
                reconnect()
        return operation(*args)
