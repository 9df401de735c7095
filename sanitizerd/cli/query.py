"""``sanitizerd findings``, ``sanitizerd sessions`` and ``sanitizerd jobs``: ask a running daemon."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import IO, TypeVar

import msgspec

from sanitizerd import __version__, api
from sanitizerd.api import FindingFilter, SanitizerdError, source
from sanitizerd.cli.progress import Progress, Sample, count
from sanitizerd.findings.junit import render_junit
from sanitizerd.findings.render import block_list, render_json, render_text
from sanitizerd.findings.sarif import render_sarif
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import ERROR, KINDS, WARNING, Finding

M = TypeVar("M", bound=m.Message)


def _ask(socket: str | None, query: m.Message, answer: type[M]) -> M | None:
    """One question to the daemon; None (after saying why on stderr: the daemon's own words for a refusal, never a
    traceback) when it cannot be asked or answers something else."""
    try:
        with source(socket) as asked:
            reply = asked.request(query)
    except SanitizerdError as exc:
        print(f"[sanitizerd] ERROR: {exc}", file=sys.stderr)
        return None
    if not isinstance(reply, answer):
        print(f"[sanitizerd] ERROR: sanitizerd answered {type(reply).__name__} to {type(query).__name__}",
              file=sys.stderr)  # fmt: skip
        return None
    return reply


def shown(found: list[Finding], fmt: str, show_suppressed: bool) -> list[Finding]:
    """What a format prints: JSON, SARIF and HTML carry suppressed findings marked with their reason (SARIF's own
    ``suppressions``), for the tools that read them; text and JUnit, read by people and as pass/fail, leave them
    out unless asked."""
    if show_suppressed or fmt in ("json", "sarif", "html"):
        return found
    return [f for f in found if not f.suppressed]


def findings(
    socket: str | None, *, selected: FindingFilter, fmt: str, show_suppressed: bool = False, store: str = ""
) -> int:
    """Every finding the query names, asked for a page at a time (a reply stays far below the frame limit)."""
    try:
        every = api.findings(socket, selected=selected, store=store)
    except SanitizerdError as exc:
        print(f"[sanitizerd] ERROR: {exc}", file=sys.stderr)
        return 1
    found = shown(every, fmt, show_suppressed)
    if fmt == "json":
        sys.stdout.write(render_json(found).decode() + "\n")
    elif fmt == "sarif":
        sys.stdout.write(render_sarif(found, version=__version__))
    elif fmt == "html":  # the visual page of what the query selected, without a stream (docs/report.md)
        from sanitizerd.cli.report import html_page

        sys.stdout.write(html_page(found, title="findings query"))
    elif fmt == "junit":
        # Only the launches with findings: which kernels ran clean only `run --report` knows.
        sys.stdout.write(render_junit(found))
    else:
        sys.stdout.write(TextFeed().text(found))
        hidden = sum(f.suppressed for f in every)
        if not hidden:
            print(f"[sanitizerd] {len(found)} finding(s)")
        elif show_suppressed:
            print(f"[sanitizerd] {len(found)} finding(s), {hidden} of them suppressed")
        else:
            print(f"[sanitizerd] {len(found)} finding(s), and {hidden} suppressed (--show-suppressed shows them)")
    return 0


class TextFeed:
    """msSanitizer's report text under a header line each time the job or session changes, so that findings of
    many jobs (``findings`` without ``--job``, ``--follow``) say whose they are."""

    def __init__(self) -> None:
        self._last: tuple[str, int] | None = None

    def text(self, found: list[Finding]) -> str:
        parts: list[str] = []
        group: list[Finding] = []
        for finding in found:
            if (finding.job, finding.session) != self._last:
                parts.append(render_text(group))
                group = []
                self._last = (finding.job, finding.session)
                parts.append(f"[sanitizerd] job {finding.job or '-'}, session {finding.session} "
                             f"(pid {finding.pid}, device {finding.device})\n")  # fmt: skip
            group.append(finding)
        parts.append(render_text(group))
        return "".join(parts)


def follow(
    socket: str | None,
    *,
    selected: FindingFilter,
    fmt: str,
    show_suppressed: bool = False,
    poll: float = api.FOLLOW_POLL,
    store: str = "",
    quiet: bool = False,
) -> int:
    """New findings as they are stored, until interrupted: text, or one JSON object a line; a count of them on
    stderr unless ``quiet`` (sanitizerd/cli/progress.py)."""
    feed = TextFeed()
    followed = FollowCounts()
    progress = Progress("findings --follow", followed, quiet=quiet)
    out: IO[str] = sys.stdout

    def started(cursor: int) -> None:
        nonlocal out
        # On stderr, so that stdout stays findings alone (a pipe into jq): from here on nothing is missed.
        print(f"[sanitizerd] following findings stored after #{cursor}; Ctrl-C ends", file=sys.stderr, flush=True)
        progress.start()
        out = progress.above(sys.stdout)

    failure = ""
    try:
        for batch in api.follow_pages(socket, selected=selected, store=store, poll=poll, started=started):
            found = shown(batch, fmt, show_suppressed)
            followed.add(found)
            if fmt == "json":
                out.write("".join(_json_line.encode(f).decode() + "\n" for f in found))
            else:
                out.write(feed.text(found))
            out.flush()
    except KeyboardInterrupt:
        return 0
    except SanitizerdError as exc:
        failure = str(exc)
    finally:
        progress.stop()  # the line erased before anything below is said
    if failure:
        print(f"[sanitizerd] ERROR: {failure}", file=sys.stderr)
    return 1


class FollowCounts:
    """The live count of ``findings --follow``: findings printed, errors and warnings among them, the last's time."""

    def __init__(self) -> None:
        self.findings = 0
        self.errors = 0
        self.warnings = 0
        self.last = ""

    def add(self, found: list[Finding]) -> None:
        self.findings += len(found)
        self.errors += sum(f.severity == ERROR for f in found)
        self.warnings += sum(f.severity == WARNING for f in found)
        if found:
            self.last = time.strftime("%H:%M:%S")

    def __call__(self) -> Sample:
        text = (
            f"{count(self.findings, 'finding')} followed ({count(self.errors, 'error')}, "
            f"{count(self.warnings, 'warning')})"
        )
        return Sample(text + (f", the last at {self.last}" if self.last else ", none yet"))


