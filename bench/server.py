"""Run a broker for benchmarks: ours (`mqksbridge`) or the naive baseline.

    python -m bench.server mqksbridge PORT [DOOR]   (DOOR listens on PORT, other doors off)
    python -m bench.server baseline PORT
Prints `ready` once listening.
"""
import sys

from twisted.internet import reactor


def main():
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "baseline":
        from bench.baseline_server import listen
        listen(reactor, port)
    else:
        from mqksbridge.bridge import config
        from mqksbridge.bridge.service import build
        door = sys.argv[3] if len(sys.argv) > 3 else "mqks"
        overrides = {name: {"listen": []} for name, section in config.DEFAULTS.items()
                     if isinstance(section, dict) and "listen" in section}
        overrides[door] = {"listen": [f"tcp:{port}:interface=127.0.0.1"]}
        top = build(config.load(overrides=overrides), reactor)[0]
        top.startService()
    reactor.callWhenRunning(lambda: print("ready", flush=True))
    reactor.run()


if __name__ == "__main__":
    main()
