"""mqksbridge: one message broker with four doors (MQKS, Malamute, Twino, TextQueue).

The repository keeps its top-level directories (core/, protocols/, bridge/); this
package's subpackages are links to them, so every install (wheel, and each editable
mode) puts exactly `mqksbridge` and the twistd drop-in on the path.
"""
