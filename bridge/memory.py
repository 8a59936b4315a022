"""The global memory watermark: past it, publishers stop being read on every door.

Each door bounds what one connection may make the broker hold; the sum over thousands of
connections and queues still may not fit. As RabbitMQ's memory alarm does, once the
broker's resident memory passes `broker.memory_watermark` every connection that has
published is held (bridge.inputs, reason MEMORY: each door's own flow control, the kernel's
TCP window then stops the sender), while connections that only consume are read on, so
consumers keep draining and acking. A connection that publishes while the alarm is on is
held at the next check. The alarm clears once memory is back under CLEAR of the watermark,
and every held connection is read again.

Freed memory does not always show in the resident size: glibc keeps freed blocks for
reuse. While the alarm is on each check asks it to give free pages back (malloc_trim), so
that a drained broker is seen as one.
"""
import ctypes
import ctypes.util
import os

from twisted.logger import Logger

from mqksbridge.bridge.inputs import MEMORY

log = Logger(namespace="mqksbridge.memory")

CLEAR = 0.9                          # the alarm clears under this fraction of the watermark
_PAGE = os.sysconf("SC_PAGE_SIZE")


_STATM = []                          # /proc/self/statm, opened once and kept


def resident():
    """This process's resident memory in bytes (Linux: /proc/self/statm, one pread). The
    file stays open: a broker out of descriptors is when the check matters most, and an
    open() per check would fail then."""
    if not _STATM:
        _STATM.append(os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC))
    return int(os.pread(_STATM[0], 256, 0).split()[1]) * _PAGE


def machine_memory():
    return os.sysconf("SC_PHYS_PAGES") * _PAGE


def watermark_bytes(setting):
    """The setting as bytes: a fraction of the machine's memory (0 < x <= 1), bytes (> 1),
    or None ("max": no watermark)."""
    if setting is None or setting == "max":
        return None
    if setting <= 1:
        return int(setting * machine_memory())
    return int(setting)


def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


class MemoryWatermark:
    """Checked by a periodic service (bridge.clock.periodic); `doors` is the live mapping
    of door name -> door (each with `.traffic`, a bridge.traffic.DoorTraffic)."""

    def __init__(self, limit, doors, used=resident, trim=None, spill=None):
        self.limit = limit
        self.spill = spill           # bridge.spill.Spill: its pressure holds publishers too
        self.doors = doors
        self.used = used
        self.trim = trim if trim is not None else _malloc_trim()
        self.alarm = False
        self.last = 0                # bytes at the last check
        self.alarms = 0              # times the alarm went on
        self.held = {}               # Traffic.id -> Traffic held for MEMORY

    def check(self):
        pressed = self.spill is not None and self.spill.pressure()
        if self.limit is None and not pressed and not self.alarm:
            return
        if self.alarm:
            self.trim()
        used = self.last = self.used()
        over = pressed or (self.limit is not None and used > self.limit)
        if not self.alarm and over:
            self.alarm = True
            self.alarms += 1
            log.warn("memory alarm: {used} bytes resident, watermark {limit}{spill}; "
                     "publishers are not read until it clears", used=used, limit=self.limit,
                     spill=", spill pages waiting for the disk" if pressed else "")
        elif self.alarm and not pressed and (self.limit is None or used < self.limit * CLEAR):
            self.alarm = False
            log.info("memory alarm cleared: {used} bytes resident", used=used)
            held, self.held = self.held, {}
            for traffic in held.values():
                traffic.input.release(MEMORY)
            return
        if self.alarm:
            self._hold_publishers()

    def _hold_publishers(self):
        held = self.held
        for door in self.doors.values():
            for traffic in list(door.traffic.live.values()):
                if traffic.messages_in and traffic.id not in held:
                    held[traffic.id] = traffic
                    traffic.input.hold(MEMORY)
        for key in [key for key, t in held.items() if t.owner.live.get(key) is not t]:
            del held[key]            # gone meanwhile

    def state(self):
        """What `_eval` and the admin API show (with the spill's pages and writes)."""
        return {"alarm": self.alarm, "watermark": self.limit, "resident": self.last,
                "alarms": self.alarms, "held": len(self.held),
                "spill": self.spill.state() if self.spill is not None else None}
