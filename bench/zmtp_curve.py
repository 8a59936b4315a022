"""What CURVE costs the Malamute door per message, in process: the same Malamute-shaped
two-frame messages (a command frame and a body) framed for a NULL connection and sealed
for a CURVE one (out), and parsed by each (in), in interleaved rounds; prints per-message
times and the CURVE/NULL ratios.

    python -m bench.zmtp_curve [--messages 20000] [--size 100] [--rounds 5]
"""
import argparse
import statistics
import time

from nacl.bindings import (crypto_box_beforenm, crypto_box_easy, crypto_box_easy_afternm,
                           crypto_box_keypair, crypto_box_open_easy)

from mqksbridge.protocols.zmtp import codec
from mqksbridge.protocols.zmtp.curve import CURVE_GREETING, CurveConnection, Reply


def curve_pair():
    """A server CurveConnection past its handshake and the client's box key."""
    server_public, server_secret = crypto_box_keypair()
    public, secret = crypto_box_keypair()
    tpublic, tsecret = crypto_box_keypair()
    server = CurveConnection(server_secret)
    hello = crypto_box_easy(bytes(64), b"CurveZMQHELLO---" + (1).to_bytes(8, "big"),
                            server_public, tsecret)
    server.receive_data(CURVE_GREETING + codec.command(
        b"HELLO", b"\x01\x00" + bytes(72) + tpublic + (1).to_bytes(8, "big") + hello))
    welcome = next(e for e in server.events if isinstance(e, Reply)).data
    server.events.clear()
    data = welcome[2:][8:]
    plain = crypto_box_open_easy(data[16:], b"WELCOME-" + data[:16], server_public, tsecret)
    stransient, cookie = plain[:32], plain[32:]
    k = crypto_box_beforenm(stransient, tsecret)
    vouch = bytes(16) + crypto_box_easy(tpublic + server_public, b"VOUCH---" + bytes(16),
                                        stransient, secret)
    props = codec.metadata([(b"Socket-Type", b"DEALER"), (b"Identity", b"")])
    nonce = (2).to_bytes(8, "big")
    server.receive_data(codec.command(b"INITIATE", cookie + nonce + crypto_box_easy_afternm(
        public + vouch + props, b"CurveZMQINITIATE" + nonce, k)))
    server.ready_reply()
    server.events.clear()
    return server, k


def client_wire(k, messages, first_nonce=3):
    out = []
    n = first_nonce
    for head, body in messages:
        for flags, part in ((b"\x01", head), (b"\x00", body)):
            nonce = n.to_bytes(8, "big")
            n += 1
            out.append(codec.frame(b"\x07MESSAGE" + nonce + crypto_box_easy_afternm(
                flags + part, b"CurveZMQMESSAGEC" + nonce, k)))
    return b"".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    messages = [(b"\x00\x15\xaa\xa8\x0aMAILBOX-DELIVER", bytes(args.size))] * args.messages
    null_wire = b"".join(codec.pair(h, b) for h, b in messages)
    times = {key: [] for key in ("null out", "curve out", "null in", "curve in")}
    for _ in range(args.rounds):
        server, k = curve_pair()
        started = time.perf_counter()
        for head, body in messages:
            codec.pair(head, body)
        times["null out"].append(time.perf_counter() - started)
        started = time.perf_counter()
        for head, body in messages:
            server.seal(codec.pair(head, body))
        times["curve out"].append(time.perf_counter() - started)

        null = codec.Connection("ROUTER")
        null.state, null._need = "traffic", 2
        started = time.perf_counter()
        got = null.receive_data(null_wire)
        times["null in"].append(time.perf_counter() - started)
        assert len(got) == args.messages
        wire = client_wire(k, messages)
        started = time.perf_counter()
        got = server.receive_data(wire)
        times["curve in"].append(time.perf_counter() - started)
        assert len(got) == args.messages
    per = {key: statistics.median(values) / args.messages * 1e6 for key, values in times.items()}
    for key, value in per.items():
        print(f"{key:10} {value:8.2f} us/message")
    print(f"curve/null out {per['curve out'] / per['null out']:.1f}x, "
          f"in {per['curve in'] / per['null in']:.1f}x "
          f"({args.messages} messages of {args.size} bytes, median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
