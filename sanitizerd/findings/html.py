"""A job's findings as one self-contained HTML page: what a kernel developer draws on paper to fix a race or a
stomping, drawn for them (docs/report.md).

The page carries everything inline (CSS, a few lines of script for the filters, SVG for the pictures): no URL is
fetched when it is viewed, so it opens from ``file://``, from a CI artifact, offline. What the findings alone say
(the table, each stack, the missing order of a race) is always there; what a saved stream adds (the block's pipe
events around each race, the flag pairs, the allocations, which blocks wrote a stomped range) comes in as
:class:`StreamFacts`, gathered by the caller (the renderers know findings, not the wire). Sizes are bounded
whatever the kernel: a window of events per race, a cap on the races drawn and the table's rows, and one overview
table per kernel that counts events per block and pipe instead of drawing them.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from sanitizerd.findings.render import blocks_text, render_text
from sanitizerd_protocol.model import ERROR, Finding, RaceAccess

# The lanes of a block's timeline, in the order the hardware's pipes are usually drawn; a pipe outside them (PIPE_ALL
# of a full barrier, a newer chip's) gets a lane of its own after these when it appears.
LANES: Final = ("PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3", "PIPE_FIX")
MAX_TABLE_ROWS: Final = 5000  # a row is about half a kilobyte: the table stays well under the page's 5 MB budget
TABLE_BUDGET: Final = 3_000_000  # characters of table rows, whatever the rows' stacks: the rest of 5 MB is pictures
MAX_RACES_DRAWN: Final = 100
RACES_BUDGET: Final = 1_200_000  # characters of race timelines; races past it are listed without one
MAX_MAP_ROWS: Final = 32  # allocations drawn per kernel: those the findings touch first
MAX_MAP_FINDINGS: Final = 20  # findings drawn on one kernel's memory map (each is a row of its own)
MAX_KERNELS_DRAWN: Final = 200  # launches given a memory map and an overview
RACE_KINDS: Final = frozenset({"race_raw", "race_war", "race_waw"})
# Findings drawn on the memory map: a GM range a kernel touched wrongly.
MAP_KINDS: Final = frozenset(
    {"illegal_read", "illegal_write", "out_of_bounds", "misaligned_access", "uninitialized_read"}
)
SDC_KINDS: Final = frozenset({"sdc_mismatch", "sdc_replica_mismatch"})


@dataclass(frozen=True)
class PipeEvent:
    """One event of a block's stream as the timeline draws it."""

    serial: int
    pipe: str  # "PIPE_MTE2"; a flag's source pipe
    what: str  # "read", "write", "set_flag", "wait_flag", "pipe_barrier", or another event's name
    dst_pipe: str = ""  # a flag's destination pipe
    event_id: int = -1
    space: str = ""
    address: int = 0
    size: int = 0


@dataclass(frozen=True)
class Allocation:
    address: int
    size: int
    serial: int = 0


@dataclass
class KernelFacts:
    """What a saved stream says about one kernel launch."""

    name: str
    allocations: list[Allocation] = field(default_factory=list)  # GM allocations live when it was launched
    # (block type, block id) -> pipe -> events: the overview, whatever the kernel's size
    counts: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    events: int = 0
    # (block type, block id, first serial, last serial) -> that block's events in the range, in stream order
    windows: dict[tuple[str, int, int, int], list[PipeEvent]] = field(default_factory=dict)
    # (address, serial) of an illegal access -> [start, end) of the whole access, as the stream has it
    extents: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    # (address, size) of a stomped range -> block label -> [start, end) of that block's writes into it
    writers: dict[tuple[int, int], dict[str, tuple[int, int]]] = field(default_factory=dict)


@dataclass
class StreamFacts:
    kernels: dict[tuple[int, int], KernelFacts] = field(default_factory=dict)  # (session, launch) ->


WINDOW_MARGIN: Final = 6  # serials drawn before the earlier access and after the later one
WINDOW_EVENTS: Final = 300


