"""Open client connections, per uid and in all: each costs a file descriptor, so each is admitted against a limit
before anything of it is read."""

from __future__ import annotations

from sanitizerd.sessions.hub import Limits


class Connections:
    def __init__(self) -> None:
        self.by_uid: dict[int, int] = {}
        self.total = 0

    def admit(self, uid: int, limits: Limits) -> str | None:
        """Count a new connection of ``uid`` in, or say why not (it is then not counted)."""
        if self.total >= limits.max_connections:
            return f"the daemon has its limit of {limits.max_connections} open connections"
        mine = self.by_uid.get(uid, 0)
        if mine >= limits.max_connections_per_uid:
            return f"uid {uid} has its limit of {limits.max_connections_per_uid} open connections"
        self.by_uid[uid] = mine + 1
        self.total += 1
        return None

    def release(self, uid: int) -> None:
        left = self.by_uid[uid] - 1
        if left:
            self.by_uid[uid] = left
        else:
            del self.by_uid[uid]
        self.total -= 1
