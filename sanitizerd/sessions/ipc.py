"""IPC shared memory across the sessions of one job (reference §1.1).

msSanitizer sees one program, so its name table is process-wide. A job here is several processes (the ranks
of a training job), each its own session, so the table is the job's: the process that exports a buffer and
the process that maps it can be different clients. A mapping becomes an allocation of the importing session
(source ``bypass``, desc ``ipc_memory``), so its accesses are checked against the exported size there.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Export:
    session: int
    address: int
    size: int


@dataclass(slots=True)
class IpcTable:
    exports: dict[str, Export] = field(default_factory=dict)
    # name -> session -> addresses where that session mapped it
    mappings: dict[str, dict[int, set[int]]] = field(default_factory=dict)

    def set(self, name: str, session: int, address: int, size: int) -> str:
        """Export a buffer; the reason it was refused, or ""."""
        if name in self.exports:
            return f"name {name!r} is already exported"
        self.exports[name] = Export(session, address, size)
        return ""

    def map(self, name: str, session: int, address: int) -> tuple[Export | None, str]:
        export = self.exports.get(name)
        if export is None:
            return None, f"no export named {name!r}"
        if any(address in by_session.get(session, ()) for by_session in self.mappings.values()):
            return None, f"address {address:#x} is already mapped"
        self.mappings.setdefault(name, {}).setdefault(session, set()).add(address)
        return export, ""

    def unmap(self, session: int, address: int) -> str:
        for by_session in self.mappings.values():
            addresses = by_session.get(session)
            if addresses and address in addresses:
                addresses.discard(address)
                return ""
        return f"address {address:#x} is not mapped"

    def destroy(self, name: str) -> tuple[dict[int, set[int]] | None, str]:
        """End an export; the mappings it ended, by session, or why not."""
        if self.exports.pop(name, None) is None:
            return None, f"no export named {name!r}"
        return self.mappings.pop(name, {}), ""

    def session_ended(self, session: int) -> None:
        for by_session in self.mappings.values():
            by_session.pop(session, None)
