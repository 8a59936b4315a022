"""Stall watch for the soak's broker (`python -m bench.soak --stalls`): not part of the broker.

bench.soak puts this directory on the broker's PYTHONPATH, so Python imports it at start;
it does nothing unless STALLWATCH names a file and the process is twistd. Then it writes a
JSON line to that file for:

- every garbage collection longer than 2 ms, and every full one (`gc.callbacks`: the
  generation, its time, what it collected);
- every reactor turn that makes a callFromThread wait more than 30 ms (`lag`): a watcher
  thread asks the reactor for a call every 20 ms and times the answer;
- while such a call waits, what the reactor thread is running, sampled every 5 ms from
  `sys._current_frames()` (`stall`: the most frequent stacks, innermost frame first). A
  collection holds the interpreter lock throughout and shows as a lag with no samples;
- every 10 s, the lengths of the reactor turns' two parts, timed calls and I/O events
  (`turns`: counts by length, what ran in the parts over 1 ms, and the milliseconds
  each timed call and connection kind took), with Python's count
  of allocated blocks (`blocks`: do Python objects grow, or only the resident size?).
"""
import os
import sys

if os.environ.get("STALLWATCH") and sys.argv and sys.argv[0].endswith("twistd"):
    import gc
    import json
    import threading
    import time
    from collections import Counter

    _out = open(os.environ["STALLWATCH"], "a", buffering=1)
    _gc_started = [0.0]
    _main = threading.main_thread().ident

    def _write(**fields):
        fields["t"] = round(time.time(), 3)
        _out.write(json.dumps(fields) + "\n")

    def _on_gc(phase, info):
        if phase == "start":
            _gc_started[0] = time.perf_counter()
            return
        ms = (time.perf_counter() - _gc_started[0]) * 1000
        if ms > 2 or info["generation"] == 2:
            _write(kind="gc", gen=info["generation"], ms=round(ms, 2),
                   collected=info["collected"])

    gc.callbacks.append(_on_gc)

    def _stack(depth=8):
        frame, out = sys._current_frames().get(_main), []
        while frame is not None and len(out) < depth:
            code = frame.f_code
            out.append(f"{os.path.basename(code.co_filename)}:{frame.f_lineno}:{code.co_name}")
            frame = frame.f_back
        return tuple(out)

    def _watch():
        while "twisted.internet.reactor" not in sys.modules:
            time.sleep(0.1)
        from twisted.internet import reactor
        while not reactor.running:
            time.sleep(0.1)
        answered = threading.Event()
        while True:
            answered.clear()
            asked = time.perf_counter()
            reactor.callFromThread(answered.set)
            samples = []
            while not answered.wait(0.005):
                if time.perf_counter() - asked > 0.03:
                    samples.append(_stack())
            ms = (time.perf_counter() - asked) * 1000
            if ms > 30:
                _write(kind="lag", ms=round(ms, 1), samples=len(samples),
                       top=[[n, list(s)] for s, n in Counter(samples).most_common(3)])
            time.sleep(0.02)

    _BUCKETS = (0.5, 1, 2, 5, 10, 20, 50)   # ms: a turn's part counted in the first it fits

    def _bucket(ms):
        for edge in _BUCKETS:
            if ms < edge:
                return f"<{edge}"
        return f">={_BUCKETS[-1]}"

    def _call_name(call):
        """A timed call's name; a LoopingCall's is its function's (bridge.clock.periodic's
        step: the name it was given)."""
        f = call.func
        owner = getattr(f, "__self__", None)
        if type(owner).__name__ == "Periodic":           # bridge.clock.periodic's service
            return owner.name
        if hasattr(f, "f") and hasattr(f, "a"):          # a LoopingCall
            if getattr(f.f, "__name__", "") == "_step" and len(f.a) > 1:
                return str(f.a[1])
            f = f.f
        return getattr(f, "__qualname__", repr(f))[:60]

    def _time_turns(reactor):
        """Every reactor turn's two parts, timed on the reactor thread: its due timed calls
        (runUntilCurrent) and the I/O events one poll returned (each _doReadOrWrite). Every
        10 s a `turns` line: how many of each part fell in each length bucket, which timed
        calls and connection kinds ran in the parts over 1 ms (a p99 of a millisecond is
        made of those), and the milliseconds each timed call and connection kind took in
        all (`cost_timers`, `cost_io`)."""
        perf = time.perf_counter
        io = {"ms": 0.0, "events": 0, "kinds": Counter()}
        hist = {"timers": Counter(), "io": Counter()}
        slow = {"timers": Counter(), "io": Counter()}
        cost = {"timers": Counter(), "io": Counter()}
        run_timers, read_or_write = reactor.runUntilCurrent, reactor._doReadOrWrite

        def timers():
            if io["events"]:
                ms = io["ms"]
                hist["io"][_bucket(ms)] += 1
                if ms > 1:
                    for kind, n in io["kinds"].items():
                        slow["io"][kind] += n
                io["ms"], io["events"] = 0.0, 0
                io["kinds"].clear()
            now = reactor.seconds()
            due = [c for c in reactor._pendingTimedCalls if c.time <= now]
            started = perf()
            run_timers()
            ms = (perf() - started) * 1000
            if due:
                hist["timers"][_bucket(ms)] += 1
                names = [_call_name(c) for c in due]
                for name in names:
                    cost["timers"][name] += ms / len(names)
                if ms > 1:
                    for name in names:
                        slow["timers"][name] += 1

        def timed_read_or_write(selectable, fd, event):
            started = perf()
            try:
                return read_or_write(selectable, fd, event)
            finally:
                ms = (perf() - started) * 1000
                io["ms"] += ms
                io["events"] += 1
                kind = type(getattr(selectable, "protocol", selectable)).__name__
                io["kinds"][kind] += 1
                cost["io"][kind] += ms

        reactor.runUntilCurrent = timers
        reactor._doReadOrWrite = timed_read_or_write

        def report():
            _write(kind="turns", blocks=sys.getallocatedblocks(),
                   timers=dict(hist["timers"]), io=dict(hist["io"]),
                   slow_timers=slow["timers"].most_common(8),
                   slow_io=slow["io"].most_common(8),
                   cost_timers=[[k, round(v, 1)] for k, v in cost["timers"].most_common(8)],
                   cost_io=[[k, round(v, 1)] for k, v in cost["io"].most_common(8)])
            for part in (hist, slow, cost):
                for counter in part.values():
                    counter.clear()
        from twisted.internet import task
        task.LoopingCall(report).start(10, now=False)

    def _start_turns():
        while "twisted.internet.reactor" not in sys.modules:
            time.sleep(0.1)
        from twisted.internet import reactor
        while not reactor.running:
            time.sleep(0.1)
        reactor.callFromThread(_time_turns, reactor)

    threading.Thread(target=_watch, name="stallwatch", daemon=True).start()
    threading.Thread(target=_start_turns, name="turnwatch", daemon=True).start()

