"""Findings and session history in an embedded SQLite database under the state directory.

SQLite allows one writer; the daemon calls these (blocking) methods from one worker thread at a time.
WAL keeps readers (``sanitizerd findings``) from blocking the writer, and the file survives restarts.

Every row carries the uid that owns it (its session's client), indexed: what a user may read is selected by uid
in SQL, however many sessions other users have. The store is bounded by age and by size (``prune``); a write it
cannot make (a full disk, the size limit reached with nothing left to prune) raises ``StoreUnavailable``, whose
message says which, and the caller counts what was not stored.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from sanitizerd_protocol.model import Finding, SessionInfo

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    info BLOB NOT NULL,
    uid INTEGER NOT NULL DEFAULT -1
);
CREATE INDEX IF NOT EXISTS sessions_job ON sessions(job);
CREATE TABLE IF NOT EXISTS findings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    session INTEGER NOT NULL,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    body BLOB NOT NULL,
    uid INTEGER NOT NULL DEFAULT -1
);
CREATE INDEX IF NOT EXISTS findings_job ON findings(job);
CREATE INDEX IF NOT EXISTS findings_session ON findings(session);
"""
# Created after the migration below, which adds the uid columns to a store older than them.
_UID_INDEXES = """
CREATE INDEX IF NOT EXISTS sessions_uid ON sessions(uid, id);
CREATE INDEX IF NOT EXISTS findings_uid ON findings(uid, id);
"""

CRASH_END_REASON = "daemon stopped unexpectedly"
FINDINGS_PAGE_BYTES = 4 << 20  # a findings reply stays far below any client's frame limit
FINDINGS_PAGE_COUNT = 10_000
WAL_SIZE_LIMIT = 64 << 20  # the WAL is truncated back to this after a checkpoint
BUSY_TIMEOUT = 30.0  # seconds a write waits for another process's transaction before it fails
_PRUNE_BATCH = 200  # sessions deleted per transaction: the store thread is never held long

_finding_decoder = msgspec.json.Decoder(Finding)


def finding_key(finding: Finding) -> bytes:
    """A finding's identity for a resumed session: everything but the id and the time the store gave it."""
    return msgspec.json.encode(msgspec.structs.replace(finding, id=0, time=0.0))


_info_decoder = msgspec.json.Decoder(SessionInfo)
_encode = msgspec.json.encode


class StoreUnavailable(Exception):
    """A write the store could not make. ``full``: the disk (or the size limit) left no room."""

    def __init__(self, message: str, *, full: bool) -> None:
        super().__init__(message)
        self.full = full


@dataclass(frozen=True, slots=True)
class Pruned:
    sessions: int = 0
    findings: int = 0


@dataclass(frozen=True, slots=True)
class FindingsPage:
    findings: list[Finding]
    next: int  # the cursor of the next page (the last id in this one); 0: this was the last page


def _unavailable(exc: sqlite3.Error, doing: str) -> StoreUnavailable:
    full = getattr(exc, "sqlite_errorcode", 0) == sqlite3.SQLITE_FULL or "full" in str(exc)
    what = "the disk under the state directory is full" if full else str(exc)
    return StoreUnavailable(f"cannot {doing}: {what}", full=full)


