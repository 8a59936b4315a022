"""Whether a connection is read: one set of reasons per connection.

Several parts of the broker stop reading a connection for reasons of their own: publisher
flow control (core.flow holds a publisher whose queue is congested), the connection's own
output past its high-water mark (bridge.outbox: a client that sends requests and never
reads their replies), the memory watermark (bridge.memory) and the ordered shutdown. Each
holds the connection's Input with its reason and releases that reason only; the transport
is paused when the first reason arrives and resumed when the last one goes, so one part
letting go never resumes a pause another part still needs.

A door may stop in the middle of what one read brought (a chunk full of requests whose
replies are large): it keeps the rest and gives `resumed` a function that carries on with
it. That runs when the last reason goes, before the transport is read again.
"""
FLOW, OUTPUT, MEMORY, SHUTDOWN = "flow", "output", "memory", "shutdown"


class Input:
    """A connection's input (its transport, an IPushProducer) and why it is paused."""

    __slots__ = ("transport", "reasons", "resumed")

    def __init__(self, transport, resumed=None):
        self.transport = transport
        self.reasons = set()
        self.resumed = resumed             # () -> None: carry on with what was kept

    @property
    def paused(self):
        return bool(self.reasons)

    def hold(self, reason):
        if not self.reasons:
            self.transport.pauseProducing()
        self.reasons.add(reason)

    def release(self, reason):
        reasons = self.reasons
        if reason not in reasons:
            return
        reasons.discard(reason)
        if reasons:
            return
        if self.resumed is not None:
            self.resumed()                 # may hold again (more large replies)
        if not reasons:
            self.transport.resumeProducing()

    def forget(self):
        """The connection is gone: drop `resumed`, a method of the connection, which holds
        this Input (a cycle that only the rare full collection would free)."""
        self.resumed = None

    # core.flow's interface (client.input): its holds are one reason among the others.
    def pauseProducing(self):
        self.hold(FLOW)

    def resumeProducing(self):
        self.release(FLOW)

    def __repr__(self):
        return f"Input(paused for {sorted(self.reasons)})"