def race_windows(finding: Finding) -> list[tuple[str, int, int, int]]:
    """The (block type, block, first serial, last serial) windows a race's timeline needs: one per block its
    accesses ran in (the first block each names; a race folded over blocks is the same in each)."""
    by_block: dict[tuple[str, int], list[int]] = {}
    for access in finding.accesses:
        if access.blocks:
            by_block.setdefault((access.block_type, access.blocks[0]), []).append(access.serial)
    return [
        (kind, block, max(0, min(serials) - WINDOW_MARGIN), max(serials) + WINDOW_MARGIN)
        for (kind, block), serials in by_block.items()
    ]


def missing_order(finding: Finding) -> str:
    """The order a race lacks, in words: what would have made the later access wait for the earlier."""
    if len(finding.accesses) < 2:
        return "the two accesses are not ordered"
    first, second = sorted(finding.accesses[:2], key=lambda a: a.serial)
    if first.blocks[:1] != second.blocks[:1] or first.block_type != second.block_type:
        return (
            f"no cross-core synchronisation (SyncAll, ffts flag) orders block {first.block_type} "
            f"{block_text(first)} serial {first.serial} before block {second.block_type} {block_text(second)} "
            f"serial {second.serial}"
        )
    if first.pipe == second.pipe:
        return f"no pipe_barrier({first.pipe}) between serial {first.serial} and {second.serial}"
    return f"no set_flag/wait_flag from {first.pipe} to {second.pipe} between serial {first.serial} and {second.serial}"


def block_text(access: RaceAccess) -> str:
    return ",".join(map(str, access.blocks[:8])) + ("…" if len(access.blocks) > 8 else "")


