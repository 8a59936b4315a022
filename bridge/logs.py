"""Log output for twistd: Twisted's text lines, or one JSON object per line.

`--log-format json` (config `log.format`) makes each twisted.logger event a line like
`{"time": "2025-01-01T12:00:00.000000+00:00", "level": "warn", "namespace":
"mqksbridge.mqks", "message": "mqks error 2ab... from ...", "eid": "2ab...", ...}`: the
formatted text plus every field the event carried that JSON can hold (the MQKS error id a
client was sent is `eid`), so log shippers can filter on fields instead of parsing text.
"""
import json
import sys
from datetime import datetime, timezone

from twisted.logger import FileLogObserver, formatEvent
from twisted.python import logfile


def _plain(value):
    """A JSON-able form of an event field, or None to leave the field out."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return None


def event_as_json(event):
    """One event as a JSON line."""
    level = event.get("log_level")
    record = {
        "time": datetime.fromtimestamp(event.get("log_time", 0), timezone.utc).isoformat(),
        "level": level.name if level is not None else "info",
        "namespace": event.get("log_namespace", ""),
        "message": formatEvent(event),
    }
    failure = event.get("log_failure")
    if failure is not None:
        record["traceback"] = failure.getTraceback()
    for key, value in event.items():
        if key.startswith("log_") or key in record or key in ("format", "message", "time"):
            continue
        plain = _plain(value)
        if plain is not None:
            record[key] = plain
    return json.dumps(record, ensure_ascii=False) + "\n"


def json_observer(out):
    return FileLogObserver(out, event_as_json)


def log_file(twistd_options):
    """Where twistd would write its log: stdout for `-n` without `--logfile` (or `-l -`),
    else the named file, else twistd.log."""
    options = twistd_options or {}
    name = options.get("logfile") or ""
    if name == "-" or (not name and options.get("nodaemon")):
        return sys.stdout
    return logfile.LogFile.fromFullPath(name or "twistd.log")


class Repeats:
    """At most `burst` warnings per `interval` seconds for one source (a connection, a
    door): a client that sends 100k bad lines must not write 100k log lines. What is held
    back is counted, and the count is logged with the next warning let through, or when
    the source goes (`flush`). No timer: the clock is read when a warning comes.

    A connection's budget has its door's as `parent`: a line is logged only when both have
    room, so clients that reconnect for a fresh budget (ten garbage connections a second
    wrote 47 KB of log a second, 4 GB a day) still write at most the door's `burst` lines
    per `interval`. What the door holds back is counted once, under the door's `name`."""

    __slots__ = ("clock", "burst", "interval", "window", "used", "suppressed", "parent", "name")

    def __init__(self, clock, burst=10, interval=60.0, parent=None, name=None):
        self.clock = clock               # () -> seconds
        self.burst = burst
        self.interval = interval
        self.window = None               # when the current window began
        self.used = 0
        self.suppressed = 0
        self.parent = parent             # the door's Repeats, shared by its connections
        self.name = name                 # the source a door's own count is logged under

    def warn(self, log, source, fmt, **fields):
        """log.warn(fmt, **fields) unless over the budget (then counted)."""
        self._emit(log, log.warn, source, fmt, fields)

    def info(self, log, source, fmt, **fields):
        """log.info(fmt, **fields) unless over the budget (then counted)."""
        self._emit(log, log.info, source, fmt, fields)

    def _room(self):
        now = self.clock()
        if self.window is None or now - self.window >= self.interval:
            self.window, self.used = now, 0
        return self.used < self.burst

    def _emit(self, log, emit, source, fmt, fields):
        parent = self.parent
        if not self._room():
            self.suppressed += 1
            return
        if parent is not None:
            if not parent._room():
                parent.suppressed += 1
                return
            parent.used += 1
            parent.flush(log, parent.name)
        self.used += 1
        self.flush(log, source, charged=True)
        emit(fmt, **fields)

    def flush(self, log, source, charged=False):
        """Log how many warnings were held back since the last one logged (a line the
        door's budget must have room for, unless it goes with one that was `charged`)."""
        if not self.suppressed:
            return
        count, self.suppressed = self.suppressed, 0
        parent = self.parent
        if parent is not None and not charged:
            if not parent._room():
                parent.suppressed += count
                return
            parent.used += 1
        log.warn("{source}: {count} similar warnings not logged (at most {burst} per "
                 "{interval:g} s)", source=source, count=count, burst=self.burst,
                 interval=self.interval, suppressed=count)


def door_repeats(config, clock, door):
    """A door's budget of log lines about its clients (`log.door_warn_burst` per
    `log.warn_interval`), the `parent` of its connections' own."""
    settings = config["log"]
    return Repeats(clock, int(settings["door_warn_burst"]), float(settings["warn_interval"]),
                   name=f"{door} door")
