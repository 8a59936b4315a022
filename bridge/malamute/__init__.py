"""The Malamute door: ZPROTO over our own ZeroMQ ROUTER. `build` is its one entry point;
configuration checks its keys with `to_twisted` (a ZeroMQ endpoint as Twisted's) and
`load_curve_key` (raises CurveKeyError)."""
from mqksbridge.bridge.malamute.curve_keys import CurveKeyError, load as load_curve_key
from mqksbridge.bridge.malamute.door import build
from mqksbridge.bridge.malamute.endpoints import to_twisted

__all__ = ["build", "to_twisted", "load_curve_key", "CurveKeyError"]
