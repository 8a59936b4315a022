"""The TextQueue door: spool directories for programs that hold no socket open.

Inbox directories (`textqueue.inbox`): every `*.tq` file is a stream of publishes
(bridge.textqueue.inbox). Outbox files (`[textqueue.outbox]`, queue = file) and outbox
directories (`textqueue.outbox_dirs`, where a worker's `NAME.tq` asks for queue NAME): the
broker consumes the queue into the file and takes the worker's marks as acks and rejects
(bridge.textqueue.outbox). specs/textqueue.md section 7 has the conventions, docs/guide.md
a shell example.

All file work runs in small steps on the reactor: a file with something to do is marked
dirty (by inotify, by the poll, by the storage barrier) and one step of each dirty file
runs per reactor turn, so a large file never holds the reactor for more than a chunk.
Time (the poll, a `bridge.clock.periodic` service; the grace time; settled files) is the
injected `clock`.
"""
import os

from twisted.application import service
from twisted.logger import Logger

from mqksbridge.bridge.clock import periodic
from mqksbridge.bridge.security.users import UsersError
from mqksbridge.bridge.textqueue import targets
from mqksbridge.bridge.textqueue.inbox import InboxDir
from mqksbridge.bridge.textqueue.outbox import OutboxDir, OutboxFile
from mqksbridge.bridge.textqueue.watch import Watcher
from mqksbridge.bridge.traffic import DoorTraffic

DOOR = "textqueue"
log = Logger(namespace="mqksbridge.textqueue")


