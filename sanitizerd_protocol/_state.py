"""Which messages each side may send in each state. Everything that affects transitions lives here.

The connection moves HANDSHAKE -> READY (once the server's welcome is seen) -> CLOSED. ``error``, ``close``
and ``closed`` end it; after an error the connection stays in ERROR. In READY what the client may send
depends on the role its hello declared.
"""

from __future__ import annotations

import enum

from sanitizerd_protocol import messages as m


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


class State(enum.Enum):
    HANDSHAKE = "handshake"
    READY = "ready"
    CLOSED = "closed"
    ERROR = "error"


PRODUCER_SENDS = frozenset(
    {
        m.DeviceSummary,
        m.Locations,
        m.KernelBegin,
        m.Events,
        m.KernelEnd,
        m.HostOp,
        m.Ipc,
        m.Log,
        m.Signature,
        m.RegionPermission,
        m.GuardWrite,
    }
)
CONTROL_SENDS = frozenset(
    {m.JobStart, m.Watch, m.QueryFindings, m.QuerySessions, m.QueryJobs, m.WaitJob, m.CompatListen}
)

# (sender, state, client role) -> allowed message types; a missing key allows nothing.
ALLOWED: dict[tuple[Role, State, str | None], frozenset[type[m.Message]]] = {
    (Role.CLIENT, State.HANDSHAKE, None): frozenset({m.Hello}),
    (Role.SERVER, State.HANDSHAKE, "producer"): frozenset({m.Welcome, m.Error}),
    (Role.SERVER, State.HANDSHAKE, "control"): frozenset({m.Welcome, m.Error}),
    (Role.CLIENT, State.READY, "producer"): PRODUCER_SENDS | {m.Close},
    (Role.CLIENT, State.READY, "control"): CONTROL_SENDS | {m.Close},
    (Role.SERVER, State.READY, "producer"): frozenset({m.Verdict, m.IpcResult, m.Error, m.Closed}),
    (Role.SERVER, State.READY, "control"): frozenset(
        {m.Findings, m.KernelChecked, m.Recorded, m.Sessions, m.Jobs, m.JobIdle, m.CompatListening, m.Error, m.Closed}
    ),
}

# Messages after which the connection is over.
ENDING = frozenset({m.Error, m.Closed})


def allowed(sender: Role, state: State, client_role: str | None) -> frozenset[type[m.Message]]:
    return ALLOWED.get((sender, state, client_role), frozenset())


def next_state(state: State, message: m.Message) -> State:
    if isinstance(message, m.Error):
        return State.ERROR
    if isinstance(message, m.Closed):
        return State.CLOSED
    if state is State.HANDSHAKE and isinstance(message, m.Welcome):
        return State.READY
    return state