if (os.environ.get("STALLWATCH_GARBAGE") and sys.argv and sys.argv[0].endswith("twistd")):
    # Garbage census (`python -m bench.soak --garbage SECONDS`): every SECONDS, on the reactor
    # thread, one full collection that keeps what it finds (gc.DEBUG_SAVEALL) and a JSON line
    # with the count by type of that cyclic garbage and the resident size before and after:
    # what refcounting alone never frees, and how much of the growth it is.
    import collections as _collections
    import gc as _gc
    import json as _json
    import threading as _threading
    import time as _time

    def _rss_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def _census():
        before = _rss_mb()
        started = _time.perf_counter()
        _gc.set_debug(_gc.DEBUG_SAVEALL)
        try:
            _gc.collect()
            kinds = _collections.Counter(type(o).__qualname__ for o in _gc.garbage)
            owners = _collections.Counter(
                type(o).__module__ + "." + type(o).__qualname__ for o in _gc.garbage
                if hasattr(o, "__dict__") and not isinstance(o, type))
        finally:
            _gc.set_debug(0)
            del _gc.garbage[:]
        _gc.collect()
        line = {"kind": "garbage", "t": round(_time.time(), 3),
                "ms": round((_time.perf_counter() - started) * 1000, 1),
                "rss_before_mb": round(before, 1), "rss_after_mb": round(_rss_mb(), 1),
                "objects": sum(kinds.values()), "top": kinds.most_common(25),
                "instances": owners.most_common(25)}
        with open(os.environ["STALLWATCH"], "a") as out:
            out.write(_json.dumps(line) + "\n")

    def _garbage_loop(every):
        while "twisted.internet.reactor" not in sys.modules:
            _time.sleep(0.1)
        from twisted.internet import reactor
        while True:
            _time.sleep(every)
            reactor.callFromThread(_census)

    _threading.Thread(target=_garbage_loop, args=(float(os.environ["STALLWATCH_GARBAGE"]),),
                      name="garbagewatch", daemon=True).start()

