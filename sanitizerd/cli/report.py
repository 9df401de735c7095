"""``sanitizerd report JOB --html OUT.html``, and the HTML page of ``run --report``: a job's findings, with what
its saved stream (``run --save FILE``) says about them, as one self-contained page (sanitizerd/findings/html.py).

The stream is read here, not by the renderer: this floor knows the wire's records, the renderers know findings.
Only what the findings need is kept of it (a window of the block's events around each race, the writers of each
stomped range, the GM allocations) plus counts per block and pipe, so that a kernel of millions of events gives a
page of bounded size.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from sanitizerd import __version__, api
from sanitizerd.api import FindingFilter, SanitizerdError
from sanitizerd.cli.savefile import SaveFileError, read_save
from sanitizerd.findings.html import (
    WINDOW_EVENTS,
    Allocation,
    KernelFacts,
    PipeEvent,
    StreamFacts,
    race_windows,
    render_html,
)
from sanitizerd_protocol import decode_body
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import (
    BLOCK_TYPE_NAMES,
    EventKind,
    Space,
    as_events,
    block_type_name,
    pipe_name,
    space_name,
)

_WHAT = {
    EventKind.READ: "read",
    EventKind.WRITE: "write",
    EventKind.SET_FLAG: "set_flag",
    EventKind.WAIT_FLAG: "wait_flag",
    EventKind.HSET_FLAG: "set_flag",
    EventKind.HWAIT_FLAG: "wait_flag",
    EventKind.PIPE_BARRIER: "pipe_barrier",
}
_BLOCK_TYPES = {name: number for number, name in BLOCK_TYPE_NAMES.items()}
_STOMPED = frozenset({"out_of_bounds"})  # msSanitizer reports a multi-core stomping as "out of bounds ... writing"


def _extent(events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each access's first byte and the end of its last (the strided pattern's hull)."""
    size = events["block_size"].astype(np.uint64)
    last = (events["repeat"].astype(np.uint64) - 1) * events["repeat_stride"] + (
        events["block_num"].astype(np.uint64) - 1
    ) * events["block_stride"]
    start = events["address"]
    end = start + (last + 1) * size
    empty = events["repeat"] == 0
    end[empty] = start[empty]
    return start, end


def _pipe_event(e: np.void) -> PipeEvent:
    kind = int(e["kind"])
    what = _WHAT.get(kind)  # type: ignore[call-overload]
    if what is None:
        try:
            what = EventKind(kind).name.lower()
        except ValueError:
            what = f"event {kind}"
    start, end = _extent(np.asarray([e]))
    sync = what in ("set_flag", "wait_flag")
    return PipeEvent(
        serial=int(e["serial"]),
        pipe=pipe_name(int(e["pipe"])),
        what=what,
        dst_pipe=pipe_name(int(e["dst_pipe"])) if sync else "",
        event_id=int(e["event_id"]) if sync else -1,
        space=space_name(int(e["space"])) if what in ("read", "write") else "",
        address=int(e["address"]),
        size=int(end[0] - start[0]) if what in ("read", "write") else 0,
    )


class _Launch:
    def __init__(self, name: str, allocations: list[Allocation]) -> None:
        self.facts = KernelFacts(name=name, allocations=allocations)
        self.batches: list[np.ndarray] = []


def stream_facts(
    recorded: Iterable[tuple[int, m.Message]], findings: Sequence[Finding]
) -> StreamFacts:
    """What the findings need of a job's recorded messages, as (session, message) in the order sent."""
    wanted: dict[tuple[int, int], list[Finding]] = {}
    for f in findings:
        if f.kernel is not None:
            wanted.setdefault((f.session, f.launch), []).append(f)
    live: dict[int, dict[int, Allocation]] = {}  # session -> address -> allocation
    launches: dict[tuple[int, int], _Launch] = {}
    for session, message in recorded:
        if isinstance(message, m.HostOp) and message.op == "malloc":
            live.setdefault(session, {})[message.address] = Allocation(message.address, message.size, message.serial)
        elif isinstance(message, m.HostOp) and message.op == "free":
            live.get(session, {}).pop(message.address, None)
        elif isinstance(message, m.KernelBegin):
            allocations = sorted(live.get(session, {}).values(), key=lambda a: a.address)
            launches[(session, message.kernel)] = _Launch(message.name, allocations)
        elif isinstance(message, m.Events) and (session, message.kernel) in launches:
            # a copy: the message's view lives only as long as its frame's bytes
            launches[(session, message.kernel)].batches.append(as_events(message.records).copy())
    facts = StreamFacts()
    for key, launch in launches.items():
        events = np.concatenate(launch.batches) if launch.batches else as_events(b"")
        key = _findings_key(key, launch.facts.name, wanted, launches)
        _summarise(launch.facts, events, wanted.get(key, []))
        facts.kernels[key] = launch.facts
    return facts


