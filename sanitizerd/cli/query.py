"""``sanitizerd findings``, ``sanitizerd sessions`` and ``sanitizerd jobs``: ask a running daemon."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

import msgspec

from client_shim.transport import ClientError
from sanitizerd import __version__
from sanitizerd.cli.control import ControlClient
from sanitizerd.findings.junit import render_junit
from sanitizerd.findings.render import block_list, render_json, render_text
from sanitizerd.findings.sarif import render_sarif
from sanitizerd.protocol import ProtocolError
from sanitizerd.protocol import messages as m

M = TypeVar("M", bound=m.Message)


def _ask(socket: str | None, query: m.Message, answer: type[M]) -> M | None:
    """One question to the daemon; None (after saying why on stderr) when it cannot be asked."""
    replies = _ask_pages(socket, [query], answer)
    return next(replies, None)


def _ask_pages(socket: str | None, queries: Iterable[m.Message], answer: type[M]) -> Iterator[M]:
    """Each question's answer in turn, on one connection. A refusal, a lost connection or a reply this client
    cannot read ends it, said on stderr (the daemon's own words for a refusal), never a traceback."""
    try:
        with ControlClient(socket) as control:
            for query in queries:
                reply = control.request(query)
                if not isinstance(reply, answer):
                    raise ClientError(f"sanitizerd answered {type(reply).__name__} to {type(query).__name__}")
                yield reply
    except (ClientError, ProtocolError) as exc:
        print(f"[sanitizerd] ERROR: {exc}", file=sys.stderr)
    except TimeoutError:
        print(f"[sanitizerd] ERROR: sanitizerd at {socket} did not answer in time", file=sys.stderr)


def findings(socket: str | None, *, job: str, session: int, fmt: str) -> int:
    """Every finding the query names, asked for a page at a time (a reply stays far below the frame limit)."""
    pages: list[m.Findings] = []

    def queries() -> Iterator[m.QueryFindings]:
        yield m.QueryFindings(job=job, session=session)
        while pages[-1].next:
            yield m.QueryFindings(job=job, session=session, after=pages[-1].next)

    for page in _ask_pages(socket, queries(), m.Findings):
        pages.append(page)
    if not pages or pages[-1].next:
        return 1  # the reason is on stderr
    found = [f for page in pages for f in page.findings]
    if fmt == "json":
        sys.stdout.write(render_json(found).decode() + "\n")
    elif fmt == "sarif":
        sys.stdout.write(render_sarif(found, version=__version__))
    elif fmt == "junit":
        # Only the launches with findings: which kernels ran clean only `run --report` knows.
        sys.stdout.write(render_junit(found))
    else:
        sys.stdout.write(render_text(found))
        print(f"[sanitizerd] {len(found)} finding(s)")
    return 0


def sessions(socket: str | None, *, fmt: str) -> int:
    reply = _ask(socket, m.QuerySessions(), m.Sessions)
    if not isinstance(reply, m.Sessions):
        return 1
    if fmt == "json":
        sys.stdout.write(msgspec.json.encode(reply.sessions).decode() + "\n")
        return 0
    header = f"{'SESSION':>8} {'STATE':6} {'JOB':24} {'PID':>7} {'DEVICE':>6} {'KERNELS':>7} {'EVENTS':>12} "
    print(header + f"{'FINDINGS':>8} STARTED")
    for s in reply.sessions:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started)) if s.started else "-"
        print(
            f"{s.session:>8} {s.state:6} {s.job[:24]:24} {s.pid:>7} {s.device:>6} {s.kernels:>7} {s.events:>12} "
            f"{s.findings:>8} {started}"
        )
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
    print(f"{'JOB':28} {'STATE':7} {'SESSIONS':>8} {'LIVE':>4} {'RANKS':12} {'DEVICES':12} {'EVENTS':>12} "
          f"{'FINDINGS':>8} SIGNATURES")  # fmt: skip
    for j in reply.jobs:
        signatures = ",".join(f"{rank}:{n}" for rank, n in j.signatures.items()) if any(j.signatures.values()) else "-"
        print(
            f"{j.job[:28]:28} {j.state:7} {j.sessions:>8} {j.live:>4} {_ids(j.ranks):12} {_ids(j.devices):12} "
            f"{j.events:>12} {j.findings:>8} {signatures}"
        )
    return 0


def _ids(ids: list[int]) -> str:
    return block_list(ids) or "-"
