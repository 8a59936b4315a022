"""One connected session of any door."""


class Client:
    """Who is connected: id, name, type, door and peer address.

    `paused` is the door's backpressure flag (transport over its high-water mark); when
    it clears, resume() lets every queue and mailbox this client consumes catch up.
    `input` is what the door reads this client's bytes from (pauseProducing and
    resumeProducing), for publisher flow control (core.flow); `held` the queues holding it.
    `principal` is who it acts as (core.permissions); None: anyone may do anything (no
    users configured).
    """

    __slots__ = ("id", "name", "type", "door", "address", "consumers", "paused",
                 "connected_at", "mailbox", "streams", "attrs", "input", "held", "principal")

    def __init__(self, id, door, name="", type="", address="", connected_at=0.0,
                 principal=None):
        self.id = id
        self.name = name
        self.type = type
        self.door = door
        self.address = address
        self.consumers = {}       # consumer id -> Consumer
        self.paused = False
        self.connected_at = connected_at
        self.mailbox = None       # the Mailbox this client owns, if any
        self.streams = set()      # names of streams it reads
        self.attrs = {}           # door-private data
        self.input = None         # set by doors whose input can be paused
        self.held = set()
        self.principal = principal

    def pause(self):
        self.paused = True

    def resume(self):
        if not self.paused:
            return
        self.paused = False
        for consumer in list(self.consumers.values()):
            if consumer.queue is not None:
                consumer.queue.dispatch()
        if self.mailbox is not None:
            self.mailbox.flush()

    def __repr__(self):
        return f"Client({self.id!r}, door={self.door!r})"
