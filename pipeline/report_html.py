"""The report's page: one self-contained HTML file (charts embedded as PNG data URLs).

Charts first, numbers second: a person should see at a glance which queue is busy,
where messages wait, which doors talk to which, what gets retried and dead-lettered.
Each chart is also written as a PNG beside the page (`charts/`), for docs and mail.
"""
import base64
import datetime
import html
import io
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

STATUS_COLOURS = {"queued": "#4C78A8", "done": "#54A24B", "error": "#E45756"}
DOORS = ["mqks", "malamute", "twino", "textqueue"]
DOOR_COLOURS = {"mqks": "#4C78A8", "malamute": "#F58518", "twino": "#54A24B",
                "textqueue": "#B279A2", "unknown": "#BAB0AC"}
FATES = ["waiting", "expired", "removed", "unknown"]
PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6",
           "#9D755D", "#BAB0AC", "#EECA3B"]


def _style():
    plt.rcParams.update({
        "figure.dpi": 110, "font.size": 10, "axes.titlesize": 12, "axes.titleweight": "bold",
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
        "grid.alpha": 0.3, "axes.titlelocation": "left", "legend.frameon": False})


def _png(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def human_count(n, _=None):
    n = float(n)
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}".replace(".0" + unit, unit)
    return f"{n:.0f}"


def human_bytes(n):
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def human_ms(ms, _=None):
    if ms is None or (isinstance(ms, float) and np.isnan(ms)):
        return "–"
    ms = float(ms)
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    if ms < 86_400_000:
        return f"{ms / 3_600_000:.1f} h"
    return f"{ms / 86_400_000:.1f} d"


def chart_queues(queues):
    """Messages per queue, stacked by status."""
    q = queues.sort_values("messages", ascending=True)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(q) + 1.4))
    left = np.zeros(len(q))
    for status in ("done", "queued", "error"):
        values = q[status].to_numpy(dtype=float)
        ax.barh(q["queue"].fillna("(no queue)"), values, left=left, label=status,
                color=STATUS_COLOURS[status], height=0.6)
        left += values
    for y, (total, size) in enumerate(zip(q["messages"], q["bytes"])):
        ax.text(left[y], y, f"  {human_count(total)} · {human_bytes(size)}", va="center", fontsize=9)
    ax.set_xlim(0, left.max() * 1.25 if len(left) else 1)
    ax.xaxis.set_major_formatter(FuncFormatter(human_count))
    ax.set_title("Messages per queue, by status")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", visible=False)
    return fig


def chart_throughput(throughput, unit):
    """Published per queue (stacked) and settled (a line), per time bucket."""
    t = throughput.copy()
    if getattr(t["bucket"].dt, "tz", None) is not None:
        t["bucket"] = t["bucket"].dt.tz_localize(None)
    pivot = t.pivot_table(index="bucket", columns="queue", values="published", aggfunc="sum",
                          fill_value=0).sort_index()
    settled = t.groupby("bucket")["settled"].sum().reindex(pivot.index, fill_value=0)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    colours = [PALETTE[k % len(PALETTE)] for k in range(len(pivot.columns))]
    x = pivot.index
    if len(x) <= 60:
        width = (x[1] - x[0]) * 0.8 if len(x) > 1 else 0.8
        bottom = np.zeros(len(x))
        for colour, queue in zip(colours, pivot.columns):
            ax.bar(x, pivot[queue], bottom=bottom, width=width, label=queue, color=colour)
            bottom += pivot[queue].to_numpy()
    else:
        ax.stackplot(x, *[pivot[c] for c in pivot.columns], labels=list(pivot.columns),
                     colors=colours, alpha=0.9)
    ax.plot(x, settled.values, color="black", linewidth=1.4, linestyle="--", marker=".",
            label="settled (all queues)")
    ax.set_title(f"Throughput: messages published per {unit}, by queue")
    ax.set_ylabel(f"messages / {unit}")
    ax.yaxis.set_major_formatter(FuncFormatter(human_count))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.autofmt_xdate()
    return fig