def _findings_key(
    key: tuple[int, int],
    name: str,
    wanted: dict[tuple[int, int], list[Finding]],
    launches: dict[tuple[int, int], _Launch],
) -> tuple[int, int]:
    """The (session, launch) the findings give a recorded launch. A replayed job's sessions have new ids: where no
    finding names the recorded key, the one launch of the findings with its number and kernel name that names no
    recorded launch is it (a single-session job's always is; a launch several sessions share stays undrawn rather
    than drawn from another session's stream)."""
    if key in wanted:
        return key
    same = [k for k, found in wanted.items() if k[1] == key[1] and found[0].kernel == name and k not in launches]
    return same[0] if len(same) == 1 else key


def _summarise(facts: KernelFacts, events: np.ndarray, findings: Sequence[Finding]) -> None:
    facts.events = int(events.size)
    if events.size == 0:
        return
    # counts per (block type, block, pipe), in one pass over the packed keys
    keys = (events["block_type"].astype(np.uint64) << 32) | (events["block_id"].astype(np.uint64) << 8) | events[
        "pipe"
    ]
    unique, counts = np.unique(keys, return_counts=True)
    for key, n in zip(unique.tolist(), counts.tolist(), strict=True):
        block = (block_type_name(key >> 32), (key >> 8) & 0xFFFF)
        facts.counts.setdefault(block, {})[pipe_name(key & 0xFF)] = n
    for finding in findings:
        for window in race_windows(finding):
            block_type, block, lo, hi = window
            mask = (
                (events["block_type"] == _BLOCK_TYPES.get(block_type, -1))
                & (events["block_id"] == block)
                & (events["serial"] >= lo)
                & (events["serial"] <= hi)
            )
            chosen = events[mask]
            if chosen.size > WINDOW_EVENTS:  # keep those nearest the accesses' serials
                middle = sorted(a.serial for a in finding.accesses)[0]
                order = np.argsort(np.abs(chosen["serial"].astype(np.int64) - middle), kind="stable")
                chosen = chosen[np.sort(order[:WINDOW_EVENTS])]
            facts.windows[window] = [_pipe_event(e) for e in chosen]
        if finding.kind in _STOMPED and finding.space == "GM":
            _writers(facts, events, finding)
        if finding.kind in ("illegal_read", "illegal_write"):
            access = events[(events["serial"] == finding.serial) & (events["address"] == finding.address)]
            if access.size:
                start, end = _extent(access[:1])
                facts.extents[(finding.address, finding.serial)] = (int(start[0]), int(end[0]))


def _writers(facts: KernelFacts, events: np.ndarray, finding: Finding) -> None:
    """Which blocks wrote into the stomped range, and where: the picture of a stomping."""
    lo, hi = finding.address, finding.address + max(finding.size, 1)
    writes = events[(events["kind"] == EventKind.WRITE) & (events["space"] == Space.GM)]
    start, end = _extent(writes)
    hit = (start < hi) & (end > lo)
    by_block: dict[str, tuple[int, int]] = {}
    for e, s, t in zip(writes[hit], start[hit].tolist(), end[hit].tolist(), strict=True):
        label = f"block {block_type_name(int(e['block_type']))} {int(e['block_id'])}"
        old = by_block.get(label)
        by_block[label] = (min(s, old[0]), max(t, old[1])) if old else (s, t)
    facts.writers[(finding.address, finding.size)] = by_block


def saved_facts(path: str | os.PathLike[str], findings: Sequence[Finding]) -> StreamFacts:
    _, recorded = read_save(path)
    return stream_facts(((r.session, decode_body(r.body)) for r in recorded), findings)


def html_page(
    findings: Sequence[Finding], *, title: str, save: str | os.PathLike[str] | None = None
) -> str:
    facts = saved_facts(save, findings) if save else None
    return render_html(findings, title=title, version=__version__, facts=facts)


def report(job: str, *, out: str, socket: str | None, save: str | None, store: str = "") -> int:
    """``sanitizerd report JOB --html OUT``: the job's findings from the daemon (or the fleet store)."""
    try:
        found = api.findings(socket, selected=FindingFilter(job=job), store=store)
    except SanitizerdError as exc:
        print(f"[sanitizerd] ERROR: {exc}", file=sys.stderr)
        return 1
    try:
        page = html_page(found, title=f"job {job}", save=save)
    except (OSError, SaveFileError) as exc:
        print(f"[sanitizerd] ERROR: cannot read {save}: {exc}", file=sys.stderr)
        return 1
    try:
        Path(out).write_text(page, encoding="utf-8")
    except OSError as exc:
        print(f"[sanitizerd] ERROR: cannot write {out}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"[sanitizerd] wrote {out}: {len(found)} finding(s)", file=sys.stderr)
    return 0
