"""Findings from Python: query, filter and follow what a daemon (or a fleet's PostgreSQL store) holds, as typed
``Finding`` objects (``sanitizerd_protocol.model``). What ``sanitizerd findings`` prints is built on this::

    from sanitizerd import api

    for finding in api.findings(job="run-4242-0a1b2c3d", kinds=["illegal_read"]):
        print(finding.kernel, hex(finding.address), finding.location)
    for finding in api.follow(severity="error"):      # new findings as they are stored, until you stop
        page_someone(finding)

``socket`` None means the daemon the client library finds (the host's, else the user's own); ``store`` a
PostgreSQL URL reads that database instead, as the database lets your role (``docs/fleet-store.md``). Every
function raises ``SanitizerdError`` with the daemon's (or the database's) own words when it cannot answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from client_shim.transport import ClientError
from sanitizerd.control_client import ControlClient
from sanitizerd.findings.store import StoreUnavailable
from sanitizerd_protocol import ProtocolError
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import KINDS, Finding, kinds_named

__all__ = ["FOLLOW_POLL", "Finding", "FindingFilter", "SanitizerdError", "findings", "follow", "follow_pages"]

FOLLOW_POLL = 0.2  # seconds between a follower's queries when nothing new was stored


class SanitizerdError(Exception):
    """The daemon or the store could not answer: refused (its reason), gone, or not there."""


@dataclass(frozen=True)
class FindingFilter:
    """What a query selects: a job, a session, kinds (none: every kind), at least a severity, stored since."""

    job: str = ""
    session: int = 0
    kinds: tuple[str, ...] = ()
    severity: str = ""  # "error": errors only; "warning" or "": any
    since: float = 0.0  # seconds since the epoch; 0: any time

    def __post_init__(self) -> None:
        unknown = [kind for kind in self.kinds if kind not in KINDS]
        if unknown:
            raise ValueError(f"unknown finding kind {', '.join(unknown)}; the kinds are: {', '.join(KINDS)}")
        if self.severity not in ("", "error", "warning"):
            raise ValueError(f"a severity is error or warning; got {self.severity!r}")

    def query(self, *, after: int = 0) -> m.QueryFindings:
        return m.QueryFindings(
            job=self.job, session=self.session, after=after, kinds=list(self.kinds), severity=self.severity,
            since=self.since,
        )  # fmt: skip


class Source(Protocol):
    def request(self, message: m.Message) -> m.Message: ...


class StoreReader:
    """Findings straight from a PostgreSQL store, asked as a daemon is asked: what the database lets this role
    read (its row-level security: a user's own uids) from every daemon that writes there."""

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
def source(socket: str | None = None, store: str = "") -> Iterator[Source]:
    """A connection to ask: the daemon at ``socket``, or the store at ``store``; SanitizerdError when there is
    none, or when it goes while asked."""
    try:
        if store:
            reader = StoreReader(store)
            try:
                yield reader
            finally:
                reader.close()
        else:
            with ControlClient(socket) as control:
                yield control
    except (ClientError, ProtocolError, StoreUnavailable, ImportError, OSError) as exc:
        raise SanitizerdError(str(exc)) from exc
    except TimeoutError:
        raise SanitizerdError(f"sanitizerd at {socket} did not answer in time") from None


def pages(asked: Source, queries: Iterable[m.QueryFindings]) -> Iterator[m.Findings]:
    for query in queries:
        reply = asked.request(query)
        if not isinstance(reply, m.Findings):
            raise SanitizerdError(f"sanitizerd answered {type(reply).__name__} to query_findings")
        yield reply


def findings(
    socket: str | None = None,
    *,
    job: str = "",
    session: int = 0,
    kinds: Iterable[str] = (),
    severity: str = "",
    since: float = 0.0,
    store: str = "",
    selected: FindingFilter | None = None,
) -> list[Finding]:
    """Every stored finding the filter selects (that you may read), oldest first, asked a page at a time."""
    selected = selected or FindingFilter(job=job, session=session, kinds=tuple(kinds), severity=severity, since=since)
    found: list[Finding] = []
    cursor = 0
    with source(socket, store) as asked:
        while True:
            [page] = pages(asked, [selected.query(after=cursor)])
            found += page.findings
            if not page.next:
                return found
            cursor = page.next


def follow_pages(
    socket: str | None = None,
    *,
    selected: FindingFilter,
    store: str = "",
    poll: float = FOLLOW_POLL,
    started: Callable[[int], None] | None = None,
) -> Iterator[list[Finding]]:
    """New findings as they are stored, a batch at a time, until the caller stops. Without ``since`` it starts after
    the newest finding stored so far (``started`` is told that id once nothing stored later can be missed); with
    it, at the first stored since then."""
    with source(socket, store) as asked:
        cursor = 0
        if not selected.since:
            [start] = pages(asked, [m.QueryFindings(newest=True)])
            cursor = start.next
        if started is not None:
            started(cursor)
        while True:
            [page] = pages(asked, [selected.query(after=cursor)])
            if page.findings:
                cursor = page.findings[-1].id
                yield page.findings
            if not page.next:
                time.sleep(poll)


def follow(
    socket: str | None = None,
    *,
    job: str = "",
    session: int = 0,
    kinds: Iterable[str] = (),
    severity: str = "",
    since: float = 0.0,
    store: str = "",
    poll: float = FOLLOW_POLL,
) -> Iterator[Finding]:
    """Each new finding the filter selects, as it is stored (``follow_pages`` one at a time)."""
    selected = FindingFilter(job=job, session=session, kinds=tuple(kinds), severity=severity, since=since)
    for batch in follow_pages(socket, selected=selected, store=store, poll=poll):
        yield from batch
