"""Per-kernel folding of kernel-side errors the way msSanitizer does it (reference §2.1, §6.5).

Errors at the same site (kind, space, address, size, pc, location) are one finding whatever block or loop
iteration hit them; the blocks are kept (printed ``aiv(0-1,3)``) and the smallest serial number is shown.
Rows are folded with numpy as they arrive, so memory is bounded by distinct (site, block) pairs, and those by
MAX_SITE_ROWS per kernel: a kernel whose errors land at more sites than that (a client can make every event an error
at its own address) keeps the earliest by serial number, and one more finding says how many were not reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sanitizerd.detectors.base import SessionContext
from sanitizerd_protocol.model import Finding, LocalTensor
from sanitizerd_protocol.records import block_type_name, space_name

SITE_DTYPE = np.dtype(
    [
        ("kind", "u1"),
        ("space", "u1"),
        ("address", "<u8"),
        ("size", "<u8"),
        ("pc", "<u8"),
        ("location", "<u4"),
        ("block_type", "u1"),
        ("block_id", "<u2"),
        ("serial", "<u8"),
        ("count", "<u8"),
        # The local tensor that judged an illegal on-chip access (size 0: the whole space did).
        ("tensor_address", "<u8"),
        ("tensor_size", "<u8"),
        ("tensor_serial", "<u8"),
        ("tensor_location", "<u4"),
        ("thread", "<u2"),  # the SIMT thread (linear index + 1) of the site's first occurrence; 0: none
    ]
)
_SITE_KEY = ("kind", "space", "address", "size", "pc", "location")
_ROW_KEY = (*_SITE_KEY, "block_type", "block_id")
_COMPACT_AT = 1 << 16
MAX_SITE_ROWS = 1 << 16  # distinct (site, block) pairs kept per kernel: at most that many findings
# Findings of one kernel launch a detector reports per check (racecheck's races and deadlocks, synccheck's
# unpaired and redundant flags, registercheck's registers): a client names every site (its pcs and locations), so
# each could make one per event; the earliest by serial number are kept and one internal_error says the rest.
MAX_KERNEL_FINDINGS = MAX_SITE_ROWS


@dataclass(slots=True)
class Site:
    """One folded site: its first row (the key fields), the smallest serial, the occurrences, the blocks."""

    head: np.void
    serial: int
    count: int
    blocks: dict[int, list[int]]  # block type -> sorted block ids


def _key_changes(rows: np.ndarray, fields: tuple[str, ...]) -> np.ndarray:
    change = np.zeros(rows.size, dtype=bool)
    change[0] = True
    for name in fields:
        column = rows[name]
        change[1:] |= column[1:] != column[:-1]
    return change


class SiteLog:
    __slots__ = ("_parts", "_rows", "dropped_occurrences", "dropped_rows")

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._rows = 0
        self.dropped_rows = 0  # (site, block) pairs past MAX_SITE_ROWS since the last drain
        self.dropped_occurrences = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, rows: np.ndarray) -> None:
        if rows.size:
            self._parts.append(rows)
            self._rows += rows.size
            if self._rows >= _COMPACT_AT and len(self._parts) > 1:
                self._compact()

    def _compact(self) -> np.ndarray:
        if not self._parts:
            return np.empty(0, dtype=SITE_DTYPE)
        rows = np.concatenate(self._parts) if len(self._parts) != 1 else self._parts[0]
        if rows.size:
            rows = rows[np.lexsort([rows[name] for name in reversed((*_ROW_KEY, "serial"))])]
            first = np.flatnonzero(_key_changes(rows, _ROW_KEY))
            counts = np.add.reduceat(rows["count"], first)
            rows = rows[first].copy()  # first of each group has the smallest serial
            rows["count"] = counts
            if rows.size > MAX_SITE_ROWS:
                rows = rows[np.argsort(rows["serial"], kind="stable")]
                self.dropped_rows += rows.size - MAX_SITE_ROWS
                self.dropped_occurrences += int(rows["count"][MAX_SITE_ROWS:].sum())
                rows = rows[:MAX_SITE_ROWS]
        self._parts, self._rows = [rows], rows.size
        return rows

    def drain(self) -> list[Site]:
        """Every site seen since the last drain, ordered by serial number."""
        rows = self._compact()
        self._parts, self._rows = [], 0
        return fold(rows, _SITE_KEY)


def fold(rows: np.ndarray, key: tuple[str, ...]) -> list[Site]:
    """Group rows (which have ``block_type``, ``block_id`` and ``serial``, and may have ``count``) by ``key``:
    one Site per distinct key, ordered by serial."""
    return fold_capped(rows, key, None)[0]


def fold_capped(rows: np.ndarray, key: tuple[str, ...], limit: int | None) -> tuple[list[Site], int, int]:
    """``fold``, keeping at most ``limit`` sites (the earliest by serial number), chosen before any Python step
    per site: the sites, and how many sites and occurrences were left out."""
    sites: list[Site] = []
    if not rows.size:
        return sites, 0, 0
    rows = rows[np.lexsort([rows[name] for name in reversed(key)])]
    starts = np.flatnonzero(_key_changes(rows, key))
    bounds = np.append(starts, rows.size)
    counts = rows["count"] if "count" in (rows.dtype.names or ()) else np.ones(rows.size, dtype=np.uint64)
    chosen = np.arange(starts.size)
    left_out = occurrences_left_out = 0
    if limit is not None and starts.size > limit:
        first = np.minimum.reduceat(rows["serial"], starts)
        chosen = np.sort(np.argsort(first, kind="stable")[:limit])
        left_out = starts.size - chosen.size
        occurrences_left_out = int(counts.sum()) - int(np.add.reduceat(counts, starts)[chosen].sum())
    # One Python step per distinct site (not per event): sites are what the user reads.
    for site in chosen.tolist():
        begin, end = int(bounds[site]), int(bounds[site + 1])
        group = rows[begin:end]
        blocks: dict[int, set[int]] = {}
        for block_type, block_id in zip(group["block_type"].tolist(), group["block_id"].tolist(), strict=True):
            blocks.setdefault(block_type, set()).add(block_id)
        sites.append(
            Site(
                head=group[0],
                serial=int(group["serial"].min()),
                count=int(counts[begin:end].sum()),
                blocks={t: sorted(ids) for t, ids in blocks.items()},
            )
        )
    sites.sort(key=lambda site: site.serial)
    return sites, left_out, occurrences_left_out


def left_out_text(detector: str, sites: int, occurrences: int) -> str:
    """What a kernel's report says when ``detector`` left ``sites`` of its findings (``occurrences`` in all) out."""
    return (
        f"{occurrences} {detector} finding(s) at {sites} more site(s) of this kernel were not reported: a kernel's "
        f"report keeps the first {MAX_KERNEL_FINDINGS} sites of each check by serial number"
    )


