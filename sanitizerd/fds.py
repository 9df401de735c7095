"""File descriptors: every client connection holds one, so the connection limits must fit the process's fd limit.

At start the daemon raises its soft RLIMIT_NOFILE to the hard limit (a shell's default soft limit is 1024; the
systemd unit sets ``LimitNOFILE=``), then lowers ``max_connections`` and ``max_sessions`` to what still fits, with
a warning, rather than refusing to start: a daemon that serves fewer sessions is better than none, and a host
running out of fds in ``accept`` is what the limits are there to prevent.
"""

from __future__ import annotations

import dataclasses
import resource

from sanitizerd.sessions.hub import Limits

# fds the daemon needs besides client connections: stdio, the listener, the event loop's own, the store (database,
# WAL, shared memory, its thread), the metrics server and its clients, signal and notify sockets; with room to spare.
FD_RESERVE = 64
# Connections kept for control clients (queries, `run`'s watcher) and handshakes when every session is taken.
CONTROL_HEADROOM = 64


def raise_nofile() -> int:
    """Raise the soft fd limit to the hard one (as far as the kernel allows); the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):  # above fs.nr_open: keep what we have
            pass
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft


def fit(limits: Limits, nofile: int) -> tuple[Limits, list[str]]:
    """``limits`` lowered so that every connection they admit has an fd under ``nofile``; and why, if they were."""
    notes: list[str] = []
    budget = max(nofile - FD_RESERVE, 1)
    connections = limits.max_connections
    if connections > budget:
        notes.append(
            f"max_connections lowered from {connections} to {budget}: the fd limit is {nofile} "
            f"({FD_RESERVE} kept for the daemon itself); raise LimitNOFILE= (or ulimit -n) to serve more"
        )
        connections = budget
    sessions = limits.max_sessions
    room = max(connections - CONTROL_HEADROOM, 1)
    if sessions > room:
        notes.append(
            f"max_sessions lowered from {sessions} to {room}: {connections} connections allowed, "
            f"{CONTROL_HEADROOM} kept for control clients and handshakes"
        )
        sessions = room
    per_uid = min(limits.max_connections_per_uid, connections)
    fitted = dataclasses.replace(
        limits, max_connections=connections, max_sessions=sessions, max_connections_per_uid=per_uid
    )
    return fitted, notes
