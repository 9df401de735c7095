"""IPC shared memory across the sessions of one job (reference §1.1).

msSanitizer sees one program, so its name table is process-wide. A job here is several processes (the ranks
of a training job), each its own session, so the table is the job's: the process that exports a buffer and
the process that maps it can be different clients. A mapping becomes an allocation of the importing session
(source ``bypass``, desc ``ipc_memory``), so its accesses are checked against the exported size there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sanitizerd_protocol.messages import ADDRESS_END_MAX


@dataclass(frozen=True, slots=True)
class Export:
    session: int
    address: int
    size: int


# A job's IPC names and mappings are bounded: a client cannot grow its job's table without end. Past a bound the
# request is refused (``ipc_result`` with ok false and the reason), nothing changes, and the session goes on.
MAX_EXPORTS = 4096
MAX_MAPPINGS = 65536


@dataclass(slots=True)
class IpcTable:
    exports: dict[str, Export] = field(default_factory=dict)
    # name -> session -> addresses where that session mapped it
    mappings: dict[str, dict[int, set[int]]] = field(default_factory=dict)
    # (session, address) -> the name mapped there: one lookup, not a walk over every name
    mapped_at: dict[tuple[int, int], str] = field(default_factory=dict)

    def set(self, name: str, session: int, address: int, size: int) -> str:
        """Export a buffer; the reason it was refused, or ""."""
        if address + size > ADDRESS_END_MAX:
            return f"[{address:#x}, +{size}) passes the end of the address space"
        if name in self.exports:
            return f"name {name!r} is already exported"
        if len(self.exports) >= MAX_EXPORTS:
            return f"the job has its limit of {MAX_EXPORTS} exported names"
        self.exports[name] = Export(session, address, size)
        return ""

    def map(self, name: str, session: int, address: int) -> tuple[Export | None, str]:
        export = self.exports.get(name)
        if export is None:
            return None, f"no export named {name!r}"
        if address + export.size > ADDRESS_END_MAX:
            return None, f"[{address:#x}, +{export.size}) passes the end of the address space"
        if (session, address) in self.mapped_at:
            return None, f"address {address:#x} is already mapped"
        if len(self.mapped_at) >= MAX_MAPPINGS:
            return None, f"the job has its limit of {MAX_MAPPINGS} mappings"
        self.mappings.setdefault(name, {}).setdefault(session, set()).add(address)
        self.mapped_at[session, address] = name
        return export, ""

    def unmap(self, session: int, address: int) -> str:
        name = self.mapped_at.pop((session, address), None)
        if name is None:
            return f"address {address:#x} is not mapped"
        self.mappings[name][session].discard(address)
        return ""

    def destroy(self, name: str) -> tuple[dict[int, set[int]] | None, str]:
        """End an export; the mappings it ended, by session, or why not."""
        if self.exports.pop(name, None) is None:
            return None, f"no export named {name!r}"
        ended = self.mappings.pop(name, {})
        for session, addresses in ended.items():
            for address in addresses:
                self.mapped_at.pop((session, address), None)
        return ended, ""

    def session_ended(self, session: int) -> None:
        for by_session in self.mappings.values():
            for address in by_session.pop(session, ()):
                self.mapped_at.pop((session, address), None)
