"""The Twino door: TMQP/2.0 over TCP. `build` is the door's one entry point."""
from mqksbridge.bridge.twino.door import build

__all__ = ["build"]