class Store(ABC):
    """What the daemon asks of its store: ``FindingsStore`` (this module's SQLite file) or
    ``postgres.PostgresStore`` (one database for many hosts): the same methods over the same tables, and the queries
    both answer alike here."""

    path: Path
    max_bytes: int

    @abstractmethod
    def close(self) -> None: ...
    @abstractmethod
    def open_session(self, job: str, *, pid: int = 0, uid: int = -1) -> int: ...
    @abstractmethod
    def reopen_session(self, ident: int) -> None: ...
    @abstractmethod
    def close_session(self, info: SessionInfo) -> None: ...
    @abstractmethod
    def close_abandoned(
        self, reason: str = CRASH_END_REASON, *, mine: Callable[[str, int], bool] | None = None
    ) -> int: ...
    @abstractmethod
    def add_findings(self, findings: list[Finding]) -> None: ...
    @abstractmethod
    def file_bytes(self) -> int: ...
    @abstractmethod
    def prune(self, *, max_age: float = 0.0, now: float | None = None) -> Pruned: ...

    @abstractmethod
    def _rows(self, query: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Every row a read-only query (``?`` placeholders) selects."""

    # --- what both stores answer alike, from their rows -----------------------------------------------------------

    def session(self, ident: int) -> SessionInfo | None:
        """A stored session as it was last recorded, changing nothing; None when there is none."""
        rows = self._rows("SELECT info, uid FROM sessions WHERE id = ?", (ident,))
        if not rows:
            return None
        info = _info_decoder.decode(bytes(rows[0][0]))
        info.session, info.uid = ident, rows[0][1]
        return info

    def ended_sessions(self, limit: int = 1000, *, uid: int | None = None) -> list[SessionInfo]:
        """The newest ended sessions (of one uid, or of all when ``uid`` is None), oldest first."""
        query = "SELECT id, info, uid FROM sessions WHERE ended IS NOT NULL"
        args: list[object] = []
        if uid is not None:
            query += " AND uid = ?"
            args.append(uid)
        infos = []
        for ident, body, owner in reversed(self._rows(query + " ORDER BY id DESC LIMIT ?", (*args, limit))):
            info = _info_decoder.decode(bytes(body))
            info.session, info.uid = ident, owner
            infos.append(info)
        return infos

    def newest_finding(self, *, uid: int | None = None) -> int:
        """The id of the newest finding (of one uid, or of any when ``uid`` is None); 0 when there is none. One
        step down the (uid, id) index, however many findings there are."""
        where, args = _where(uid=uid)
        [(newest,)] = self._rows(f"SELECT max(id) FROM findings{where}", args)
        return int(newest or 0)

    def findings_page(
        self,
        *,
        job: str = "",
        session: int = 0,
        uid: int | None = None,
        after: int = 0,
        limit: int = FINDINGS_PAGE_COUNT,
        max_bytes: int = FINDINGS_PAGE_BYTES,
        kinds: Collection[str] | None = None,
        since: float = 0.0,
    ) -> FindingsPage:
        """Findings with ids above ``after``, in id order: at most ``limit`` of them and about ``max_bytes``
        (always at least one), and where the next page starts. ``kinds``: only these (None: any kind; empty: none);
        ``since``: only those stored at or after this time."""
        if kinds is not None and not kinds:
            return FindingsPage([], 0)
        where, args = _where(job=job, session=session, uid=uid, after=after, kinds=kinds, since=since)
        # One row more than the page holds tells whether another page follows, with no cursor left open.
        rows = self._rows(f"SELECT id, body FROM findings{where} ORDER BY id LIMIT ?", (*args, min(limit, 1 << 62) + 1))
        return paged(rows, limit, max_bytes)

    def findings(
        self,
        *,
        job: str = "",
        session: int = 0,
        uid: int | None = None,
        limit: int = 100_000,
        kinds: Collection[str] | None = None,
        since: float = 0.0,
    ) -> list[Finding]:
        return self.findings_page(
            job=job, session=session, uid=uid, limit=limit, max_bytes=1 << 62, kinds=kinds, since=since
        ).findings

    def finding_keys(self, session: int) -> list[bytes]:
        """What identifies each finding stored for a session (all but its id and time)."""
        return [finding_key(f) for f in self.findings(session=session, limit=1 << 62)]


def paged(rows: Iterable[tuple[int, bytes]], limit: int, max_bytes: int) -> FindingsPage:
    """Rows (id, body) in id order as a page: at most ``limit`` findings and about ``max_bytes`` (always at least
    one), and where the next page starts (0: none follows)."""
    found: list[Finding] = []
    size = 0
    for ident, body in rows:
        if len(found) == limit or (found and size + len(body) > max_bytes):
            return FindingsPage(found, found[-1].id)
        finding = _finding_decoder.decode(bytes(body))
        finding.id = ident
        found.append(finding)
        size += len(body)
    return FindingsPage(found, 0)


class FindingsStore(Store):
    def __init__(self, path: Path, *, max_bytes: int = 0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_bytes = max_bytes  # 0: no size limit
        # With worker processes every process opens the file; a writer waits its turn (WAL: readers never wait).
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT)
        # Freed pages go back to the file system a little at a time (incremental_vacuum after each prune); this
        # must be set before the first table exists, or take a VACUUM (see _migrate).
        self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        self._db.executescript(_SCHEMA)
        self._migrate()
        self._db.executescript(_UID_INDEXES)
        # Findings name users' programs, files and addresses: the store is the daemon's alone.
        for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if part.exists():
                part.chmod(0o600)
        self._lock = threading.Lock()  # the connection is shared; the lock makes any misuse merely slow

    def _migrate(self) -> None:
        """A store written before rows carried their uid: add the columns and fill them from the sessions."""
        for table in ("sessions", "findings"):
            columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if "uid" not in columns:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN uid INTEGER NOT NULL DEFAULT -1")
                if table == "sessions":
                    self._db.execute("UPDATE sessions SET uid = COALESCE(json_extract(info, '$.uid'), -1)")
                else:
                    self._db.execute(
                        "UPDATE findings SET uid = COALESCE((SELECT uid FROM sessions WHERE id = session), -1)"
                    )
        if self._db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            try:  # an older store: once, so that pruning can give space back
                self._db.execute("VACUUM")
            except sqlite3.Error:
                pass  # no room for the copy VACUUM makes: pruning still stops growth

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _rows(self, query: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(query, tuple(args)).fetchall()

    # --- sessions ---------------------------------------------------------------------------------------------

    def open_session(self, job: str, *, pid: int = 0, uid: int = -1) -> int:
        """A new session id, unique across daemon restarts. Who owns it is stored at once: a session whose daemon
        died has no closing record, and may be resumed only by its owner."""
        info = _encode(SessionInfo(session=0, job=job, pid=pid, uid=uid, started=time.time()))
        with self._lock:
            try:
                cursor = self._db.execute(
                    "INSERT INTO sessions (job, started, info, uid) VALUES (?, ?, ?, ?)", (job, time.time(), info, uid)
                )
            except sqlite3.Error as exc:
                raise _unavailable(exc, "open a session") from exc
            return int(cursor.lastrowid or 0)

    def reopen_session(self, ident: int) -> None:
        """Mark a stored session open again, for its owner to resume (the caller has checked who asks)."""
        with self._lock:
            try:
                self._db.execute("UPDATE sessions SET ended = NULL WHERE id = ?", (ident,))
            except sqlite3.Error as exc:
                raise _unavailable(exc, f"reopen session {ident}") from exc

    def close_session(self, info: SessionInfo) -> None:
        with self._lock:
            try:
                self._db.execute(
                    "UPDATE sessions SET ended = ?, info = ? WHERE id = ?",
                    (info.ended, _encode(info), info.session),
                )
            except sqlite3.Error as exc:
                raise _unavailable(exc, f"record the end of session {info.session}") from exc

    def close_abandoned(self, reason: str = CRASH_END_REASON, *, mine: Callable[[str, int], bool] | None = None) -> int:
        """Close the sessions a daemon that died left open (none is live at start), with their own reason and the
        findings they stored counted; how many there were. ``mine(job, uid)``: only those a worker process that
        (re)starts would have served."""
        now = time.time()
        with self._lock:
            rows = self._db.execute(
                "SELECT s.id, s.info, s.uid, (SELECT count(*) FROM findings f WHERE f.session = s.id), s.job "
                "FROM sessions s WHERE s.ended IS NULL"
            ).fetchall()
            rows = [row[:4] for row in rows if mine is None or mine(row[4], row[2])]
            if not rows:
                return 0
            self._db.execute("BEGIN")
            try:
                for ident, body, uid, stored in rows:
                    info = _info_decoder.decode(body)
                    info.session, info.uid, info.state, info.end_reason = ident, uid, "ended", reason
                    info.ended, info.findings = now, max(info.findings, stored)
                    self._db.execute(
                        "UPDATE sessions SET ended = ?, info = ? WHERE id = ?", (now, _encode(info), ident)
                    )
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise _unavailable(exc, "close the sessions a stopped daemon left open") from exc
            except BaseException:
                self._rollback()
                raise
        return len(rows)

    # --- findings ---------------------------------------------------------------------------------------------

    def add_findings(self, findings: list[Finding]) -> None:
        """Store findings, filling in their ids and times; each row takes its uid from its session. All or none
        are stored: StoreUnavailable says why none were."""
        now = time.time()
        rows = []
        for finding in findings:
            finding.time = finding.time or now
            # The id lives in its column; the body is stored without it and given it back on read.
            rows.append((finding.job, finding.session, finding.time, finding.kind, _encode(finding), finding.session))
        with self._lock:
            if self.max_bytes and self._used_bytes() + sum(len(r[4]) for r in rows) > self.max_bytes:
                self._prune_to_size()
                if self._used_bytes() >= self.max_bytes:
                    raise StoreUnavailable(
                        f"the store is at its size limit ({self.max_bytes} bytes) and holds no ended session to delete",
                        full=True,
                    )
            try:
                self._db.execute("BEGIN")
                for finding, row in zip(findings, rows, strict=True):
                    cursor = self._db.execute(
                        "INSERT INTO findings (job, session, time, kind, body, uid) "
                        "VALUES (?, ?, ?, ?, ?, COALESCE((SELECT uid FROM sessions WHERE id = ?), -1))",
                        row,
                    )
                    finding.id = int(cursor.lastrowid or 0)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                for finding in findings:
                    finding.id = 0
                raise _unavailable(exc, f"store {len(findings)} finding(s)") from exc
            except BaseException:
                self._rollback()
                raise

    # --- size and age -----------------------------------------------------------------------------------------

    def file_bytes(self) -> int:
        """What the store takes on disk: the database and its WAL."""
        total = 0
        for part in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                total += part.stat().st_size
            except OSError:
                pass
        return total

    def prune(self, *, max_age: float = 0.0, now: float | None = None) -> Pruned:
        """Delete the ended sessions older than ``max_age`` seconds (0: no age limit) and their findings, then
        the oldest ended ones while the store is over its size limit; give the space back and checkpoint."""
        cutoff = (now if now is not None else time.time()) - max_age
        sessions = findings = 0
        with self._lock:
            while max_age > 0:
                gone = self._delete_ended("AND ended < ?", (cutoff,))
                if not gone.sessions:
                    break
                sessions, findings = sessions + gone.sessions, findings + gone.findings
            if self.max_bytes:
                gone = self._prune_to_size()
                sessions, findings = sessions + gone.sessions, findings + gone.findings
            try:
                self._db.execute("PRAGMA incremental_vacuum")
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass  # the space comes back at the next try
        return Pruned(sessions, findings)

    def _prune_to_size(self) -> Pruned:
        sessions = findings = 0
        while self._used_bytes() > self.max_bytes * 0.9:  # some room below the limit: not one prune per write
            gone = self._delete_ended("", ())
            if not gone.sessions:
                break
            sessions, findings = sessions + gone.sessions, findings + gone.findings
        return Pruned(sessions, findings)

    def _delete_ended(self, condition: str, args: tuple[object, ...]) -> Pruned:
        """Delete one batch of the oldest ended sessions that meet ``condition``, with their findings."""
        ids = [
            ident
            for (ident,) in self._db.execute(
                f"SELECT id FROM sessions WHERE ended IS NOT NULL {condition} ORDER BY id LIMIT ?",
                (*args, _PRUNE_BATCH),
            )
        ]
        if not ids:
            return Pruned()
        marks = ",".join("?" * len(ids))
        try:
            self._db.execute("BEGIN")
            findings = self._db.execute(f"DELETE FROM findings WHERE session IN ({marks})", ids).rowcount
            self._db.execute(f"DELETE FROM sessions WHERE id IN ({marks})", ids)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise _unavailable(exc, "delete old sessions") from exc
        return Pruned(len(ids), findings)

    def _used_bytes(self) -> int:
        """Bytes the database's live pages take (free pages excluded; they are reused before the file grows)."""
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        return int((pages - free) * self._db.execute("PRAGMA page_size").fetchone()[0])

    def _rollback(self) -> None:
        """Undo an open transaction. SQLite may have rolled it back already (it does on SQLITE_FULL): then there
        is nothing to undo, and the error that ended it is the one to report, not "cannot rollback"."""
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass


def _where(
    *,
    job: str = "",
    session: int = 0,
    uid: int | None = None,
    after: int = 0,
    kinds: Collection[str] | None = None,
    since: float = 0.0,
) -> tuple[str, list[object]]:
    clauses: list[str] = []
    args: list[object] = []
    if kinds is not None:
        named = sorted(set(kinds))
        clauses.append(f"kind IN ({','.join('?' * len(named))})")
        args.extend(named)
    if since > 0:
        clauses.append("time >= ?")
        args.append(since)
    for clause, value, given in (
        ("job = ?", job, bool(job)),
        ("session = ?", session, bool(session)),
        ("uid = ?", uid, uid is not None),
        ("id > ?", after, bool(after)),
    ):
        if given:
            clauses.append(clause)
            args.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args
