"""What another sans-I/O front door builds on: the receive buffer and the receiving end that feeds it, the
connection states, and the two answers of ``next_event`` that are not messages.

msSanitizer's door (``sanitizerd.compat.packets.connection``) frames another wire but hands the same native messages
to the same sessions, so it answers ``NEED_DATA``/``CONNECTION_CLOSED`` and keeps ``State`` exactly as
``protocol.Connection`` does: the I/O layer drives both doors with one loop. These are the names it may use; the
modules behind them stay private.
"""

from __future__ import annotations

from typing import TypeAlias

from sanitizerd_protocol._buffer import ReceiveBuffer, ReceivingEnd
from sanitizerd_protocol._state import State
from sanitizerd_protocol.connection import CONNECTION_CLOSED, NEED_DATA, _Sentinel

# The type of NEED_DATA and CONNECTION_CLOSED, for a door's ``next_event`` annotation.
Sentinel: TypeAlias = _Sentinel

__all__ = ["CONNECTION_CLOSED", "NEED_DATA", "ReceiveBuffer", "ReceivingEnd", "Sentinel", "State"]
