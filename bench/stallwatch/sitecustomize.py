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
  collection holds the interpreter lock throughout and shows as a lag with no samples.
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

    threading.Thread(target=_watch, name="stallwatch", daemon=True).start()
