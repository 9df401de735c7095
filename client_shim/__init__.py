"""What runs inside user processes: the Python client of sanitizerd.

from client_shim import connect, accesses, EventKind, Space
client = connect()                      # uses SANITIZERD_SOCKET / SANITIZERD_JOB from `sanitizerd run`
client.device_summary("910B1", block_num=8)
k = client.kernel_begin("add_custom", block_dim=8)
client.events(k, accesses(EventKind.READ, Space.GM, address, 256, block_id=0))
client.kernel_end(k); client.wait_kernel(k)
client.close()
"""

from client_shim.attach import connect
from client_shim.client import Client
from client_shim.events import (
    EVENT_DTYPE,
    BlockType,
    EventKind,
    Pipe,
    Register,
    Space,
    accesses,
    make_events,
    register_writes,
    syncs,
)
from client_shim.transport import ClientError

__all__ = [
    "EVENT_DTYPE",
    "BlockType",
    "Client",
    "ClientError",
    "EventKind",
    "Pipe",
    "Register",
    "Space",
    "accesses",
    "connect",
    "make_events",
    "register_writes",
    "syncs",
]
