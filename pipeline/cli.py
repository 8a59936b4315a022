"""`mqksbridge-pipeline`: the pipeline's jobs as subcommands (docs/pipeline.md).

    mqksbridge-pipeline report JOURNALS... --out DIR
    mqksbridge-pipeline replay JOURNALS... --where "subject like 'order.%'" --to URL
    mqksbridge-pipeline export JOURNALS... --out DIR
    mqksbridge-pipeline compact ARCHIVE --keep-days 30

`--master` (default local[*]) and `--conf KEY=VALUE` (repeatable) choose where Spark
runs; the same job runs on a laptop and on a cluster. Exit status: 0 done, 1 the job
failed, 2 bad arguments (a journal path that names nothing among them: checked before
Spark starts; an export's --out that exists, without --overwrite), 3 replay skipped
messages its target cannot carry.
"""
import argparse
import datetime
import importlib
import os
import sys
import threading


def _time(text):
    """An ISO 8601 time; without a zone it is UTC."""
    value = datetime.datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def parser():
    spark = argparse.ArgumentParser(add_help=False)
    spark.add_argument("--master", default="local[*]",
                       help="Spark master URL (default local[*]; spark://host:7077 for a cluster)")
    spark.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="a Spark configuration setting (repeatable)")
    spark.add_argument("--quiet", action="store_true", help="no progress bars")
    journals = argparse.ArgumentParser(add_help=False)
    journals.add_argument("journals", nargs="+", metavar="JOURNALS",
                          help="journal files, directories (read recursively) or globs")
    journals.add_argument("--where", help="a Spark SQL predicate on the textqueue columns")

    top = argparse.ArgumentParser(prog="mqksbridge-pipeline", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True)

    report = commands.add_parser("report", parents=[spark, journals],
                                 help="Parquet tables and an HTML page of charts")
    report.add_argument("--out", required=True, help="directory for tables/ and report.html")
    report.add_argument("--as-of", type=_time, help="time the backlog age is measured at "
                        "(default: the latest time in the journals)")

    replay = commands.add_parser("replay", parents=[spark, journals],
                                 help="republish selected messages through a door of a broker")
    replay.add_argument("--to", required=True, metavar="URL",
                        help="mqks://host:port/EVENT, twino://host:port/CHANNEL/QUEUE, "
                             "malamute://tcp://host:port/SERVICE[?stream], or an inbox file path")
    replay.add_argument("--rate", type=float, default=0,
                        help="messages per second at most (default: as fast as the target takes them)")
    replay.add_argument("--dry-run", action="store_true", help="count and show, send nothing")

    export = commands.add_parser("export", parents=[spark, journals],
                                 help="Parquet partitioned by day and queue")
    export.add_argument("--out", required=True, help="output directory")
    export.add_argument("--columns", help="comma-separated columns (default: all but variables)")
    export.add_argument("--overwrite", action="store_true", help="replace what OUT holds")
    export.add_argument("--with-comments", action="store_true",
                        help="export comment records (#: segment notes, copies compaction moved "
                             "forward) too; they are not messages and are left out by default")

    compact = commands.add_parser("compact", help="rewrite archived segments, keeping what the "
                                  "retention rule says (atomically)")
    compact.add_argument("archive", metavar="ARCHIVE", help="an archive directory or segment file")
    compact.add_argument("--keep-days", type=float,
                         help="drop settled records settled more than this many days before --now")
    compact.add_argument("--keep-status", default="queued,error",
                         help="statuses always kept (default queued,error: undelivered messages "
                              "and dead letters)")
    compact.add_argument("--now", type=_time, help="the time retention counts from (default: now)")
    compact.add_argument("--dry-run", action="store_true", help="say what would go, change nothing")
    compact.add_argument("--quiet", action="store_true", help="no progress bar")
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    if args.command == "compact":
        from mqksbridge.pipeline import compact
        return compact.main(args)
    from mqksbridge.pipeline.session import parse_conf, spark_session, stop
    try:
        conf = parse_conf(args.conf)
    except ValueError as e:
        print(f"mqksbridge-pipeline: {e}", file=sys.stderr)
        return 2
    show = False if args.quiet else None
    if args.command == "replay":
        from mqksbridge.pipeline import replay
        try:
            target = replay.target(args.to)
        except ValueError as e:
            print(f"mqksbridge-pipeline: {e}", file=sys.stderr)
            return 2
    from mqksbridge.pipeline.files import expand
    try:
        expand(args.journals)           # a typo fails here, in one line, not in Spark's planner
    except OSError as e:
        print(f"mqksbridge-pipeline: {e}", file=sys.stderr)
        return 2
    if args.command == "report":        # matplotlib loads on the core the JVM start leaves
        charts = threading.Thread(target=importlib.import_module, daemon=True,
                                  args=("mqksbridge.pipeline.report_html",))
        charts.start()
    spark = spark_session(args.master, conf)
    try:
        if args.command == "report":
            from mqksbridge.pipeline import report
            report.clear(args.out)
            frames, facts = report.run(spark, args.journals, args.out, args.where, args.as_of,
                                       show, html=False)
            stopping = threading.Thread(target=stop, args=(spark,))
            stopping.start()             # the JVM ends on one core, the page is drawn on the other
            spark = None
            charts.join()
            report.page(args.out, frames, facts, args.journals)
            stopping.join()
            print(f"report: {facts['messages']} messages, {len(frames['queues'])} queues -> "
                  f"{os.path.join(args.out, 'report.html')}, tables in "
                  f"{os.path.join(args.out, 'tables', '')}")
            return 0
        if args.command == "replay":
            result = replay.run(spark, args.journals, args.where, target, rate=args.rate,
                                dry_run=args.dry_run, show_progress=show, url=args.to)
            print(result.summary())
            return 3 if result.skipped else 0
        if args.command == "export":
            from mqksbridge.pipeline import export
            columns = args.columns.split(",") if args.columns else None
            try:
                count = export.run(spark, args.journals, args.out, args.where, columns, show,
                                   "overwrite" if args.overwrite else "errorifexists",
                                   args.with_comments)
            except FileExistsError as e:
                print(f"mqksbridge-pipeline: {e}", file=sys.stderr)
                return 2
            print(f"export: {count} records -> {args.out} (partitioned by day and queue)")
            return 0
    finally:
        if spark is not None:
            stop(spark)
    return 2


if __name__ == "__main__":
    sys.exit(main())
