"""twistd drop-in: `twistd -n mqksbridge`. Options and makeService live in
mqksbridge.bridge.service."""
from twisted.application.service import ServiceMaker

mqksbridge = ServiceMaker("mqksbridge", "mqksbridge.bridge.service",
                          "One broker, four doors: MQKS, Malamute, Twino, TextQueue",
                          "mqksbridge")
