"""Every cross-door conversion lives in this package, one module per door.

Each module turns a core Message into that door's delivery and that door's publish into
a core Message. Same-door traffic never comes here: it relays the raw wire form kept in
Message.raw. docs/mapping.md is the table these modules implement.
"""
