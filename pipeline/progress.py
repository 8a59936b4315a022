"""Progress of long Spark jobs as a tqdm bar: tasks done out of tasks known.

Spark's own console progress bar is off in the jobs' session (it interleaves with
logs and with tqdm); instead a thread polls the status tracker while a step runs and
moves one bar per step. The bar goes to stderr and only when stderr is a terminal,
unless `show` says otherwise.
"""
import contextlib
import threading

from tqdm import tqdm

POLL = 0.25


@contextlib.contextmanager
def progress(spark, description, show=None):
    """A bar for the Spark jobs that run inside the `with` block."""
    sc = spark.sparkContext
    group = f"mqksbridge-pipeline {description}"
    sc.setJobGroup(group, description)
    bar = tqdm(total=0, desc=description, unit="task", disable=None if show is None else not show,
               leave=True, dynamic_ncols=True)
    stop = threading.Event()

    def follow():
        tracker = sc.statusTracker()
        while not stop.wait(POLL):
            total = done = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info else ():
                    s = tracker.getStageInfo(stage)
                    if s is not None:
                        total += s.numTasks
                        done += s.numCompletedTasks
            if total != bar.total or done != bar.n:
                bar.total = total
                bar.n = done
                bar.refresh()

    thread = threading.Thread(target=follow, daemon=True)
    if not bar.disable:             # no bar, no polling of the JVM
        thread.start()
    try:
        yield bar
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        bar.n = bar.total
        bar.close()
        sc.setLocalProperty("spark.jobGroup.id", None)
