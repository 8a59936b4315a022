"""CPU seconds and RSS of a process from /proc (Linux), for the server under test."""
import os

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_ns(pid):
    """CPU time of all the process's threads in nanoseconds (/proc/PID/task/*/schedstat):
    exact, where /proc/PID/stat counts 10 ms ticks."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass                         # a thread that ended meanwhile
    return total


def tree_cpu_seconds(pid):
    """CPU seconds of a process and every descendant alive now, with what their ended
    children used (a Spark driver: its JVM, the JVM's Python daemon and workers, and
    the planners that came and went)."""
    parents, times = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue                     # ended meanwhile
        parents.setdefault(int(fields[1]), []).append(int(entry))
        times[int(entry)] = sum(int(v) for v in fields[11:15]) / _TICKS
    total, stack = 0.0, [pid]
    while stack:
        p = stack.pop()
        total += times.get(p, 0.0)
        stack.extend(parents.get(p, ()))
    return total