def chart_flow(flow):
    """The door-to-door matrix: where messages came in (rows), who took them (columns)."""
    origins = [d for d in DOORS if d in set(flow["origin"])] + sorted(
        set(flow["origin"]) - set(DOORS))
    consumers = [d for d in DOORS + FATES if d in set(flow["consumer"])] + sorted(
        set(flow["consumer"]) - set(DOORS) - set(FATES))
    matrix = np.zeros((len(origins), len(consumers)))
    for row in flow.itertuples():
        matrix[origins.index(row.origin), consumers.index(row.consumer)] += row.messages
    fig, ax = plt.subplots(figsize=(1.25 * len(consumers) + 2.2, 0.7 * len(origins) + 1.6))
    shown = np.where(matrix > 0, matrix, np.nan)
    vmax = max(np.nanmax(shown) if np.isfinite(shown).any() else 1, 2)
    image = ax.imshow(shown, cmap="Blues", norm=LogNorm(vmin=1, vmax=vmax), aspect="auto")
    for i in range(len(origins)):
        for j in range(len(consumers)):
            if matrix[i, j]:
                dark = matrix[i, j] > vmax ** 0.6
                ax.text(j, i, human_count(matrix[i, j]), ha="center", va="center",
                        color="white" if dark else "black", fontsize=10, fontweight="bold")
    ax.set_xticks(range(len(consumers)), consumers)
    ax.set_yticks(range(len(origins)), origins)
    ax.set_xlabel("consumer door (or what happened instead)")
    ax.set_ylabel("origin door")
    ax.grid(False)
    if len(consumers) > len([c for c in consumers if c in DOORS]):
        ax.axvline(len([c for c in consumers if c in DOORS]) - 0.5, color="grey", linewidth=1)
    ax.set_title("Door to door: messages by origin and consumer")
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    return fig


def chart_time_in_queue(queues):
    """Time from publish to ack, p50 / p90 / p99 per queue, on a log scale."""
    q = queues[queues["acked"] > 0].sort_values("queue")
    fig, ax = plt.subplots(figsize=(8, 0.55 * max(len(q), 1) + 1.4))
    y = np.arange(len(q))
    for k, (column, label, colour) in enumerate((
            ("wait_p50_ms", "p50", "#9ECAE9"), ("wait_p90_ms", "p90", "#4C78A8"),
            ("wait_p99_ms", "p99", "#1F3A5F"))):
        values = q[column].to_numpy(dtype=float)
        ax.barh(y + (k - 1) * 0.26, np.maximum(values, 1), height=0.26, label=label, color=colour)
        for yy, v in zip(y, values):
            ax.text(max(v, 1), yy + (k - 1) * 0.26, " " + human_ms(v), va="center", fontsize=8)
    ax.set_yticks(y, q["queue"])
    values = q[["wait_p50_ms", "wait_p99_ms"]].to_numpy(dtype=float)
    if len(q) and np.nanmax(values) > 50 * max(np.nanmin(values), 1):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.set_xlim(0, np.nanmax(values) * 1.2 if len(q) else 1)
    ax.xaxis.set_major_formatter(FuncFormatter(human_ms))
    ax.set_title("Time in queue (publish to ack), percentiles")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", visible=False)
    return fig