def site_rows(events: np.ndarray, kind: int | np.ndarray, address: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Site rows for the given events, with the reported address and size."""
    rows = np.empty(events.size, dtype=SITE_DTYPE)
    rows["kind"] = kind
    rows["space"] = events["space"]
    rows["address"] = address
    rows["size"] = size
    rows["pc"] = events["pc"]
    rows["location"] = events["location"]
    rows["block_type"] = events["block_type"]
    rows["block_id"] = events["block_id"]
    rows["serial"] = events["serial"]
    rows["count"] = 1
    rows["tensor_address"] = rows["tensor_size"] = rows["tensor_serial"] = rows["tensor_location"] = 0
    rows["thread"] = events["thread"]
    return rows


def _tensor(context: SessionContext, head: np.void) -> LocalTensor | None:
    if not int(head["tensor_size"]):
        return None
    stack = context.stack(int(head["tensor_location"]))
    return LocalTensor(
        space=space_name(int(head["space"])),
        address=int(head["tensor_address"]),
        size=int(head["tensor_size"]),
        serial=int(head["tensor_serial"]),
        location=stack[0] if stack else None,
    )


def site_findings(
    context: SessionContext, kernel: str | None, log: SiteLog, kinds: dict[int, str],
    thread_of: Callable[[np.void], list[int]] = lambda head: [],
) -> list[Finding]:  # fmt: skip
    """Findings for the memory sites ``log`` folded since its last drain, with ``kinds`` naming each site kind; and
    one more when the kernel's sites went past MAX_SITE_ROWS, saying how many were not reported. ``thread_of``: a
    SIMT site's thread position (x, y, z), from its head row."""
    findings = []
    for site in log.drain():
        head = site.head
        findings.append(
            context.finding(
                kinds[int(head["kind"])],
                kernel=kernel,
                location=int(head["location"]),
                blocks={block_type_name(t): ids for t, ids in site.blocks.items()},
                space=space_name(int(head["space"])),
                address=int(head["address"]),
                size=int(head["size"]),
                serial=site.serial,
                pc=int(head["pc"]),
                count=site.count,
                tensor=_tensor(context, head),
                thread=thread_of(head) if int(head["thread"]) else [],
            )
        )
    if log.dropped_rows:
        findings.append(
            context.finding(
                "internal_error",
                kernel=kernel,
                space="",
                size=log.dropped_occurrences,
                detail=f"{log.dropped_occurrences} error(s) at {log.dropped_rows} more site(s) and block(s) of this "
                f"kernel were not reported: a kernel's report keeps its first {MAX_SITE_ROWS} by serial number",
            )
        )
        log.dropped_rows = log.dropped_occurrences = 0
    return findings
