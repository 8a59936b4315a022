"""Tools for hostile clients against a broker subprocess: raw sockets that send and never
read, the broker's resident memory, and the admin API's view of one connection."""
import json
import socket
import time
import urllib.request

MB = 1 << 20


def rss(pid):
    """Resident memory of a process, in bytes (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def api(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return json.loads(answer.read())


def connection_of(admin_port, sock):
    """The admin API's Connection for our socket (matched by its local address)."""
    host, port = sock.getsockname()[:2]
    for conn in api(admin_port, "/api/connections?limit=100000")["items"]:
        if conn["peer"] == f"{host}:{port}":
            return conn
    return None


def deaf_socket(port):
    """A connection that will not read: a small receive buffer, set before connecting."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    return sock


def flood(sock, data, stop, deadline=30.0):
    """Send `data` without ever reading, as far as the broker takes it, until `stop()` is
    true (checked whenever the socket is full) or all is sent; returns the bytes sent."""
    sock.setblocking(False)
    view, sent = memoryview(data), 0
    end = time.monotonic() + deadline
    while sent < len(data):
        try:
            sent += sock.send(view[sent:sent + 65536])
            continue
        except BlockingIOError:
            pass
        if stop():
            break
        if time.monotonic() > end:
            raise AssertionError(f"the broker neither took {len(data)} bytes nor stopped "
                                 f"reading ({sent} sent)")
        time.sleep(0.01)                 # the socket is full: the broker is reading or not
    return sent


