"""Commands over the admin HTTP API: stats, queues, connections, purge."""
import base64
import json
import os
import urllib.error
import urllib.request
from urllib.parse import quote, urlsplit

DEFAULT_ADMIN = "http://127.0.0.1:15680"


class AdminError(Exception):
    """The admin API answered with an error status (exit 1)."""


class Usage(ValueError):
    """A bad --admin URL (exit 2, before anything connects)."""


def check_url(base):
    """--admin must be http(s)://HOST[:PORT]: anything else is a usage error, named."""
    parts = urlsplit(base)
    example = f"e.g. --admin {DEFAULT_ADMIN}"
    if parts.scheme not in ("http", "https") or not parts.netloc:
        if "://" not in base:
            raise Usage(f"--admin {base!r} is not a URL: write --admin http://{base}")
        raise Usage(f"--admin {base!r}: unknown scheme {parts.scheme!r}, write http:// or "
                    f"https://, {example}")
    try:
        parts.port
    except ValueError:
        raise Usage(f"--admin {base!r}: bad port, {example}") from None


def call(base, path, method="GET", body=None, timeout=10.0):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base.rstrip("/") + path, data=data, method=method)
    token = os.environ.get("MQKSBRIDGE_ADMIN_TOKEN")        # the broker's admin.token
    user = os.environ.get("MQKSBRIDGE_ADMIN_USER")          # or a users-file account
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    elif user:
        secret = f"{user}:{os.environ.get('MQKSBRIDGE_ADMIN_PASSWORD', '')}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(secret).decode())
    if method != "GET":
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        raise AdminError(f"{exc.code}: {message}") from None
    except urllib.error.URLError as exc:
        parts = urlsplit(base)
        where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        reason = getattr(exc.reason, "strerror", None) or exc.reason
        raise ConnectionError(f"cannot reach the admin API at {where} ({base}): {reason}: is "
                              "the broker running, its admin endpoint (admin.listen) there?"
                              ) from None


def table(rows, columns):
    """Plain aligned columns (right-aligned numbers), header first."""
    cells = [[str(c) for c in columns]] + [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = []
    for r in cells:
        lines.append("  ".join(v.rjust(w) if _numeric(v) else v.ljust(w)
                               for v, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def _cell(value):
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items()) or "-"
    return "-" if value is None else str(value)


def _numeric(text):
    return text.replace(".", "", 1).isdigit()


def stats(args, out):
    overview = call(args.admin, "/api/overview", timeout=args.timeout)
    if args.json:
        return print(json.dumps(overview), file=out)
    totals, rates = overview["totals"], overview["rates"]
    print(f"mqksbridge {overview['version']} on {overview['node']}, "
          f"up {overview['uptime']:.0f}s", file=out)
    print(f"{totals['connections']} connections, {totals['queues']} queues, "
          f"{totals['messages_queued']} messages queued, {totals['unacked']} unacked; "
          f"{rates['messages_in']:.1f} in/s, {rates['messages_out']:.1f} out/s", file=out)
    doors = [{"door": d["name"], "connections": d["connections"],
              "in": d["messages_in"], "out": d["messages_out"],
              "in/s": d["rates"]["messages_in"], "out/s": d["rates"]["messages_out"],
              "listening": " ".join(l["bound"] or l["endpoint"] for l in d["listeners"]) or "-"}
             for d in overview["doors"]]
    print(table(doors, ["door", "connections", "in", "out", "in/s", "out/s", "listening"]),
          file=out)
    if overview["flows"]:
        print(table([{"from": f["from"], "to": f["to"], "messages": f["messages"],
                      "rate": f["rate"]} for f in overview["flows"]],
                    ["from", "to", "messages", "rate"]), file=out)


def queues(args, out):
    data = call(args.admin, "/api/queues", timeout=args.timeout)
    if args.json:
        return print(json.dumps(data), file=out)
    rows = [{**q, "publish/s": q["rates"]["publish"], "deliver/s": q["rates"]["deliver"],
             "ack/s": q["rates"]["ack"], "by door": q["consumers_by_door"]}
            for q in data["items"]]
    print(table(rows, ["name", "mode", "depth", "unacked", "consumers", "by door",
                       "publish/s", "deliver/s", "ack/s"]), file=out)


def connections(args, out):
    data = call(args.admin, "/api/connections", timeout=args.timeout)
    if args.json:
        return print(json.dumps(data), file=out)
    rows = [{**c, "client": (c["client"] or {}).get("name") or (c["client"] or {}).get("id")}
            for c in data["items"]]
    print(table(rows, ["id", "door", "peer", "client", "consumers", "unacked",
                       "messages_in", "messages_out", "bytes_in", "bytes_out"]), file=out)


def purge(args, out):
    data = call(args.admin, f"/api/queues/{quote(args.queue, safe='')}/purge", "POST", {},
                timeout=args.timeout)
    if args.json:
        return print(json.dumps(data), file=out)
    print(f"purged {data['purged']} messages from {data['queue']}", file=out)


def cluster(args, out):
    """`cluster status`: the gateway's /api/cluster (its view of RabbitMQ, docs/cluster.md)."""
    data = call(args.admin, "/api/cluster", timeout=args.timeout)
    if args.json:
        return print(json.dumps(data), file=out)
    if data["engine"] != "rabbitmq":
        return print(f"engine {data['engine']}: this broker is not a cluster gateway", file=out)
    where = f"connected to {data['connected']}" if data["connected"] else \
        f"NOT connected ({data['failure'] or 'connecting'})"
    clients = sum(data["clients"].values())
    print(f"gateway {data['gateway']}: {where}; {clients} clients "
          f"({_cell(data['clients'])})", file=out)
    if data["error"]:
        print(f"RabbitMQ management API: {data['error']}", file=out)
        return
    print(f"RabbitMQ nodes (management API {data['management']}):", file=out)
    rows = [{**n, "state": "running" if n["running"] else "DOWN",
             "alarms": ",".join(n["alarms"]) or "-",
             "partitions": ",".join(n["partitions"]) or "-"} for n in data["nodes"]]
    print(table(rows, ["name", "state", "type", "uptime", "alarms", "partitions"]), file=out)
    print("gateways:", file=out)
    print(table(data["gateways"], ["name", "node", "channels", "state"]), file=out)
    print(f"queues (vhost {data['vhost']}, prefix {data['prefix']}):", file=out)
    rows = [{**q, "replicas": f"{q['online']}/{q['replicas']}"} for q in data["queues"]]
    print(table(rows, ["name", "type", "leader", "replicas", "messages", "unacked",
                       "consumers"]), file=out)
