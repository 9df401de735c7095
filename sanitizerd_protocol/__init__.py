"""Wire protocol v1, sans-I/O: frames and typed messages, no sockets (docs/protocol.md)."""

from sanitizerd_protocol._state import Role, State
from sanitizerd_protocol.connection import (
    CONNECTION_CLOSED,
    DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA,
    Connection,
    decode_body,
)
from sanitizerd_protocol.errors import REASONS, LocalProtocolError, ProtocolError, RemoteProtocolError
from sanitizerd_protocol.messages import PROTOCOL_VERSION
from sanitizerd_protocol.records import EVENT_DTYPE, as_events, empty_events

__all__ = [
    "CONNECTION_CLOSED",
    "DEFAULT_MAX_FRAME_SIZE",
    "EVENT_DTYPE",
    "NEED_DATA",
    "PROTOCOL_VERSION",
    "REASONS",
    "Connection",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "Role",
    "State",
    "as_events",
    "decode_body",
    "empty_events",
]
