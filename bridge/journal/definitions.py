"""Durable queue definitions across restarts: `<data_dir>/definitions.json`.

Messages come back from the journals; what makes each durable queue what it is comes
back from here: its mode and options, the stream bindings that route to it (MQKS events),
its Twino side (channel, queue id, Twino options, the channel's settings) and its fsync
policy. One JSON document, indented and sorted, for a person to read:

    {"version": 1, "queues": {"jobs": {"mode": "round-robin", "fsync": "always",
        "options": {"max_deliveries": 5, "dead_letter": "jobs.dlq"},
        "bindings": {"mqks": ["job.new", "job.retry"]}}, ...}}

It is rewritten whenever a durable queue is created, removed or redefined (a door emits
`queue-defined` after changing bindings, options or status), at most once a reactor turn:
the broker's thread takes the snapshot, the journal's worker thread writes it atomically
(temporary file, fsync, rename, fsync of the directory), in order with journal batches.
At start it is read before the journals, so recovered messages land in queues that are
already what they were. A definitions file that cannot be read is logged and ignored
(the journals alone still bring every message back, into plain queues).
"""
import json
import os

from twisted.logger import Logger

from mqksbridge.bridge.journal import layout
from mqksbridge.bridge.journal.files import parents_of

log = Logger(namespace="mqksbridge.journal")
VERSION = 1
OPTIONS = ("ack_timeout", "max_messages", "max_bytes", "max_message_size", "wait_for_ack",
           "only_first", "when_unused", "max_deliveries", "dead_letter")


def write_atomic(files, path, data):
    """Worker thread: `data` at `path` whole or not at all (the data directory is made
    on first use, as the journals' are): written to a work file and synced before the
    rename, the directory synced after it (docs/durability.md)."""
    folder = os.path.dirname(os.path.abspath(path))
    for parent in parents_of(files.makedirs(folder)):
        files.sync_directory(parent)
    work = layout.work_file(path)
    fd = files.open(work, create=True, truncate=True)
    try:
        files.pwrite(fd, data, 0)
        files.fsync(fd)
    finally:
        files.close(fd)
    files.rename(work, path)
    files.sync_directory(folder)


class Definitions:
    """Snapshots of the broker's durable queues (module docstring)."""

    def __init__(self, durability, broker, reactor):
        self.durability = durability
        self.broker = broker
        self.reactor = reactor
        self.path = os.path.join(durability.store.data_dir, layout.DEFINITIONS)
        self._call = None
        self.saved = None               # the last snapshot handed to the writer
        broker.subscribe(self._event)

    def _event(self, event, queue=None, **data):
        if event in ("queue-created", "queue-defined", "queue-removed") and (
                queue.journal is not None or queue.name in self.saved_names()):
            self.changed()

    def saved_names(self):
        return () if self.saved is None else self.saved["queues"]

    def changed(self):
        if self._call is None:
            self._call = self.reactor.callLater(0, self._save)

    def _save(self):
        self._call = None
        snapshot = self.snapshot()
        if snapshot == self.saved:
            return
        self.saved = snapshot
        data = json.dumps(snapshot, indent=1, sort_keys=True, ensure_ascii=False).encode()
        path, files = self.path, self.durability.writer.files
        self.durability.writer.after(lambda: write_atomic(files, path, data + b"\n"))

    # -- what a queue is -----------------------------------------------------------------
    def snapshot(self):
        queues = {}
        for name, queue in self.broker.queues.items():
            if queue.journal is not None:
                queues[name] = self.describe(queue)
        return {"version": VERSION, "queues": queues}

    def describe(self, queue):
        options = {}
        for key in OPTIONS:
            value = getattr(queue, key)
            if value is not None and value is not False:
                options[key] = value
        bindings = {}
        for stream in self.broker.streams.values():
            subjects = stream.bound_subjects(queue.name)
            if subjects:
                bindings[stream.name] = sorted(subjects)
        found = {"mode": queue.mode, "fsync": queue.journal.policy, "options": options}
        if bindings:
            found["bindings"] = bindings
        twino = queue.attrs.get("twino")
        if twino is not None:
            channel = queue.channel
            found["twino"] = {
                "channel": twino.channel, "id": twino.id, "options": twino.options(),
                "channel_settings": {**channel.attrs.get("twino", {}),
                                     "destroy_when_empty": channel.destroy_when_empty}
                if channel else {},
                "channel_defaults": dict(channel.defaults) if channel else {},
            }
        return found

    # -- start -------------------------------------------------------------------------------
    def load(self):
        """The saved definitions ({name: definition}); {} when there are none."""
        try:
            with open(self.path, "rb") as f:
                document = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("definitions file {path} unreadable ({exc}); queues come back plain",
                      path=self.path, exc=exc)
            return {}
        if document.get("version") != VERSION:
            log.error("definitions file {path}: version {v} unknown; ignored",
                      path=self.path, v=document.get("version"))
            return {}
        return document.get("queues", {})

    def restore(self, twino=None):
        """Make every saved queue as it was (before the journals are read). `twino` is the
        Twino door's queue registry, for queues with a Twino side."""
        saved = self.load()
        for name, found in saved.items():
            try:
                self._restore(name, found, twino)
            except Exception:
                log.failure("definition of queue {name!r} not restored", name=name)
        self.saved = self.snapshot()
        return saved

    def _restore(self, name, found, twino):
        queue = self.broker.queues.get(name)
        side = found.get("twino")
        if queue is None and side is not None and twino is not None:
            channel = self.broker.channels.get(side["channel"])
            if channel is None:
                channel = twino.create_channel(side["channel"], {
                    **side.get("channel_settings", {}), **side.get("channel_defaults", {})})
            state, code = twino.create_queue(channel, side["id"], side.get("options", {}))
            queue = state.queue if state is not None else None
        if queue is None:
            queue = self.broker.queue(name, mode=found.get("mode", "round-robin"))
        options = {k: v for k, v in found.get("options", {}).items() if k in OPTIONS}
        if options:
            queue.configure(**options)
        if found.get("mode") and queue.mode != found["mode"]:
            queue.set_mode(found["mode"])
        for stream, subjects in found.get("bindings", {}).items():
            self.broker.stream(stream).set_bindings(name, subjects)
        self.durability.make_durable(queue, found.get("fsync"))
