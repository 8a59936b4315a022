"""twistd drop-in: `twistd -n mqksbridge`. Options and makeService live in
mqksbridge.bridge.service."""
from twisted.application.service import ServiceMaker

mqksbridge = ServiceMaker("mqksbridge", "mqksbridge.bridge.service",
                          "One broker, four doors: MQKS, Malamute, Twino, TextQueue",
                          "mqksbridge")

# The `mtls:` listening endpoint (Twisted's `ssl:` plus client certificates: bridge.tls).
from mqksbridge.bridge.tls import parser as mqksbridge_tls  # noqa: E402
