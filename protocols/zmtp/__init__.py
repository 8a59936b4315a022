"""ZMTP 3.1, the ZeroMQ wire protocol, sans-IO (the Malamute door's transport)."""
