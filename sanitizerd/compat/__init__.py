"""msSanitizer's own front door: its hook and injection libraries' socket protocol, turned into sanitizerd sessions.

Sans-I/O like ``sanitizerd_protocol``: bytes in, the native protocol's typed messages out. See
docs/mssanitizer-compat.md for what is accepted, the layouts, and how each record type is converted.
"""
