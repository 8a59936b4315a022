"""The TextQueue door: inbox and outbox files. `build` is the door's one entry point."""
from mqksbridge.bridge.textqueue.door import build

__all__ = ["build"]