_json_line = msgspec.json.Encoder()


_SINCE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, *, now: float | None = None) -> float:
    """``--since``: an age (``90s``, ``10m``, ``2h``, ``1d``), an ISO 8601 local time (``2026-12-04 10:00``,
    ``2026-12-04T10:00:00+00:00``) or seconds since the epoch; the time as seconds since the epoch."""
    text = text.strip()
    now = time.time() if now is None else now
    if len(text) > 1 and text[-1] in _SINCE_UNITS and text[:-1].isdigit():
        return max(0.0, now - int(text[:-1]) * _SINCE_UNITS[text[-1]])
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
        raise ValueError(f"--since {text!r}: seconds since the epoch are finite and not negative")
    try:
        return max(0.0, datetime.fromisoformat(text).timestamp())
    except (ValueError, OverflowError, OSError):
        raise ValueError(
            f"--since {text!r} is not an age (90s, 10m, 2h, 1d), an ISO 8601 time (2026-12-04 10:00) or seconds "
            "since the epoch"
        ) from None


def parse_kinds(values: list[str]) -> tuple[str, ...]:
    """``--kind`` values (repeated or comma-separated), each a finding kind of the JSON vocabulary."""
    kinds = tuple(dict.fromkeys(k.strip() for value in values for k in value.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown finding kind {', '.join(unknown)}; the kinds are: {', '.join(KINDS)}")
    return kinds


def _listing(
    socket: str | None,
    query: m.Message,
    answer: type[M],
    *,
    fmt: str,
    listed: Callable[[M], Sequence[msgspec.Struct]],
    table: Callable[[M], str],
) -> int:
    """Ask the daemon for a list and print it: as JSON, the listed entries as they came; as text, a table."""
    reply = _ask(socket, query, answer)
    if reply is None:
        return 1
    sys.stdout.write(msgspec.json.encode(listed(reply)).decode() + "\n" if fmt == "json" else table(reply))
    return 0


def sessions(socket: str | None, *, fmt: str) -> int:
    return _listing(
        socket, m.QuerySessions(), m.Sessions, fmt=fmt, listed=lambda reply: reply.sessions, table=_sessions_table
    )


def _sessions_table(reply: m.Sessions) -> str:
    rows = [
        [s.session, s.state, s.job or "-", s.pid, s.device, s.kernels, s.events, s.findings,
         time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started)) if s.started else "-"]
        for s in reply.sessions
    ]  # fmt: skip
    headers = ["SESSION", "STATE", "JOB", "PID", "DEVICE", "KERNELS", "EVENTS", "FINDINGS", "STARTED"]
    unstored = "".join(
        f"[sanitizerd] session {s.session}: {s.unstored} of its findings could not be stored (store full)\n"
        for s in reply.sessions
        if s.unstored
    )
    return _table(headers, rows, left={"STATE", "JOB", "STARTED"}) + unstored


def jobs(socket: str | None, *, fmt: str) -> int:
    return _listing(socket, m.QueryJobs(), m.Jobs, fmt=fmt, listed=lambda reply: reply.jobs, table=_jobs_table)


def _jobs_table(reply: m.Jobs) -> str:
    rows = [
        [j.job or "-", j.state, j.sessions, j.live, _ids(j.ranks), _ids(j.devices), j.events, j.findings,
         ",".join(f"{rank}:{n}" for rank, n in j.signatures.items()) if any(j.signatures.values()) else "-"]
        for j in reply.jobs
    ]  # fmt: skip
    headers = ["JOB", "STATE", "SESSIONS", "LIVE", "RANKS", "DEVICES", "EVENTS", "FINDINGS", "SIGNATURES"]
    return _table(headers, rows, left={"JOB", "STATE", "RANKS", "DEVICES", "SIGNATURES"})


def _ids(ids: list[int]) -> str:
    return block_list(ids) or "-"


def _table(headers: list[str], rows: list[list[object]], *, left: set[str]) -> str:
    """Columns as wide as their widest cell: a job name is never cut, so it can be pasted back (``--job``)."""
    cells = [headers] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [
            cell.ljust(width) if header in left else cell.rjust(width)
            for cell, width, header in zip(row, widths, headers, strict=True)
        ]
        lines.append(" ".join(padded).rstrip())
    return "\n".join(lines) + "\n"
