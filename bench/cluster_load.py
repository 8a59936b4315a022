"""Load roles for bench.cluster_bench, each its own OS process.

    python -m bench.cluster_load mqks-pub PORT EVENT N RATE SIZE WINDOW
    python -m bench.cluster_load pika-pub URL QUEUE N RATE SIZE WINDOW
    python -m bench.cluster_load pika-sub URL QUEUE EXPECT PREFETCH

Publishers wait for `go` on stdin and print one JSON line once every message is
confirmed. Every body starts with its send time (`NS-`), so a consumer measures
publish-to-deliver. RATE 0 floods in windows: WINDOW publishes, then wait for their
confirmations (as the gateway confirms to RabbitMQ); RATE > 0 paces the sends and counts
confirmations as they come. The MQKS consumer is bench.mqks_load's (`--latency`).
The pika roles are what a plain AMQP client does: confirm mode, prefetch, ack per message.
"""
import json
import os
import socket
import sys
import threading
import time


def _cpu():
    t = os.times()
    return t.user + t.system


def _body(pad):
    return b"%d-%s" % (time.monotonic_ns(), pad)


def _pace(n, rate, send):
    """send(count) in ticks of 1 ms worth of messages until n are sent."""
    per_tick = max(1, rate // 1000)
    tick, sent, next_at = per_tick / rate, 0, time.monotonic()
    while sent < n:
        k = min(per_tick, n - sent)
        send(sent, k)
        sent += k
        next_at += tick
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def mqks_pub(port, event, n, rate, size, window):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pad = b"x" * max(0, size - 20)
    line = b"m%d publish --confirm " + event.encode() + b" %s\n"
    confirmed = [0]
    done = threading.Event()

    def read():
        tail = b""
        while confirmed[0] < n:
            data = sock.recv(1 << 20)
            if not data:
                break
            data = tail + data
            cut = data.rfind(b"\n") + 1
            confirmed[0] += data.count(b" ok \n", 0, cut)
            tail = data[cut:]
            done.set()
        done.set()

    sys.stdin.readline()
    cpu0, start = _cpu(), time.monotonic_ns()
    threading.Thread(target=read, daemon=True).start()
    if rate == 0:
        for base in range(0, n, window):
            done.clear()
            upto = min(n, base + window)
            sock.sendall(b"".join(line % (i, _body(pad)) for i in range(base, upto)))
            while confirmed[0] < upto:
                done.wait(30)
                done.clear()
    else:
        _pace(n, rate, lambda s, k: sock.sendall(
            b"".join(line % (s + j, _body(pad)) for j in range(k))))
        while confirmed[0] < n and done.wait(60):
            done.clear()
    print(json.dumps({"start_ns": start, "end_ns": time.monotonic_ns(),
                      "cpu_s": _cpu() - cpu0, "confirmed": confirmed[0]}), flush=True)


def pika_pub(url, queue, n, rate, size, window):
    """SelectConnection (pika's asynchronous API): BlockingConnection's confirm mode waits
    for each publish's ack, which no fast client does."""
    import pika
    pad = b"x" * max(0, size - 20)
    state = {"sent": 0, "acked": 0, "start": 0, "cpu0": 0.0}
    connection = None

    def finish():
        print(json.dumps({"start_ns": state["start"], "end_ns": time.monotonic_ns(),
                          "cpu_s": _cpu() - state["cpu0"], "confirmed": state["acked"]}),
              flush=True)
        connection.close()

    def publish(channel, k):
        for _ in range(k):
            channel.basic_publish("", queue, _body(pad))
        state["sent"] += k

    def on_confirm(channel, frame):
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            raise SystemExit("RabbitMQ refused a publish")
        state["acked"] = method.delivery_tag if method.multiple else state["acked"] + 1
        if state["acked"] >= n:
            finish()
        elif rate == 0 and state["acked"] == state["sent"]:
            publish(channel, min(window, n - state["sent"]))

    def paced(channel):
        k = min(max(1, rate // 1000), n - state["sent"])
        publish(channel, k)
        state["next"] += k / rate
        if state["sent"] < n:
            connection.ioloop.call_later(max(0.0, state["next"] - time.monotonic()),
                                         lambda: paced(channel))

    def on_selected(channel):
        sys.stdin.readline()
        state["start"], state["cpu0"] = time.monotonic_ns(), _cpu()
        if rate == 0:
            publish(channel, min(window, n))
        else:
            state["next"] = time.monotonic()
            paced(channel)

    def on_channel(channel):
        channel.confirm_delivery(lambda frame: on_confirm(channel, frame),
                                 callback=lambda _: on_selected(channel))

    connection = pika.SelectConnection(
        pika.URLParameters(url),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_close_callback=lambda c, _reason: c.ioloop.stop())
    connection.ioloop.start()


def pika_sub(url, queue, expect, prefetch):
    import pika
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    state = {"count": 0, "first": None, "lat": []}

    def on_message(ch, method, _properties, body):
        now = time.monotonic_ns()
        if state["first"] is None:
            state["first"] = now
        state["lat"].append(now - int(body.split(b"-", 1)[0]))
        ch.basic_ack(method.delivery_tag)
        state["count"] += 1
        if state["count"] >= expect:
            ch.stop_consuming()

    channel.basic_consume(queue, on_message)
    print("ready", flush=True)
    cpu0 = _cpu()
    channel.start_consuming()
    last = time.monotonic_ns()
    lat = sorted(state["lat"])
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000
    print(json.dumps({"count": state["count"], "first_ns": state["first"], "last_ns": last,
                      "cpu_s": _cpu() - cpu0, "p50_us": pick(0.5), "p99_us": pick(0.99),
                      "max_us": lat[-1] / 1000}), flush=True)
    connection.close()


def main(argv):
    role, args = argv[0], argv[1:]
    if role == "mqks-pub":
        mqks_pub(int(args[0]), args[1], *map(int, args[2:6]))
    elif role == "pika-pub":
        pika_pub(args[0], args[1], *map(int, args[2:6]))
    elif role == "pika-sub":
        pika_sub(args[0], args[1], int(args[2]), int(args[3]))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main(sys.argv[1:])
