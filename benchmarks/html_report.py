"""The HTML report of a large kernel (issue 30): benchmarks/racecheck.py's 2.4 M-event kernel (24 blocks x 5 263
double-buffered tiles), with one wait_flag(MTE2 -> V) left out in each of ``--races`` blocks so that racecheck
finds real races in it, rendered as `sanitizerd report --html --save` renders a job: its findings, and what the
stream says about them (each race's window of the block's events, the allocations, the counts per block and pipe).

Measured: the seconds to gather the stream's facts and to render the page, the page's size (budget: < 5 MB), and
its load time in Debian's chromium through Playwright, from file:// to the load event (budget: < 2 s), best and
median of ``--repeats`` loads, each in a fresh page.

    PYTHONPATH=. .venv/bin/python benchmarks/html_report.py [--races 24] [--repeats 5] [--out build/big.html]

Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.racecheck import GM_X, GM_Y, GM_Z, TILE, check, iterations_stream
from sanitizerd import __version__
from sanitizerd.cli.report import stream_facts
from sanitizerd.findings.html import render_html
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import EventKind, Pipe

BLOCKS, TILES = 24, 5263
BATCH = 65536


def planted(stream: np.ndarray, races: int) -> np.ndarray:
    """The kernel with one wait_flag(MTE2 -> V) dropped in the middle of each of the first ``races`` blocks."""
    waits = np.flatnonzero(
        (stream["kind"] == EventKind.WAIT_FLAG) & (stream["pipe"] == Pipe.MTE2) & (stream["dst_pipe"] == Pipe.V)
    )
    drop = []
    for block in range(races):
        mine = waits[stream["block_id"][waits] == block]
        drop.append(mine[mine.size // 2])
    return np.delete(stream, drop)


def messages(stream: np.ndarray, blocks: int, tiles: int) -> list[tuple[int, m.Message]]:
    """The job as its stream records it: the three GM tensors allocated, the launch, its events in batches."""
    size = blocks * tiles * TILE
    sent: list[tuple[int, m.Message]] = [(1, m.HostOp(op="malloc", address=a, size=size)) for a in (GM_X, GM_Y, GM_Z)]
    sent.append((1, m.KernelBegin(kernel=1, name="add_custom", block_dim=blocks)))
    for lo in range(0, stream.size, BATCH):
        sent.append((1, m.Events(kernel=1, records=memoryview(stream[lo : lo + BATCH].tobytes()))))
    sent.append((1, m.KernelEnd(kernel=1)))
    return sent


def load_times(page_path: Path, repeats: int) -> tuple[list[float], list[float], list[str]]:
    """Wall seconds from goto to the load event, the browser's own navigation duration, console errors."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        raise SystemExit("chromium is not installed (Debian: apt-get install chromium)")
    walls, navigation, errors = [], [], []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        for _ in range(repeats):
            page = browser.new_page()
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            started = time.perf_counter()
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            walls.append(time.perf_counter() - started)
            navigation.append(
                page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000.0
            )
            page.close()
        browser.close()
    return walls, navigation, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--races", type=int, default=BLOCKS, help=f"blocks with a wait_flag left out [{BLOCKS}]")
    parser.add_argument("--tiles", type=int, default=TILES, help=f"tiles per block [{TILES}: 2.40 M events]")
    parser.add_argument("--repeats", type=int, default=5, help="page loads in chromium [5]")
    parser.add_argument("--out", type=Path, default=Path("build/html_report_bench.html"), help="the page")
    args = parser.parse_args()

    stream = planted(iterations_stream(BLOCKS, args.tiles), min(args.races, BLOCKS))
    findings = check(stream, BLOCKS)[4]
    for finding in findings:  # as the store gives them to `report`: the launch's id and the job's
        finding.launch, finding.session, finding.job = 1, 1, "bench"
    sent = messages(stream, BLOCKS, args.tiles)

    started = time.perf_counter()
    facts = stream_facts(sent, findings)
    gathered = time.perf_counter()
    page = render_html(findings, title="job bench", version=__version__, facts=facts)
    rendered = time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page, encoding="utf-8")
    size = args.out.stat().st_size
    walls, navigation, errors = load_times(args.out, args.repeats)
    print(json.dumps({
        "events": int(stream.size),
        "findings": len(findings),
        "kinds": sorted({f.kind for f in findings}),
        "facts_s": round(gathered - started, 3),
        "render_s": round(rendered - gathered, 3),
        "page_bytes": size,
        "page_mb": round(size / 1e6, 3),
        "load_wall_s": [round(w, 3) for w in walls],
        "load_wall_s_best": round(min(walls), 3),
        "load_wall_s_median": round(statistics.median(walls), 3),
        "load_event_end_s_median": round(statistics.median(navigation), 3),
        "console_errors": errors,
        "within_budget": size < 5_000_000 and statistics.median(walls) < 2.0,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
