"""A TextQueue door on a running broker (the `server` fixture), stepped by the test.

The door is made by its `build`, its clock a task.Clock of its own. Watching by polling
(the default here), its reactor turns are that clock's `callLater(0)` calls and its outbox
appends go through a FlushScheduler on it too, so a test says exactly when the door looks
at its files (`poll()`), when its steps run (`step()`) and how much time passes (the grace
time). Watching with inotify, its turns are the real reactor's. The rest of the broker (the
other doors, their sockets) runs in the real reactor as usual.
"""
import os

from twisted.internet import reactor, task
from twisted.logger import globalLogPublisher

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.outbox import FlushScheduler
from mqksbridge.bridge.textqueue import build
from mqksbridge.protocols.textqueue import scan


class Spool:
    def __init__(self, server, directory, **settings):
        self.server = server
        self.directory = directory
        self.inbox = directory / "inbox"
        self.clock = task.Clock()
        self.clock.advance(1_700_000_000)            # a plausible epoch for created times
        overrides = {"inbox": [str(self.inbox)], "watch": "poll", "poll_interval": 0.5, "grace": 0,
                     **settings}
        config = configuration.load(overrides={"textqueue": overrides})
        self.settings = config["textqueue"]
        turns = self.clock if self.settings["watch"] == "poll" else reactor
        self.scheduler = FlushScheduler(turns)
        self.door, self.services = build(config, server.broker, self.scheduler, turns,
                                         self.clock)
        for service in self.services:
            service.startService()
        self.step()

    def step(self, limit=100_000):
        """Run the door's work until it has none for this instant."""
        for _ in range(limit):
            if not self.clock.getDelayedCalls() or all(
                    c.getTime() > self.clock.seconds() for c in self.clock.getDelayedCalls()):
                return
            self.clock.advance(0)
        raise AssertionError("the door never went idle")

    def poll(self, times=1):
        """Let one poll interval pass, `times` times, and the work it starts run."""
        for _ in range(times):
            self.clock.advance(self.door.poll_interval)
            self.step()

    def advance(self, seconds):
        """Time passes in poll intervals (the door looks at its files at each)."""
        whole, rest = divmod(seconds, self.door.poll_interval)
        self.poll(int(whole))
        if rest:
            self.clock.advance(rest)
            self.step()

    def stop(self):
        """The door goes as on a shutdown: stop, then each file's goodbye."""
        for service in reversed(self.services):
            if service.running:
                service.stopService()
        for file in self.door.files():
            file.goodbye()
        self.step()

    def path(self, name):
        return self.inbox / name

    def write(self, name, data):
        """Append to an inbox file, as `printf >>` does (open, write, close)."""
        os.makedirs(self.inbox, exist_ok=True)
        with open(self.path(name), "ab") as f:
            f.write(data if isinstance(data, bytes) else data.encode())


def records(path):
    """Every record of a file, its last one taken as whole."""
    data = open(path, "rb").read()
    found = scan(data)
    out = list(found.records())
    if found.incomplete is not None:
        out.append(found.incomplete.record())
    return out


def controls(path):
    return "".join(r.control for r in records(path))


class LogCapture:
    """The door's log events while a test runs."""

    def __init__(self):
        self.events = []
        globalLogPublisher.addObserver(self)

    def __call__(self, event):
        if event.get("log_namespace", "").startswith("mqksbridge.textqueue"):
            self.events.append(event)

    def texts(self):
        from twisted.logger import formatEvent
        return [formatEvent(e) for e in self.events]

    def close(self):
        globalLogPublisher.removeObserver(self)