class TextQueueDoor(service.Service):
    """The door: its directories and files, one step per dirty file per reactor turn
    (`reactor`: callLater(0), and inotify), a poll on `clock`."""
    principal = None                 # who its files act as (build; core.permissions)

    def __init__(self, broker, scheduler, reactor, settings, clock=None):
        self.broker = broker
        self.scheduler = scheduler
        self.reactor = reactor
        self.clock = reactor if clock is None else clock
        self.traffic = DoorTraffic(DOOR, self.clock.seconds)
        self.publisher = targets.Publisher(broker, settings["auto_create"])
        self.watch_mode = settings["watch"]
        self.poll_interval = float(settings["poll_interval"])
        self.grace = float(settings["grace"])
        self.max_record = int(settings["max_record"])
        self.settled_policy = settings["settled"]
        self.settled_after = float(settings["settled_after"])
        self.credit = int(settings["credit"])
        self.error_width = int(settings["error_width"])
        self.rotate_size = int(settings["rotate_size"])
        self.retain = int(settings["retain"])
        self.match_window = int(settings["match_window"])
        self.inboxes = {os.path.abspath(d): None for d in settings["inbox"]}
        self.outbox_dirs = {os.path.abspath(d): None for d in settings["outbox_dirs"]}
        self.outbox_files = {os.path.abspath(path): queue
                             for queue, path in settings["outbox"].items()}
        self.outboxes = {}               # path -> OutboxFile (configured ones)
        self._failed = {}                # path -> why it could not be opened (logged once)
        self.watcher = None
        self._dirty = {}                 # file -> None: one step each next turn
        self._call = None

    # -- life -----------------------------------------------------------------------------
    def startService(self):
        super().startService()
        self.watcher = Watcher(self.reactor, self.watch_mode, self.changed)
        for directory in self.inboxes:
            os.makedirs(directory, exist_ok=True)
            self.inboxes[directory] = InboxDir(self, directory)
            self.watcher.watch(directory)
        for directory in self.outbox_dirs:
            os.makedirs(directory, exist_ok=True)
            self.outbox_dirs[directory] = OutboxDir(self, directory)
            self.watcher.watch(directory)
        for path, queue in self.outbox_files.items():
            self._outbox(path, queue)
            self.watcher.watch(os.path.dirname(path))
        if self.inboxes or self.outbox_dirs or self.outbox_files:
            log.info("textqueue: {inboxes} inbox and {outboxes} outbox directories, "
                     "{files} outbox files ({mode})", inboxes=len(self.inboxes),
                     outboxes=len(self.outbox_dirs), files=len(self.outbox_files),
                     mode=self.watcher.mode)

    @property
    def configured(self):
        return bool(self.inboxes or self.outbox_dirs or self.outbox_files)

    def stopService(self):
        """Watching stops (the poll is a service of its own); the files stay open until
        the shutdown's goodbyes (bridge.shutdown), so flips released meanwhile are still
        written."""
        super().stopService()
        if self.watcher is not None:
            self.watcher.stop()
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    # -- work ---------------------------------------------------------------------------------
    def dirty(self, file):
        """`file` has something to do: its `work()` runs next turn."""
        self._dirty[file] = None
        if self._call is None and self.running:
            self._call = self.reactor.callLater(0, self._work)

    def _work(self):
        self._call = None
        files, self._dirty = list(self._dirty), {}
        for file in files:
            try:
                more = file.work()
            except Exception:
                log.failure("textqueue: {file} failed", file=getattr(file, "path", file))
                more = False
            if more:
                self._dirty[file] = None
        if self._dirty and self._call is None and self.running:
            self._call = self.reactor.callLater(0, self._work)

    def idle(self):
        """Nothing left to do this turn (tests step the clock until then)."""
        return not self._dirty

    def poll(self):
        """Every poll interval: new files, changes inotify did not report, the rules that
        depend on time."""
        if not self.running:
            return
        now = self.clock.seconds()
        for directory in list(self.inboxes.values()) + list(self.outbox_dirs.values()):
            try:
                directory.scan(now)
            except Exception:
                log.failure("textqueue: polling {dir} failed", dir=directory.path)
        for path, file in list(self.outboxes.items()):
            if file.state == "gone":         # could not be opened, or closed by the admin
                file = self._outbox(path, file.queue)
                self.watcher.watch(os.path.dirname(path))
            try:
                file.poll(now)
            except Exception:
                log.failure("textqueue: polling {file} failed", file=path)

    def _outbox(self, path, queue):
        """A configured outbox file, opened (made if missing); one that cannot be is
        logged and tried again at the next poll."""
        file = self.outboxes[path] = OutboxFile(self, queue, path)
        try:
            file.open()
        except OSError as exc:
            if self._failed.get(path) != str(exc):
                self._failed[path] = str(exc)
                log.error("textqueue: cannot open outbox {file}: {reason}", file=path,
                          reason=exc)
            file.goodbye()
            return file
        self._failed.pop(path, None)
        self.dirty(file)
        return file

    def changed(self, path, closed):
        """inotify: `path` (in a watched directory) changed; `closed`: a writer closed it."""
        directory, name = os.path.split(path)
        inbox = self.inboxes.get(directory)
        if inbox is not None:
            return inbox.changed(name, closed)
        outbox = self.outbox_dirs.get(directory)
        if outbox is not None:
            return outbox.changed(name, closed)
        file = self.outboxes.get(path)
        if file is not None:
            file.changed(closed)

    # -- the admin and tests -----------------------------------------------------------------
    def files(self):
        """Every file the door has open: inbox files, then outbox files."""
        found = [f for d in self.inboxes.values() if d for f in d.files.values()]
        found += [f for d in self.outbox_dirs.values() if d for f in d.files.values()]
        return found + list(self.outboxes.values())

    def file(self, path):
        path = os.path.abspath(path)
        for file in self.files():
            if file.path == path:
                return file
        return None


def build(config, broker, scheduler, reactor, clock=None, security=None):
    """The TextQueue door (a service: it has no listener) and, when it has directories or
    files, its poll. With users, its files act as `textqueue.user` (none: the operator's
    files are trusted, docs/security.md)."""
    settings = config["textqueue"]
    door = TextQueueDoor(broker, scheduler, reactor, settings, clock)
    if security is not None and security.enabled and settings["user"]:
        door.principal = security.user(settings["user"])
        if door.principal is None:
            raise UsersError(f"textqueue.user {settings['user']!r} is not in the users file")
    if not door.configured:
        return door, [door]
    return door, [door, periodic(float(settings["poll_interval"]), door.poll, door.clock,
                                 "textqueue poll")]
