"""Which files changed: inotify where the platform has it, a poll everywhere.

The door watches directories, not files (a file replaced by a rename is a new inode in
the same directory): inotify says which name changed at once; the poll, every
`poll_interval` on the door's clock, catches what inotify cannot tell (files on network
file systems, an overflowed event queue) and drives the time-based rules (grace time,
lock retries, settled files). So inotify only makes the door faster, never correct.
"""
from twisted.logger import Logger
from twisted.python.filepath import FilePath

log = Logger(namespace="mqksbridge.textqueue")

try:
    from twisted.internet import inotify
except ImportError:                      # not Linux
    inotify = None

if inotify is not None:
    MASK = (inotify.IN_MODIFY | inotify.IN_CLOSE_WRITE | inotify.IN_CREATE
            | inotify.IN_MOVED_TO | inotify.IN_MOVED_FROM | inotify.IN_DELETE
            | inotify.IN_ATTRIB)
    # A writer is done with a file it closed, or renamed into the directory (the spool
    # convention: write elsewhere, then move it in).
    CLOSED = inotify.IN_CLOSE_WRITE | inotify.IN_MOVED_TO


class Watcher:
    """Calls `changed(path, closed)` for a file of a watched directory that changed
    (`closed`: a writer closed it or moved it in); `mode` is auto, inotify or poll."""

    def __init__(self, reactor, mode, changed):
        self.changed = changed
        self.notifier = None
        self.watched = set()
        if mode == "poll":
            return
        if inotify is None:
            if mode == "inotify":
                raise RuntimeError("textqueue.watch = inotify: this platform has no inotify")
            return
        try:
            self.notifier = inotify.INotify(reactor)
            self.notifier.startReading()
        except Exception as exc:
            if mode == "inotify":
                raise
            log.warn("textqueue: inotify unavailable ({reason}), polling only", reason=exc)
            self.notifier = None

    @property
    def mode(self):
        return "poll" if self.notifier is None else "inotify"

    def watch(self, directory):
        """Watch a directory that exists (again once it was recreated)."""
        if self.notifier is None or directory in self.watched:
            return
        try:
            self.notifier.watch(FilePath(directory), MASK, callbacks=[self._event])
            self.watched.add(directory)
        except Exception as exc:
            log.warn("textqueue: cannot watch {directory}: {reason}", directory=directory,
                     reason=exc)

    def _event(self, ignored, filepath, mask):
        path = filepath.path
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
        if mask & inotify.IN_DELETE_SELF or mask & inotify.IN_IGNORED:
            self.watched.discard(path)
            return
        self.changed(path, bool(mask & CLOSED))

    def stop(self):
        if self.notifier is not None:
            self.notifier.loseConnection()
            self.notifier = None
            self.watched.clear()