def chart_retries(retries):
    """How many deliveries messages needed: retry count histogram, by status."""
    r = retries.groupby(["retry", "status"])["messages"].sum().unstack(fill_value=0).sort_index()
    statuses = [s for s in ("done", "queued", "error") if s in r.columns]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    x = np.arange(len(r))
    width = 0.8 / max(len(statuses), 1)
    for k, status in enumerate(statuses):
        offset = (k - (len(statuses) - 1) / 2) * width
        values = r[status].to_numpy()
        ax.bar(x + offset, np.where(values > 0, values, np.nan), width=width, label=status,
               color=STATUS_COLOURS[status])
        for xx, v in zip(x, values):
            if v:
                ax.text(xx + offset, v, human_count(v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [str(i) for i in r.index])
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(human_count))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("retries (deliveries that were not acked)")
    ax.set_ylabel("messages")
    ax.set_title("Retries, by status (log scale)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def chart_dead_letters(dead, queues):
    """Dead letters and expiries per queue, by the door of the last consumer."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.45 * max(len(queues), 1) + 1.6),
                                      sharey=True)
    names = sorted(queues["queue"].fillna("(no queue)"))
    y = np.arange(len(names))
    start = np.zeros(len(names))
    if len(dead):
        by_door = dead.assign(consumer=dead["consumer"].fillna("unknown")).pivot_table(
            index="queue", columns="consumer", values="messages", aggfunc="sum", fill_value=0)
        doors = [d for d in DOOR_COLOURS if d in by_door.columns]
        for door in doors:
            values = np.array([by_door[door].get(n, 0) for n in names], dtype=float)
            left.barh(y, values, left=start, label=door, color=DOOR_COLOURS[door], height=0.6)
            start += values
        left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(doors), fontsize=8)
    left.set_yticks(y, names)
    left.set_title("Dead letters, by last consumer's door")
    indexed = queues.set_index(queues["queue"].fillna("(no queue)"))
    expired = [indexed["expired"].get(n, 0) for n in names]
    age = [indexed["backlog_age_s"].get(n) for n in names]
    right.barh(y, [a if a == a and a is not None else 0 for a in age], color="#F58518", height=0.6)
    for yy, (a, n) in enumerate(zip(age, names)):
        waiting = indexed["queued"].get(n, 0)
        note = f" {human_ms(a * 1000)} · {human_count(waiting)} waiting · {human_count(expired[yy])} expired" \
            if a == a and a is not None else f" nothing waiting · {human_count(expired[yy])} expired"
        right.text(a if a == a and a is not None else 0, yy, note, va="center", fontsize=8)
    right.set_title("Backlog: age of the oldest waiting message")
    right.xaxis.set_major_locator(MaxNLocator(4))
    right.xaxis.set_major_formatter(FuncFormatter(lambda s, _: human_ms(s * 1000)))
    right.set_xlim(0, max([a for a in age if a == a and a is not None] or [1]) * 2.2)
    for ax in (left, right):
        ax.grid(axis="y", visible=False)
    return fig


def _table(frame, columns, formats=None, limit=30):
    formats = formats or {}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    rows = []
    for record in frame.head(limit).to_dict("records"):
        cells = []
        for c in columns:
            value = record.get(c)
            text = formats[c](value) if c in formats else ("–" if value is None else str(value))
            cells.append(f"<td>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p class=note>{len(frame) - limit} more rows in the Parquet table.</p>" \
        if len(frame) > limit else ""
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}"


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#222;padding:0 1rem}
h1{margin-bottom:.2rem}.sub{color:#666;margin-top:0}
.cards{display:flex;flex-wrap:wrap;gap:.8rem;margin:1.2rem 0}
.card{background:#f4f6f9;border-radius:8px;padding:.7rem 1rem;min-width:130px}
.card b{display:block;font-size:1.5rem}.card span{color:#555;font-size:.85rem}
figure{margin:1.5rem 0}figure img{max-width:100%}figcaption{color:#555;font-size:.9rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
td,th{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:right}
th{background:#f4f6f9}td:first-child,th:first-child{text-align:left}.note{color:#777;font-size:.8rem}
"""


def write_page(path, frames, facts, sources, charts_dir=None):
    """Render the charts and write the page (and the PNGs into `charts_dir`)."""
    _style()
    queues = frames["queues"]
    charts = [
        ("queues", chart_queues(queues),
         "Every message the journals hold, by queue: done (acked), still queued, or failed "
         "(dead-lettered, expired or removed). Labels: messages · bytes."),
        ("throughput", chart_throughput(frames["throughput"], facts["unit"]),
         "Messages published per time bucket, stacked by queue; the dashed line is how many "
         "were settled (acked, dead-lettered, expired) in the same bucket."),
        ("flow", chart_flow(frames["flow"]),
         "Which door each message came in by (rows) and which door's consumer settled it "
         "(columns); the last columns are messages still waiting or settled by the broker."),
        ("time_in_queue", chart_time_in_queue(queues),
         "How long acked messages waited between publish and ack."),
        ("retries", chart_retries(frames["retries"]),
         "How many deliveries were not acked before the final outcome (log scale)."),
        ("dead_letters", chart_dead_letters(frames["dead_letters"], queues),
         "Left: dead letters per queue, by the door of the consumer that rejected them last. "
         f"Right: how old the oldest waiting message is, as of {facts['as_of']:%Y-%m-%d %H:%M:%S} UTC."
         if facts["as_of"] else "No messages."),
    ]
    figures = []
    if charts_dir:
        os.makedirs(charts_dir, exist_ok=True)
    for name, fig, caption in charts:
        png = _png(fig)
        if charts_dir:
            with open(os.path.join(charts_dir, f"{name}.png"), "wb") as f:
                f.write(png)
        data = base64.b64encode(png).decode()
        figures.append(f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    total = int(queues["messages"].sum()) if len(queues) else 0
    cards = [
        (human_count(total), "messages"),
        (human_bytes(queues["bytes"].sum() if len(queues) else 0), "of message bodies"),
        (human_count(queues["queued"].sum() if len(queues) else 0), "waiting"),
        (human_count(queues["dead_letters"].sum() if len(queues) else 0), "dead letters"),
        (human_count(queues["expired"].sum() if len(queues) else 0), "expired"),
        (human_count(len(queues)), "queues"),
    ]
    span = ""
    if facts["first"] is not None:
        span = f"{facts['first']:%Y-%m-%d %H:%M:%S} to {facts['last']:%Y-%m-%d %H:%M:%S} UTC"
    ms = {"wait_p50_ms": human_ms, "wait_p90_ms": human_ms, "wait_p99_ms": human_ms,
          "wait_max_ms": human_ms, "bytes": human_bytes,
          "backlog_age_s": lambda s: human_ms(None if s is None or s != s else s * 1000),
          "oldest_queued": lambda t: "–" if t is None or t != t else f"{t:%Y-%m-%d %H:%M:%S}"}
    top_subjects = frames["traffic"].groupby(["queue", "subject"], dropna=False)[
        ["messages", "bytes", "retries"]].sum().reset_index().sort_values("messages", ascending=False)
    dead = frames["dead_letters"].sort_values("messages", ascending=False)
    body = f"""<!doctype html><html><head><meta charset="utf-8">
<title>mqksbridge journal report</title><style>{CSS}</style></head><body>
<h1>What flowed through the broker</h1>
<p class=sub>{html.escape(span)} · {len(sources)} source path(s):
{html.escape(', '.join(map(str, sources)))}<br>generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by mqksbridge-pipeline report</p>
<div class=cards>{''.join(f'<div class=card><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>' for v, k in cards)}</div>
{''.join(figures)}
<h2>Queues</h2>
{_table(queues.sort_values("messages", ascending=False),
        ["queue", "messages", "bytes", "queued", "done", "error", "dead_letters", "expired",
         "retried", "wait_p50_ms", "wait_p90_ms", "wait_p99_ms", "backlog_age_s"], ms)}
<h2>Busiest subjects</h2>
{_table(top_subjects, ["queue", "subject", "messages", "bytes", "retries"], ms, limit=20)}
<h2>Dead letters</h2>
{_table(dead, ["queue", "subject", "origin", "consumer", "messages", "max_retry"], ms, limit=20)}
<p class=note>Every number comes from the Parquet tables beside this page (tables/).</p>
</body></html>"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(body)
