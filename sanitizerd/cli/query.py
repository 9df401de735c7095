"""``sanitizerd findings``, ``sanitizerd sessions`` and ``sanitizerd jobs``: ask a running daemon."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

import msgspec

from client_shim.transport import ClientError
from sanitizerd import __version__
from sanitizerd.cli.control import ControlClient
from sanitizerd.findings.junit import render_junit
from sanitizerd.findings.model import KINDS, Finding, kinds_named
from sanitizerd.findings.render import block_list, render_json, render_text
from sanitizerd.findings.sarif import render_sarif
from sanitizerd.findings.store import StoreUnavailable
from sanitizerd.protocol import ProtocolError
from sanitizerd.protocol import messages as m

M = TypeVar("M", bound=m.Message)


class FindingSource(Protocol):
    def request(self, message: m.Message) -> m.Message: ...


class StoreReader:
    """Findings straight from a PostgreSQL store (``--store URL``), asked as a daemon is asked: what the database
    lets this role read (its row-level security: a user's own uids) from every daemon that writes there."""

    def __init__(self, url: str) -> None:
        from sanitizerd.findings.postgres import PostgresStore

        self.store = PostgresStore(url, migrate=False)

    def request(self, message: m.Message) -> m.Message:
        assert isinstance(message, m.QueryFindings)
        if message.newest:
            return m.Findings(findings=[], next=self.store.newest_finding())
        page = self.store.findings_page(
            job=message.job, session=message.session, after=message.after,
            kinds=kinds_named(message.kinds, message.severity), since=message.since,
        )  # fmt: skip
        return m.Findings(findings=page.findings, next=page.next)

    def close(self) -> None:
        self.store.close()


@contextmanager
def _source(socket: str | None, store: str) -> Iterator[FindingSource]:
    if store:
        reader = StoreReader(store)
        try:
            yield reader
        finally:
            reader.close()
    else:
        with ControlClient(socket) as control:
            yield control


def _ask(socket: str | None, query: m.Message, answer: type[M]) -> M | None:
    """One question to the daemon; None (after saying why on stderr) when it cannot be asked."""
    replies = _ask_pages(socket, [query], answer)
    return next(replies, None)


def _ask_pages(socket: str | None, queries: Iterable[m.Message], answer: type[M], *, store: str = "") -> Iterator[M]:
    """Each question's answer in turn, on one connection (to the daemon, or to ``store``). A refusal, a lost
    connection or a reply this client cannot read ends it, said on stderr (the daemon's own words for a refusal),
    never a traceback."""
    try:
        with _source(socket, store) as source:
            for query in queries:
                reply = source.request(query)
                if not isinstance(reply, answer):
                    raise ClientError(f"sanitizerd answered {type(reply).__name__} to {type(query).__name__}")
                yield reply
    except (ClientError, ProtocolError, StoreUnavailable, ImportError) as exc:
        print(f"[sanitizerd] ERROR: {exc}", file=sys.stderr)
    except TimeoutError:
        print(f"[sanitizerd] ERROR: sanitizerd at {socket} did not answer in time", file=sys.stderr)


@dataclass(frozen=True)
class FindingFilter:
    """What ``findings`` selects, with or without ``--follow``: the query's fields but the cursor."""

    job: str = ""
    session: int = 0
    kinds: tuple[str, ...] = ()
    severity: str = ""
    since: float = 0.0

    def query(self, *, after: int = 0) -> m.QueryFindings:
        return m.QueryFindings(
            job=self.job, session=self.session, after=after, kinds=list(self.kinds), severity=self.severity,
            since=self.since,
        )  # fmt: skip


def shown(found: list[Finding], fmt: str, show_suppressed: bool) -> list[Finding]:
    """What a format prints: JSON and SARIF carry suppressed findings marked with their reason (SARIF's own
    ``suppressions``), for the tools that read them; text and JUnit, read by people and as pass/fail, leave them
    out unless asked."""
    if show_suppressed or fmt in ("json", "sarif"):
        return found
    return [f for f in found if not f.suppressed]


def findings(
    socket: str | None, *, selected: FindingFilter, fmt: str, show_suppressed: bool = False, store: str = ""
) -> int:
    """Every finding the query names, asked for a page at a time (a reply stays far below the frame limit)."""
    pages: list[m.Findings] = []

    def queries() -> Iterator[m.QueryFindings]:
        yield selected.query()
        while pages[-1].next:
            yield selected.query(after=pages[-1].next)

    for page in _ask_pages(socket, queries(), m.Findings, store=store):
        pages.append(page)
    if not pages or pages[-1].next:
        return 1  # the reason is on stderr
    every = [f for page in pages for f in page.findings]
    found = shown(every, fmt, show_suppressed)
    if fmt == "json":
        sys.stdout.write(render_json(found).decode() + "\n")
    elif fmt == "sarif":
        sys.stdout.write(render_sarif(found, version=__version__))
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


FOLLOW_POLL = 0.2  # seconds between a follower's queries when nothing new was stored


def follow(
    socket: str | None,
    *,
    selected: FindingFilter,
    fmt: str,
    show_suppressed: bool = False,
    poll: float = FOLLOW_POLL,
    store: str = "",
) -> int:
    """New findings as they are stored, until interrupted: text, or one JSON object a line. Without ``since``
    it starts after the newest finding stored so far; with it, at the first stored since then."""
    feed = TextFeed()
    try:
        with _source(socket, store) as control:
            cursor = 0
            if not selected.since:
                start = control.request(m.QueryFindings(newest=True))
                if not isinstance(start, m.Findings):
                    raise ClientError(f"sanitizerd answered {type(start).__name__} to query_findings")
                cursor = start.next
            # On stderr, so that stdout stays findings alone (a pipe into jq): from here on nothing is missed.
            print(f"[sanitizerd] following findings stored after #{cursor}; Ctrl-C ends", file=sys.stderr, flush=True)
            while True:
                page = control.request(selected.query(after=cursor))
                if not isinstance(page, m.Findings):
                    raise ClientError(f"sanitizerd answered {type(page).__name__} to query_findings")
                if page.findings:
                    cursor = page.findings[-1].id
                    found = shown(page.findings, fmt, show_suppressed)
                    if fmt == "json":
                        sys.stdout.write("".join(_json_line.encode(f).decode() + "\n" for f in found))
                    else:
                        sys.stdout.write(feed.text(found))
                    sys.stdout.flush()
                if not page.next:
                    time.sleep(poll)
    except KeyboardInterrupt:
        return 0
    except (ClientError, ProtocolError, StoreUnavailable, ImportError, OSError) as exc:
        print(f"[sanitizerd] ERROR: {exc}", file=sys.stderr)
    except TimeoutError:
        print(f"[sanitizerd] ERROR: sanitizerd at {socket} did not answer in time", file=sys.stderr)
    return 1


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


def sessions(socket: str | None, *, fmt: str) -> int:
    reply = _ask(socket, m.QuerySessions(), m.Sessions)
    if not isinstance(reply, m.Sessions):
        return 1
    if fmt == "json":
        sys.stdout.write(msgspec.json.encode(reply.sessions).decode() + "\n")
        return 0
    rows = [
        [s.session, s.state, s.job or "-", s.pid, s.device, s.kernels, s.events, s.findings,
         time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started)) if s.started else "-"]
        for s in reply.sessions
    ]  # fmt: skip
    sys.stdout.write(_table(["SESSION", "STATE", "JOB", "PID", "DEVICE", "KERNELS", "EVENTS", "FINDINGS", "STARTED"],
                            rows, left={"STATE", "JOB", "STARTED"}))  # fmt: skip
    for s in reply.sessions:
        if s.unstored:
            print(f"[sanitizerd] session {s.session}: {s.unstored} of its findings could not be stored (store full)")
    return 0


def jobs(socket: str | None, *, fmt: str) -> int:
    reply = _ask(socket, m.QueryJobs(), m.Jobs)
    if not isinstance(reply, m.Jobs):
        return 1
    if fmt == "json":
        sys.stdout.write(msgspec.json.encode(reply.jobs).decode() + "\n")
        return 0
    rows = [
        [j.job or "-", j.state, j.sessions, j.live, _ids(j.ranks), _ids(j.devices), j.events, j.findings,
         ",".join(f"{rank}:{n}" for rank, n in j.signatures.items()) if any(j.signatures.values()) else "-"]
        for j in reply.jobs
    ]  # fmt: skip
    headers = ["JOB", "STATE", "SESSIONS", "LIVE", "RANKS", "DEVICES", "EVENTS", "FINDINGS", "SIGNATURES"]
    sys.stdout.write(_table(headers, rows, left={"JOB", "STATE", "RANKS", "DEVICES", "SIGNATURES"}))
    return 0


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
