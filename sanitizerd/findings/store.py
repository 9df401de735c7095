"""Findings and session history in an embedded SQLite database under the state directory.

SQLite allows one writer; the daemon calls these (blocking) methods from one worker thread at a time.
WAL keeps readers (``sanitizerd findings``) from blocking the writer, and the file survives restarts.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import msgspec

from sanitizerd.findings.model import Finding
from sanitizerd.protocol.messages import SessionInfo

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    info BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_job ON sessions(job);
CREATE TABLE IF NOT EXISTS findings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    session INTEGER NOT NULL,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS findings_job ON findings(job);
CREATE INDEX IF NOT EXISTS findings_session ON findings(session);
"""

_finding_decoder = msgspec.json.Decoder(Finding)


def finding_key(finding: Finding) -> bytes:
    """A finding's identity for a resumed session: everything but the id and the time the store gave it."""
    return msgspec.json.encode(msgspec.structs.replace(finding, id=0, time=0.0))


_info_decoder = msgspec.json.Decoder(SessionInfo)
_encode = msgspec.json.encode


class FindingsStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        # Findings name users' programs, files and addresses: the store is the daemon's alone.
        for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if part.exists():
                part.chmod(0o600)
        self._lock = threading.Lock()  # the connection is shared; the lock makes any misuse merely slow

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def open_session(self, job: str, *, pid: int = 0, uid: int = -1) -> int:
        """A new session id, unique across daemon restarts. Who owns it is stored at once: a session whose daemon
        died has no closing record, and may be resumed only by its owner."""
        info = _encode(SessionInfo(session=0, job=job, pid=pid, uid=uid, started=time.time()))
        with self._lock:
            cursor = self._db.execute(
                "INSERT INTO sessions (job, started, info) VALUES (?, ?, ?)", (job, time.time(), info)
            )
            return int(cursor.lastrowid or 0)

    def reopen_session(self, ident: int) -> SessionInfo | None:
        """A stored session, marked open again for its client to resume; None when there is no such session."""
        with self._lock:
            row = self._db.execute("SELECT info FROM sessions WHERE id = ?", (ident,)).fetchone()
            if row is None:
                return None
            self._db.execute("UPDATE sessions SET ended = NULL WHERE id = ?", (ident,))
        return _info_decoder.decode(row[0])

    def finding_keys(self, session: int) -> list[bytes]:
        """What identifies each finding stored for a session (all but its id and time)."""
        return [finding_key(f) for f in self.findings(session=session)]

    def close_session(self, info: SessionInfo) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE sessions SET ended = ?, info = ? WHERE id = ?",
                (info.ended, _encode(info), info.session),
            )

    def add_findings(self, findings: list[Finding]) -> None:
        """Store findings, filling in their ids and times."""
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for finding in findings:
                    finding.time = finding.time or now
                    # The id lives in its column; the body is stored without it and given it back on read.
                    cursor = self._db.execute(
                        "INSERT INTO findings (job, session, time, kind, body) VALUES (?, ?, ?, ?, ?)",
                        (finding.job, finding.session, finding.time, finding.kind, _encode(finding)),
                    )
                    finding.id = int(cursor.lastrowid or 0)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def findings(self, *, job: str = "", session: int = 0, limit: int = 100_000) -> list[Finding]:
        query: str
        args: list[object]
        query, args = "SELECT id, body FROM findings", []
        where = []
        if job:
            where.append("job = ?")
            args.append(job)
        if session:
            where.append("session = ?")
            args.append(session)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY id LIMIT ?"
        args.append(limit)
        with self._lock:
            rows = self._db.execute(query, args).fetchall()
        found = []
        for ident, body in rows:
            finding = _finding_decoder.decode(body)
            finding.id = ident
            found.append(finding)
        return found

    def ended_sessions(self, limit: int = 1000) -> list[SessionInfo]:
        with self._lock:
            rows = self._db.execute(
                "SELECT info FROM sessions WHERE ended IS NOT NULL ORDER BY id DESC LIMIT ?", (limit,)
            ).fetchall()
        return [_info_decoder.decode(info) for (info,) in reversed(rows)]
