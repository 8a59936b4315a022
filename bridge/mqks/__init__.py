"""The MQKS door: text lines over TCP. `build` is the door's one entry point."""
from mqksbridge.bridge.mqks.door import build

__all__ = ["build"]