_CSS: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.2em;margin-top:1.6em}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;
vertical-align:top}th{background:#f3f3f3}
tr.suppressed{color:#999;background:#fafafa}tr.suppressed td{font-style:italic}
.error{color:#b00020}.warning{color:#8a5a00}.info{color:#555}
.filters label{margin-right:1em}pre{margin:0;font-size:12px;white-space:pre-wrap}
.missing{font-weight:bold;color:#b00020}.note{color:#555}
svg text{font:11px system-ui,sans-serif}figure{margin:.5em 0 1.5em}
td.heat{text-align:right;font-variant-numeric:tabular-nums}
"""

# The filters: each select hides the rows whose data attribute differs; no network, no framework.
_SCRIPT: Final = """
(function(){
  const selects = Array.from(document.querySelectorAll('select[data-filter]'));
  const rows = Array.from(document.querySelectorAll('#findings tbody tr'));
  const shown = document.getElementById('shown');
  function apply(){
    let n = 0;
    for (const row of rows){
      const keep = selects.every(s => !s.value || row.dataset[s.dataset.filter] === s.value ||
        (s.dataset.filter === 'block' && (' ' + row.dataset.block + ' ').includes(' ' + s.value + ' ')));
      row.hidden = !keep; if (keep) n++;
    }
    shown.textContent = n + ' of ' + rows.length + ' finding(s) shown';
  }
  for (const s of selects) s.addEventListener('change', apply);
  apply();
})();
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _severity_class(finding: Finding) -> str:
    return "error" if finding.severity == ERROR else finding.severity


def _block_labels(finding: Finding) -> list[str]:
    labels = [f"{kind} {block}" for kind, blocks in finding.blocks.items() for block in blocks]
    for access in finding.accesses:
        labels += [f"{access.block_type} {block}" for block in access.blocks]
    return list(dict.fromkeys(labels))


def _where(finding: Finding) -> str:
    frame = finding.location or (finding.stack[0] if finding.stack else None)
    if frame is None and finding.accesses:
        last = finding.accesses[-1]
        frame = last.location or (last.stack[0] if last.stack else None)
    if frame is None:
        return ""
    return f"{frame.file.rsplit('/', 1)[-1]}:{frame.line}"


def _title(finding: Finding) -> str:
    first = render_text([finding]).split("\n", 1)[0]
    return first.removeprefix("====== ").strip()


def _row(index: int, finding: Finding) -> str:
    blocks = _block_labels(finding)
    attrs = (
        f' data-kind="{_e(finding.kind)}" data-kernel="{_e(finding.kernel or "")}"'
        f' data-device="{finding.device}" data-block=" {_e(" ".join(b.replace(" ", ":") for b in blocks))} "'
    )
    cls = ' class="suppressed"' if finding.suppressed else ""
    status = f"suppressed: {_e(finding.suppression)}" if finding.suppressed else ""
    anchor = f'<a href="#race-{index}">timeline</a>' if finding.kind in RACE_KINDS else ""
    return (
        f'<tr id="finding-{index}"{cls}{attrs} aria-label="finding {index}: {_e(finding.kind)}">'
        f"<td>{index}</td><td class=\"{_severity_class(finding)}\">{_e(finding.kind)}</td>"
        f"<td>{_e(finding.kernel or '(host)')}</td><td>{finding.launch or ''}</td>"
        f"<td>{_e(blocks_text(finding.blocks))}</td><td>{finding.device}</td><td>{_e(_where(finding))}</td>"
        f"<td>{status} {anchor}<details><summary>{_e(_title(finding))}</summary>"
        f"<pre>{_e(render_text([finding]).rstrip())}</pre></details></td></tr>"
    )


def _select(name: str, label: str, values: Sequence[str]) -> str:
    options = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
    return (
        f'<label>{_e(label)} <select data-filter="{name}" aria-label="filter by {name}">'
        f'<option value="">all</option>{options}</select></label>'
    )


def _table(findings: Sequence[Finding]) -> str:
    rows: list[str] = []
    size = 0
    for i, finding in enumerate(findings[:MAX_TABLE_ROWS], 1):
        rows.append(_row(i, finding))
        size += len(rows[-1])
        if size > TABLE_BUDGET:  # deep stacks make rows long: the page's budget holds whatever they are
            break
    shown = findings[: len(rows)]
    kinds = sorted({f.kind for f in shown})
    kernels = sorted({f.kernel or "" for f in shown})
    devices = sorted({str(f.device) for f in shown}, key=int)
    blocks = sorted({b.replace(" ", ":") for f in shown for b in _block_labels(f)},
                    key=lambda b: (b.split(":")[0], int(b.split(":")[1])))  # fmt: skip
    parts = [
        '<section aria-labelledby="h-findings"><h2 id="h-findings">Findings</h2>',
        '<div class="filters" role="search" aria-label="filters">',
        _select("kind", "Kind", kinds),
        _select("kernel", "Kernel", kernels),
        _select("block", "Block", blocks),
        _select("device", "Device", devices),
        '<span id="shown" role="status"></span></div>',
        '<table id="findings" aria-label="findings"><thead><tr><th>#</th><th>Kind</th><th>Kernel</th>'
        "<th>Launch</th><th>Blocks</th><th>Device</th><th>Where</th><th>Report and stack</th></tr></thead><tbody>",
    ]
    parts += rows
    parts.append("</tbody></table>")
    if len(findings) > len(shown):
        parts.append(f'<p class="note">{len(findings) - len(shown)} more finding(s) not listed: '
                     "`sanitizerd findings --format json` has them all.</p>")  # fmt: skip
    parts.append("</section>")
    return "".join(parts)


# ---- the race timeline ----

_LANE_H, _LEFT, _COL, _TOP = 26, 90, 34, 22


def _lanes(events: Sequence[PipeEvent], accesses: Sequence[RaceAccess]) -> list[str]:
    seen = {e.pipe for e in events} | {e.dst_pipe for e in events if e.dst_pipe} | {a.pipe for a in accesses}
    seen.discard("PIPE_ALL")
    return [*LANES, *sorted(seen - set(LANES))]


def _timeline(index: int, block_type: str, block: int, events: Sequence[PipeEvent], finding: Finding) -> str:
    """One block's pipes around a race: a lane per pipe, a column per serial number, the race's two accesses
    marked and joined, each set_flag joined to the wait_flag that takes it."""
    mine = [a for a in finding.accesses if a.block_type == block_type and a.blocks[:1] == [block]]
    serials = sorted({e.serial for e in events} | {a.serial for a in mine})
    column = {s: i for i, s in enumerate(serials)}
    lanes = _lanes(events, mine)
    lane = {p: i for i, p in enumerate(lanes)}
    width = _LEFT + _COL * (len(serials) + 1)
    height = _TOP + _LANE_H * len(lanes) + 20

    def x(serial: int) -> int:
        return _LEFT + _COL * column[serial] + _COL // 2

    def y(pipe: str) -> int:
        return _TOP + _LANE_H * lane.get(pipe, 0) + _LANE_H // 2

    marker = f"arrow-{index}-{block_type}-{block}"
    label = f"timeline of block {block_type} {block}, serial {serials[0]} to {serials[-1]}" if serials else ""
    out = [
        f'<svg role="img" aria-label="{_e(label)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="#2a7"/></marker></defs>',
    ]
    for p in lanes:
        out.append(
            f'<text x="4" y="{y(p) + 4}">{_e(p)}</text><line x1="{_LEFT}" x2="{width}" y1="{y(p)}" y2="{y(p)}" '
            'stroke="#ddd"/>'
        )
    step = max(1, len(serials) // 30)
    for s in serials[::step]:
        out.append(f'<text x="{x(s)}" y="12" text-anchor="middle" fill="#777">{s}</text>')
    # events, merged per (serial, pipe): one instruction reads and writes several ranges
    marks: dict[tuple[int, str], list[PipeEvent]] = {}
    for e in events:
        if e.what == "pipe_barrier" and e.pipe == "PIPE_ALL":
            out.append(
                f'<line x1="{x(e.serial)}" x2="{x(e.serial)}" y1="{_TOP}" y2="{height - 20}" stroke="#999" '
                f'stroke-dasharray="3 3"><title>pipe_barrier(PIPE_ALL) serial {e.serial}</title></line>'
            )
            continue
        # a wait stalls the pipe it names as destination: it sits on that lane, where the arrow ends
        marks.setdefault((e.serial, e.dst_pipe if e.what == "wait_flag" else e.pipe), []).append(e)
    for (serial, pipe), group in marks.items():
        what = ", ".join(
            f"{e.what} {e.space} {e.address:#x}+{e.size}" if e.what in ("read", "write") else
            f"{e.what}({e.pipe}→{e.dst_pipe}, event {e.event_id})" if e.dst_pipe else e.what
            for e in group
        )  # fmt: skip
        cx, cy = x(serial), y(pipe)
        tip = f"<title>serial {serial} {_e(pipe)}: {_e(what)}</title>"
        if all(e.what in ("read", "write") for e in group):
            out.append(f'<rect x="{cx - 6}" y="{cy - 6}" width="12" height="12" fill="#9bc" rx="2">{tip}</rect>')
        elif any(e.what in ("set_flag", "wait_flag") for e in group):
            out.append(f'<circle cx="{cx}" cy="{cy}" r="4" fill="#2a7">{tip}</circle>')
        elif any(e.what == "pipe_barrier" for e in group):
            out.append(f'<rect x="{cx - 2}" y="{cy - 9}" width="4" height="18" fill="#555">{tip}</rect>')
        else:  # declarations and other bookkeeping: present, not prominent
            out.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="#bbb">{tip}</circle>')
    # set_flag -> wait_flag arrows, paired in order per (src, dst, event id) as the hardware's flags are
    pending: dict[tuple[str, str, int], list[PipeEvent]] = {}
    for e in events:
        key = (e.pipe, e.dst_pipe, e.event_id)
        if e.what == "set_flag":
            pending.setdefault(key, []).append(e)
        elif e.what == "wait_flag" and pending.get(key):
            s = pending[key].pop(0)
            out.append(
                f'<line role="img" aria-label="{_e(f"set_flag {s.pipe} to {s.dst_pipe} event {s.event_id}: serial {s.serial} waited at {e.serial}")}" '  # noqa: E501
                f'x1="{x(s.serial)}" y1="{y(s.pipe)}" x2="{x(e.serial)}" y2="{y(e.dst_pipe)}" stroke="#2a7" '
                'stroke-width="1.5" marker-end="url(#{marker})"/>'
            )
    for key, left in pending.items():
        for s in left:
            out.append(
                f'<text x="{x(s.serial) + 6}" y="{y(s.pipe) - 7}" fill="#2a7">set_flag→{_e(key[1])} '
                "not waited here</text>"
            )
    if len(mine) == 2:
        a, b = sorted(mine, key=lambda a: a.serial)
        out.append(f'<line x1="{x(a.serial)}" y1="{y(a.pipe)}" x2="{x(b.serial)}" y2="{y(b.pipe)}" '
                   'stroke="#b00020" stroke-width="2.5" stroke-dasharray="6 3"/>')  # fmt: skip
    for n, a in enumerate(mine, 1):
        text = f"race access {n}: {a.pipe} {a.op} at serial {a.serial}"
        out.append(
            f'<g role="img" aria-label="{_e(text)}"><circle cx="{x(a.serial)}" cy="{y(a.pipe)}" r="9" '
            f'fill="none" stroke="#b00020" stroke-width="3"/><text x="{x(a.serial)}" y="{y(a.pipe) + 22}" '
            f'text-anchor="middle" fill="#b00020">{_e(a.op)} {a.serial}</text><title>{_e(text)}</title></g>'
        )
    out.append("</svg>")
    return "".join(out)


def unwaited(finding: Finding, events: Sequence[PipeEvent]) -> str:
    """The set_flag the race's pair lacks a wait for, when the stream shows one: the likely one-line fix."""
    if len(finding.accesses) < 2:
        return ""
    first, second = sorted(finding.accesses[:2], key=lambda a: a.serial)
    waited = {(e.pipe, e.dst_pipe, e.event_id) for e in events if e.what == "wait_flag" and e.serial < second.serial}
    for e in events:
        between = first.serial < e.serial < second.serial
        pair = (e.pipe, e.dst_pipe) == (first.pipe, second.pipe)
        if e.what == "set_flag" and pair and between and (e.pipe, e.dst_pipe, e.event_id) not in waited:
            return (
                f"set_flag({e.pipe}, {e.dst_pipe}, event {e.event_id}) at serial {e.serial} has no wait_flag "
                f"before serial {second.serial}"
            )
    return ""


def _race(index: int, finding: Finding, facts: KernelFacts | None, *, draw: bool = True) -> str:
    words = missing_order(finding)
    accesses = "".join(
        f"<li>{_e(a.pipe)} {_e(a.op)} at {finding.space}+{a.address:#x} in block {_e(a.block_type)} "
        f"{_e(block_text(a))}, serial {a.serial}{_e(' at ' + _frame(a)) if _frame(a) else ''}</li>"
        for a in finding.accesses
    )
    head = f"{finding.kind.removeprefix('race_').upper()} race in {finding.kernel or '?'} (finding {index})"
    parts = [
        f'<figure id="race-{index}" role="group" aria-label="{_e(head)}"><h3>{_e(head)}</h3>',
        f'<ul aria-label="race accesses">{accesses}</ul>',
        f'<p class="missing" role="note" aria-label="missing order">{_e(words)}</p>',
    ]
    if facts is not None and not draw:
        parts.append('<p class="note">Timeline left out: the page\'s budget for pictures is spent by the races '
                     "above.</p>")  # fmt: skip
    elif facts is None:
        parts.append('<p class="note">No saved stream for this kernel: run with <code>--save FILE</code> and give '
                     "it to <code>report --save</code> to see the block's pipes.</p>")  # fmt: skip
    else:
        for key in race_windows(finding):
            events = facts.windows.get(key, [])
            hint = unwaited(finding, events)
            if hint:
                parts.append(f'<p role="note" aria-label="unwaited flag">{_e(hint)}</p>')
            parts.append(f"<figcaption>Block {_e(key[0])} {key[1]}, serial {key[2]} to {key[3]}</figcaption>")
            parts.append(_timeline(index, key[0], key[1], events, finding))
    parts.append("</figure>")
    return "".join(parts)


def _frame(access: RaceAccess) -> str:
    frame = access.location or (access.stack[0] if access.stack else None)
    return f"{frame.file.rsplit('/', 1)[-1]}:{frame.line}" if frame else ""


# ---- the memory map ----

_BAR_W = 640


_Mark = tuple[str, int, int, str]  # what, first byte, bytes, colour


def _map_rows(findings: Sequence[Finding], facts: KernelFacts | None) -> list[tuple[Allocation | None, list[_Mark]]]:
    """Each allocation a finding touches (or is nearest to), with the marks drawn on it; then the others."""
    allocations = list(facts.allocations) if facts else []
    rows: dict[int, list[_Mark]] = {}
    loose: list[_Mark] = []

    def nearest(start: int, end: int) -> int | None:
        best = None
        for i, a in enumerate(allocations):
            gap = max(a.address - end, start - (a.address + a.size), 0)
            if best is None or gap < best[0]:
                best = (gap, i)
        return None if best is None or best[0] > 1 << 20 else best[1]

    for finding in findings:
        where = nearest(finding.address, finding.address + max(finding.size, 1))
        marks = _marks(finding, facts, allocations[where] if where is not None else None)
        if where is None:
            loose += marks
        else:
            rows.setdefault(where, []).extend(marks)
    out: list[tuple[Allocation | None, list[_Mark]]] = [(allocations[i], rows[i]) for i in sorted(rows)]
    rest = [a for i, a in enumerate(allocations) if i not in rows]
    out += [(a, []) for a in rest[: max(0, MAX_MAP_ROWS - len(out))]]
    if loose:
        out.append((None, loose))
    return out


def _marks(finding: Finding, facts: KernelFacts | None, allocation: Allocation | None) -> list[_Mark]:
    what = finding.kind.replace("_", " ")
    writers = facts.writers.get((finding.address, finding.size)) if facts else None
    if writers:  # a stomping: each block's writes, then the bytes more than one of them wrote
        marks: list[_Mark] = [(f"{label} wrote", lo, hi - lo, "#d97706") for label, (lo, hi) in sorted(writers.items())]
        return [*marks, (f"stomped ({what} when writing)", finding.address, max(finding.size, 1), "#b00020")]
    if finding.kind not in ("illegal_read", "illegal_write"):
        return [(what, finding.address, max(finding.size, 1), "#b00020")]
    # msSanitizer's report of an illegal access: its start, and the number of bytes outside what is allocated
    marks = []
    extent = facts.extents.get((finding.address, finding.serial)) if facts else None
    if extent is not None:
        marks.append((f"the access (serial {finding.serial})", extent[0], extent[1] - extent[0], "#f4a3a8"))
    start = finding.address
    if allocation is not None and allocation.address <= start < allocation.address + allocation.size:
        start = allocation.address + allocation.size
    marks.append((f"{what}: {finding.size} bytes outside", start, max(finding.size, 1), "#b00020"))
    return marks


def _memory_map(kernel: str, findings: Sequence[Finding], facts: KernelFacts | None) -> str:
    rows = _map_rows(findings, facts)
    if not rows:
        return ""
    height = 34 * sum(1 + len(marks) for _, marks in rows) + 10
    out = [
        f'<figure role="group" aria-label="memory map of {_e(kernel)}"><h3>Memory map of {_e(kernel)}</h3>',
        f'<svg role="img" aria-label="{_e(f"GM allocations of {kernel}")}" width="{_BAR_W + 700}" '
        f'height="{height}">',
    ]
    top = 6
    for allocation, marks in rows:
        spans = [(lo, lo + size) for _, lo, size, _ in marks]
        starts = [lo for lo, _ in spans] + ([allocation.address] if allocation else [])
        ends = [hi for _, hi in spans] + ([allocation.address + allocation.size] if allocation else [])
        lo, hi = min(starts), max(ends)
        scale = _BAR_W / max(hi - lo, 1)

        def px(addr: int, lo: int = lo, scale: float = scale) -> float:
            return 120 + (addr - lo) * scale

        if allocation is not None:
            text = f"allocation {allocation.address:#x}, {allocation.size} bytes"
            out.append(
                f'<g role="img" aria-label="{_e(text)}"><rect x="{px(allocation.address):.1f}" y="{top}" '
                f'width="{max(allocation.size * scale, 1):.1f}" height="16" fill="#cde" stroke="#68a"/>'
                f'<text x="4" y="{top + 12}">{allocation.address:#x}</text>'
                f'<text x="{_BAR_W + 130}" y="{top + 12}">{allocation.size} B</text></g>'
            )
        else:
            out.append(f'<text x="4" y="{top + 12}">outside every allocation</text>')
        top += 22
        for what, a, n, colour in marks:
            text = f"{what}: {a:#x} to {a + n:#x} ({n} bytes)"
            out.append(
                f'<g role="img" aria-label="{_e(text)}"><rect x="{px(a):.1f}" y="{top}" '
                f'width="{max(n * scale, 2):.1f}" '
                f'height="10" fill="{colour}" opacity=".85"/><text x="{_BAR_W + 130}" y="{top + 9}">{_e(text)}</text>'
                "</g>"
            )
            top += 34 - 22 + 14
        top += 6
    out.append("</svg></figure>")
    return "".join(out)


def _overview(kernel: str, facts: KernelFacts) -> str:
    """Events per block and pipe: a large kernel's shape at a glance, in bounded size (at most 64 rows: blocks
    beyond are summed into ranges)."""
    if not facts.counts:
        return ""
    pipes = [p for p in LANES if any(p in c for c in facts.counts.values())]
    pipes += sorted({p for c in facts.counts.values() for p in c} - set(pipes))
    keys = sorted(facts.counts)
    per = max(1, -(-len(keys) // 64))
    groups = [keys[i : i + per] for i in range(0, len(keys), per)]
    top = max((sum(facts.counts[k].get(p, 0) for k in g) for g in groups for p in pipes), default=1) or 1
    rows = []
    for group in groups:
        name = f"{group[0][0]} {group[0][1]}" + (f" to {group[-1][1]}" if len(group) > 1 else "")
        cells = []
        for p in pipes:
            n = sum(facts.counts[k].get(p, 0) for k in group)
            shade = 255 - int(120 * n / top)
            cells.append(f'<td class="heat" style="background:rgb({shade},{shade},255)">{n}</td>')
        rows.append(f"<tr><th scope=\"row\">{_e(name)}</th>{''.join(cells)}</tr>")
    head = "".join(f"<th>{_e(p)}</th>" for p in pipes)
    return (
        f'<table aria-label="overview of {_e(kernel)}"><caption>{facts.events} events of {_e(kernel)} by block '
        f"and pipe</caption><thead><tr><th>Block</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _sdc(findings: Sequence[Finding]) -> str:
    rows = []
    for f in findings:
        r = f.replay
        if r is None:
            rows.append(f"<tr><td>{f.device}</td><td></td><td>-</td><td></td><td>{_e(f.detail)}</td></tr>")
            continue
        who = f"replay {r.replay}" if f.kind == "sdc_mismatch" else f"replica group {r.replica_group or '-'}"
        if r.ranks:
            who += f" (ranks {','.join(map(str, r.ranks))}: no majority)"
        rows.append(
            f"<tr><td>{r.rank}</td><td>{r.step} (local {r.local_step})</td><td>{_e(who)}</td>"
            f"<td>{_e(r.signature)}</td><td>{_e(f.detail)}</td></tr>"
        )
    # a signature is a digest per tensor: it says which tensor differs first, not by how many elements
    return (
        '<section aria-labelledby="h-sdc"><h2 id="h-sdc">Silent data corruption</h2>'
        '<table aria-label="silent data corruption"><thead><tr><th>Rank</th><th>Step</th><th>Which disagreed</th>'
        "<th>First tensor that differs</th><th>Report</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></section>"
    )


def render_html(findings: Sequence[Finding], *, title: str, version: str, facts: StreamFacts | None = None) -> str:
    """The page for ``findings`` (and, where given, what their saved stream says)."""
    kernels: dict[tuple[int, int], list[Finding]] = {}
    for f in findings:
        if f.kernel is not None:
            kernels.setdefault((f.session, f.launch), []).append(f)
    known = facts.kernels if facts else {}
    errors = sum(1 for f in findings if f.severity == ERROR and not f.suppressed)
    body = [
        f"<h1>sanitizerd report: {_e(title)}</h1>",
        f'<p role="status" aria-label="summary">{len(findings)} finding(s), {errors} error(s) not suppressed; '
        f"{len(set(kernels) | set(known))} kernel launch(es). sanitizerd {_e(version)}.</p>",
        _table(findings),
    ]
    races = [(i, f) for i, f in enumerate(findings, 1) if f.kind in RACE_KINDS]
    if races:
        body.append('<section aria-labelledby="h-races"><h2 id="h-races">Races</h2>')
        drawn = 0
        for i, f in races[:MAX_RACES_DRAWN]:
            body.append(_race(i, f, known.get((f.session, f.launch)), draw=drawn < RACES_BUDGET))
            drawn += len(body[-1])
        if len(races) > MAX_RACES_DRAWN:
            body.append(f'<p class="note">{len(races) - MAX_RACES_DRAWN} more race(s) not drawn.</p>')
        body.append("</section>")
    launches = sorted(set(kernels) | set(known))
    if launches:
        body.append('<section aria-labelledby="h-kernels"><h2 id="h-kernels">Kernels</h2>')
        for key in launches[:MAX_KERNELS_DRAWN]:
            found = kernels.get(key, [])
            kfacts = known.get(key)
            name = kfacts.name if kfacts else (found[0].kernel or "?")
            body.append(f"<h3>{_e(name)} (session {key[0]}, launch {key[1]})</h3>")
            mapped = [f for f in found if f.kind in MAP_KINDS and f.space == "GM"]
            if mapped or (kfacts and kfacts.allocations and found):
                body.append(_memory_map(name, mapped[:MAX_MAP_FINDINGS], kfacts))
            if len(mapped) > MAX_MAP_FINDINGS:
                body.append(f'<p class="note">{len(mapped) - MAX_MAP_FINDINGS} more finding(s) of this launch are '
                            "not drawn on its map: the table lists them.</p>")  # fmt: skip
            if kfacts is not None:
                body.append(_overview(name, kfacts))
        if len(launches) > MAX_KERNELS_DRAWN:
            body.append(f'<p class="note">{len(launches) - MAX_KERNELS_DRAWN} more kernel launch(es) not drawn.</p>')
        body.append("</section>")
    sdc = [f for f in findings if f.kind in SDC_KINDS]
    if sdc:
        body.append(_sdc(sdc))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>sanitizerd: {_e(title)}</title><style>{_CSS}</style></head><body><main>"
        + "".join(body)
        + f"</main><script>{_SCRIPT}</script></body></html>\n"
    )
