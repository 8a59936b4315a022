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
    the source goes (`flush`). No timer: the clock is read when a warning comes."""

    __slots__ = ("clock", "burst", "interval", "window", "used", "suppressed")

    def __init__(self, clock, burst=10, interval=60.0):
        self.clock = clock               # () -> seconds
        self.burst = burst
        self.interval = interval
        self.window = None               # when the current window began
        self.used = 0
        self.suppressed = 0

    def warn(self, log, source, fmt, **fields):
        """log.warn(fmt, **fields) unless over the budget (then counted)."""
        now = self.clock()
        if self.window is None or now - self.window >= self.interval:
            self.window, self.used = now, 0
        if self.used >= self.burst:
            self.suppressed += 1
            return
        self.used += 1
        self.flush(log, source)
        log.warn(fmt, **fields)

    def flush(self, log, source):
        """Log how many warnings were held back since the last one logged."""
        if self.suppressed:
            count, self.suppressed = self.suppressed, 0
            log.warn("{source}: {count} similar warnings not logged (at most {burst} per "
                     "{interval:g} s)", source=source, count=count, burst=self.burst,
                     interval=self.interval, suppressed=count)