if (os.environ.get("STALLWATCH_TRACEMALLOC") and os.environ.get("STALLWATCH")
        and sys.argv and sys.argv[0].endswith("twistd")):
    # Allocation diff (`python -m bench.soak --tracemalloc SECONDS`): tracemalloc from the
    # start, and every SECONDS a snapshot compared with the one before: a JSON line with
    # the traced total and the 15 allocation sites (4 frames) that grew the most.
    import json as _tjson
    import threading as _tthreading
    import time as _ttime
    import tracemalloc as _tracemalloc

    _tracemalloc.start(4)

    def _trace_loop(every):
        before = _tracemalloc.take_snapshot()
        while True:
            _ttime.sleep(every)
            now = _tracemalloc.take_snapshot()
            stats = now.compare_to(before, "traceback")[:15]
            line = {"kind": "tracemalloc", "t": round(_ttime.time(), 3),
                    "traced_mb": round(_tracemalloc.get_traced_memory()[0] / 2**20, 2),
                    "top": [[round(s.size_diff / 1024), s.count_diff,
                             [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}"
                              for f in s.traceback]] for s in stats]}
            with open(os.environ["STALLWATCH"], "a") as out:
                out.write(_tjson.dumps(line) + "\n")
            before = now

    _tthreading.Thread(target=_trace_loop,
                       args=(float(os.environ["STALLWATCH_TRACEMALLOC"]),),
                       name="tracemallocwatch", daemon=True).start()

if os.environ.get("STALLWATCH") and sys.argv and sys.argv[0].endswith("twistd"):
    # At the end of a soak (SIGUSR2 from bench.soak, after the last sample): where the
    # resident memory is. One full collection that keeps what it finds (the cyclic garbage
    # refcounting left, by type), then glibc's malloc_trim (what the allocator held free):
    # the resident size before, after each, and Python's own count of allocated blocks.
    import collections as _ecollections
    import ctypes as _ectypes
    import gc as _egc
    import json as _ejson
    import signal as _esignal
    import time as _etime

    def _end_rss_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def _at_end(signum, frame):
        line = {"kind": "end", "t": round(_etime.time(), 3), "rss_mb": round(_end_rss_mb(), 1),
                "blocks": sys.getallocatedblocks()}
        _egc.set_debug(_egc.DEBUG_SAVEALL)
        try:
            _egc.collect()
            kinds = _ecollections.Counter(type(o).__qualname__ for o in _egc.garbage)
        finally:
            _egc.set_debug(0)
            del _egc.garbage[:]
        _egc.collect()
        line.update(garbage=sum(kinds.values()), garbage_top=kinds.most_common(10),
                    rss_after_collect_mb=round(_end_rss_mb(), 1),
                    blocks_after_collect=sys.getallocatedblocks())
        try:
            _ectypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
        line["rss_after_trim_mb"] = round(_end_rss_mb(), 1)
        with open(os.environ["STALLWATCH"], "a") as out:
            out.write(_ejson.dumps(line) + "\n")

    _esignal.signal(_esignal.SIGUSR2, _at_end)
