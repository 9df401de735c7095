"""Who may read what: each session belongs to the uid that connected it (SO_PEERCRED). A control client reads
only its own uid's sessions, jobs and findings, unless it is root or a member of a configured admin group.

Another uid's session or job is not refused: what a client reads is selected by its uid, so naming another's
answers exactly as naming one that does not exist (an empty page, no error). A refusal would tell the client that
the session or job exists; the promise is that it learns nothing. The rules are plain functions, with no I/O.
"""

from __future__ import annotations

import grp
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sanitizerd.sessions.session import Peer
from sanitizerd_protocol.messages import SessionInfo


def peer_groups(peer: Peer) -> frozenset[int]:
    """The peer's primary and supplementary groups (/proc/PID/status; SO_PEERCRED names only the primary)."""
    groups = {peer.gid} if peer.gid >= 0 else set()
    try:
        for line in Path(f"/proc/{peer.pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                groups.update(int(g) for g in line.split()[1:])
    except (OSError, ValueError):
        pass
    return frozenset(groups)


class UnknownGroup(ValueError):
    pass


MAX_GID = (1 << 32) - 2  # (gid_t)-1 means "no group"


def group_id(name: str) -> int:
    """The gid of a group given by name or number; UnknownGroup when there is no such group."""
    if name.isdigit():
        if int(name) > MAX_GID:
            raise UnknownGroup(f"{name} is not a group id (0 to {MAX_GID})")
        return int(name)  # a number need not be in /etc/group: groups may come from a directory service
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise UnknownGroup(f"there is no group named {name!r}") from None


@dataclass(frozen=True, slots=True)
class Access:
    uid: int
    admin: bool

    @classmethod
    def of(cls, peer: Peer, admin_gids: Iterable[int]) -> Access:
        admin = peer.uid == 0 or bool(peer_groups(peer) & frozenset(admin_gids))
        return cls(peer.uid, admin)

    def visible(self, sessions: list[SessionInfo]) -> list[SessionInfo]:
        return sessions if self.admin else [s for s in sessions if s.uid == self.uid]

