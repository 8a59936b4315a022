"""The Malamute door: ZPROTO over our own ZeroMQ ROUTER. `build` is its one entry point."""
from mqksbridge.bridge.malamute.door import build

__all__ = ["build"]
