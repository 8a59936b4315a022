"""Durable queue definitions across restarts: `<data_dir>/definitions.json`.

Messages come back from the journals; what makes each durable queue what it is comes
back from here, as data any door or none can read: its mode and core options (limits,
timeouts, dead letters), the stream bindings that route to it (MQKS events), its fsync
policy, each door's own arguments for it, and the channel it belongs to (its defaults,
DestroyWhenEmpty and each door's arguments). One JSON document, indented and sorted, for
a person to read:

    {"version": 2, "queues": {"orders/1": {"mode": "round-robin", "fsync": "always",
        "options": {"max_deliveries": 5, "dead_letter": "orders/1.dlq"},
        "bindings": {"mqks": ["job.new"]},
        "arguments": {"twino": {"request_acknowledge": true, "tag": null, ...}}}, ...},
     "channels": {"orders": {"defaults": {...}, "destroy_when_empty": false,
        "arguments": {"twino": {"client_limit": 0, ...}}}}}

Restoring needs no door: the core makes each channel and queue from the data, a queue's
door arguments are kept in `queue.attrs["arguments"]` (and saved again as they are), and
each door reads its own when it first sees the queue, as a broker persists queue
arguments that its protocol adapters interpret (docs/engine.md). A door's
entry in `queue.attrs` that has an `arguments()` method is saved under the door's name;
a channel's door entries are plain dicts, saved as they are. Version 1 files (a
`twino` section per queue) are read too.

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
VERSION = 2
READABLE = (1, VERSION)  # version 1: each queue's Twino side in a section of its own
ARGUMENTS = "arguments"   # queue.attrs key: saved door arguments no door has read yet
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
        queues, channels = {}, {}
        for name, queue in self.broker.queues.items():
            if queue.journal is not None:
                queues[name] = self.describe(queue)
                if queue.channel is not None:
                    channels[queue.channel.name] = describe_channel(queue.channel)
        return {"version": VERSION, "queues": queues, "channels": channels}

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
        arguments = queue_arguments(queue)
        if arguments:
            found["arguments"] = arguments
        return found

    # -- start -------------------------------------------------------------------------------
    def load(self):
        """The saved definitions, as {"queues": {name: definition}, "channels": {name:
        definition}} in the current form whatever version the file has; empty when there
        are none."""
        nothing = {"queues": {}, "channels": {}}
        try:
            with open(self.path, "rb") as f:
                document = json.load(f)
        except FileNotFoundError:
            return nothing
        except (OSError, ValueError) as exc:
            log.error("definitions file {path} unreadable ({exc}); queues come back plain",
                      path=self.path, exc=exc)
            return nothing
        if document.get("version") not in READABLE:
            log.error("definitions file {path}: version {v} unknown; ignored",
                      path=self.path, v=document.get("version"))
            return nothing
        if document["version"] == 1:
            return upgraded(document.get("queues", {}))
        return {"queues": document.get("queues", {}), "channels": document.get("channels", {})}

    def restore(self):
        """Make every saved channel and queue as it was (before the journals are read),
        through the core alone: a door that is there reads its arguments as it sees each
        queue (the broker's queue-created event), one that is not finds them later."""
        saved = self.load()
        for name, found in saved["channels"].items():
            if name not in self.broker.channels:
                try:
                    self.broker.channel(name, defaults=found.get("defaults", {}),
                                        attrs=copied(found.get("arguments", {})),
                                        destroy_when_empty=found.get("destroy_when_empty",
                                                                     False))
                except Exception:
                    log.failure("definition of channel {name!r} not restored", name=name)
        for name, found in saved["queues"].items():
            try:
                self._restore(name, found)
            except Exception:
                log.failure("definition of queue {name!r} not restored", name=name)
        self.saved = self.snapshot()
        return saved

    def _restore(self, name, found):
        options = {k: v for k, v in found.get("options", {}).items() if k in OPTIONS}
        mode = found.get("mode", "round-robin")
        queue = self.broker.queues.get(name)
        if queue is None:
            queue = self.broker.queue(name, mode=mode,
                                      attrs={ARGUMENTS: copied(found.get("arguments", {}))})
        if options:
            queue.configure(**options)
        if queue.mode != mode:
            queue.set_mode(mode)
        for stream, subjects in found.get("bindings", {}).items():
            self.broker.stream(stream).set_bindings(name, subjects)
        self.durability.make_durable(queue, found.get("fsync"))


def queue_arguments(queue):
    """{door: arguments} of a queue: those saved and not read yet, then each door's own."""
    arguments = dict(queue.attrs.get(ARGUMENTS) or {})
    for door, value in queue.attrs.items():
        describe = getattr(value, "arguments", None)
        if describe is not None:
            arguments[door] = describe()
    return arguments


def describe_channel(channel):
    return {"defaults": dict(channel.defaults), "destroy_when_empty": channel.destroy_when_empty,
            "arguments": {door: dict(value) for door, value in channel.attrs.items()
                          if isinstance(value, dict)}}


def copied(arguments):
    return {door: dict(value) for door, value in arguments.items()}


def upgraded(queues):
    """Version 1 definitions in the current form: each queue's `twino` section becomes its
    Twino arguments and the definition of its channel."""
    result = {"queues": {}, "channels": {}}
    for name, found in queues.items():
        found = dict(found)
        side = found.pop("twino", None)
        if side is not None:
            found["arguments"] = {"twino": dict(side.get("options", {}))}
            settings = dict(side.get("channel_settings", {}))
            destroy = bool(settings.pop("destroy_when_empty", False))
            result["channels"].setdefault(side["channel"], {
                "defaults": dict(side.get("channel_defaults", {})),
                "destroy_when_empty": destroy, "arguments": {"twino": settings}})
        result["queues"][name] = found
    return result
