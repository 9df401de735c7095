"""Findings and session history in PostgreSQL: one store for a fleet (``serve --store postgresql://…``).

The same tables and queries as the SQLite store (``store.py``), behind the same methods, so the daemon does not know
which it has. What differs, and why:

- every session row names the daemon that opened it (host and state directory): many daemons share the database,
  and each closes, or keeps for resuming, only the sessions it served;
- the schema is built by the numbered files of ``migrations/postgresql``, each applied once (``schema_migrations``)
  under an advisory lock, so daemons that start together do not race;
- who reads what is enforced by the database too (row-level security, ``0002_readers.sql``): a user who queries the
  database directly (``findings --store URL``) as their own role sees only their uids' rows. The daemons connect as
  the tables' owner and select by uid in SQL, as with SQLite;
- the size bound counts the tables' relations (``pg_total_relation_size``); space comes back through autovacuum.

Blocking, like the SQLite store: the daemon calls it from its one store thread. A connection lost to a restart of
the server is opened again at the next call; a write that fails raises ``StoreUnavailable``.
"""

from __future__ import annotations

import pwd
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

try:
    import psycopg
except ImportError as missing:  # an optional dependency: say how to get it where the store is asked for
    raise ImportError("a PostgreSQL store needs psycopg 3: pip install 'sanitizerd[postgresql]'") from missing

from sanitizerd.findings.store import (
    _PRUNE_BATCH,
    CRASH_END_REASON,
    Pruned,
    Store,
    StoreUnavailable,
    _encode,
    _info_decoder,
)
from sanitizerd_protocol.model import Finding, SessionInfo

_MIGRATIONS = "migrations/postgresql"
_MIGRATION_LOCK = 0x5A417A  # pg_advisory_xact_lock key: one daemon migrates at a time


def is_url(store: str) -> bool:
    return store.startswith(("postgresql://", "postgres://"))


def daemon_identity(state_dir: Path) -> str:
    """What names this daemon's sessions in a shared database: its host and its state directory."""
    return f"{socket.gethostname()}:{state_dir.resolve()}"


def _sql(query: str) -> str:
    """The SQLite store's ``?`` placeholders as psycopg's."""
    return query.replace("?", "%s")


def migrations() -> list[tuple[int, str]]:
    """(version, SQL) of every migration kept in the package, in order."""
    files = resources.files("sanitizerd.findings").joinpath(_MIGRATIONS)
    found = sorted((int(entry.name.split("_", 1)[0]), entry.read_text()) for entry in files.iterdir()
                   if entry.name.endswith(".sql"))  # fmt: skip
    return found


class PostgresStore(Store):
    def __init__(self, url: str, *, daemon: str = "", max_bytes: int = 0, migrate: bool = True) -> None:
        """``migrate``: bring the schema up to date first (a daemon); a reader (``findings --store``) does not, and
        needs no right but to select."""
        self.url = url
        self.path = Path("postgresql")  # what logs name; the URL may hold a password
        self.daemon = daemon
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db: psycopg.Connection[Any] | None = None
        with self._using("open the store"):
            db = self._connection()
            if migrate:
                self._migrate(db)

    # --- connection and schema --------------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        if self._db is None or self._db.closed or self._db.broken:
            self._db = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        return self._db

    @staticmethod
    def _migrate(db: psycopg.Connection[Any]) -> None:
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied DOUBLE "
                       "PRECISION NOT NULL)")  # fmt: skip
            done = {version for (version,) in db.execute("SELECT version FROM schema_migrations")}
            for version, script in migrations():
                if version not in done:
                    db.execute(script)  # type: ignore[arg-type]  # our own files, never a client's text
                    db.execute("INSERT INTO schema_migrations VALUES (%s, %s)", (version, time.time()))

    @contextmanager
    def _using(self, doing: str = "read the store") -> Iterator[psycopg.Connection[Any]]:
        """The connection, under the lock; a failure (the server gone, a full disk) is StoreUnavailable."""
        with self._lock:
            try:
                yield self._connection()
            except psycopg.Error as exc:
                said = " ".join(str(exc).split())  # libpq's words span lines (a hint after a tab)
                raise StoreUnavailable(f"cannot {doing}: {said}", full=_is_full(exc)) from exc

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()

    def _rows(self, query: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._using() as db:
            return db.execute(_sql(query), tuple(args)).fetchall()  # type: ignore[arg-type]  # our own SQL

    # --- sessions ---------------------------------------------------------------------------------------------

    def open_session(self, job: str, *, pid: int = 0, uid: int = -1) -> int:
        now = time.time()
        info = _encode(SessionInfo(session=0, job=job, pid=pid, uid=uid, started=now))
        with self._using("open a session") as db:
            (ident,) = db.execute(
                "INSERT INTO sessions (job, started, info, uid, daemon) VALUES (%s, %s, %s, %s, %s) RETURNING id",
                (job, now, info, uid, self.daemon),
            ).fetchone()  # type: ignore[misc]
            role = _login_name(uid)
            if role:
                db.execute("INSERT INTO readers VALUES (%s, %s) ON CONFLICT DO NOTHING", (role, uid))
        return int(ident)

    def reopen_session(self, ident: int) -> None:
        with self._using(f"reopen session {ident}") as db:
            db.execute("UPDATE sessions SET ended = NULL, daemon = %s WHERE id = %s", (self.daemon, ident))

    def close_session(self, info: SessionInfo) -> None:
        with self._using(f"record the end of session {info.session}") as db:
            db.execute(
                "UPDATE sessions SET ended = %s, info = %s WHERE id = %s", (info.ended, _encode(info), info.session)
            )

    def close_abandoned(self, reason: str = CRASH_END_REASON, *, mine: Callable[[str, int], bool] | None = None) -> int:
        """As the SQLite store's, of the sessions this daemon left open (other daemons' are live elsewhere)."""
        now = time.time()
        with self._using("close the sessions a stopped daemon left open") as db, db.transaction():
            rows = db.execute(
                "SELECT s.id, s.info, s.uid, (SELECT count(*) FROM findings f WHERE f.session = s.id), s.job "
                "FROM sessions s WHERE s.ended IS NULL AND s.daemon = %s FOR UPDATE",
                (self.daemon,),
            ).fetchall()
            rows = [row[:4] for row in rows if mine is None or mine(row[4], row[2])]
            for ident, body, uid, stored in rows:
                info = _info_decoder.decode(body)
                info.session, info.uid, info.state, info.end_reason = ident, uid, "ended", reason
                info.ended, info.findings = now, max(info.findings, stored)
                db.execute("UPDATE sessions SET ended = %s, info = %s WHERE id = %s", (now, _encode(info), ident))
        return len(rows)

    # --- findings ---------------------------------------------------------------------------------------------

    def add_findings(self, findings: list[Finding]) -> None:
        now = time.time()
        for finding in findings:
            finding.time = finding.time or now
        bodies = [_encode(finding) for finding in findings]
        if self.max_bytes and self._used_bytes() + sum(map(len, bodies)) > self.max_bytes:
            self.prune()
            if self._used_bytes() >= self.max_bytes:
                raise StoreUnavailable(
                    f"the store is at its size limit ({self.max_bytes} bytes) and holds no ended session to delete",
                    full=True,
                )
        try:
            with self._using(f"store {len(findings)} finding(s)") as db, db.transaction():
                for finding, body in zip(findings, bodies, strict=True):
                    (ident,) = db.execute(
                        "INSERT INTO findings (job, session, time, kind, body, uid) VALUES (%s, %s, %s, %s, %s, "
                        "COALESCE((SELECT uid FROM sessions WHERE id = %s), -1)) RETURNING id",
                        (finding.job, finding.session, finding.time, finding.kind, body, finding.session),
                    ).fetchone()  # type: ignore[misc]
                    finding.id = int(ident)
        except BaseException:
            for finding in findings:
                finding.id = 0
            raise

    # --- size and age -----------------------------------------------------------------------------------------

    def file_bytes(self) -> int:
        """What the store's tables take in the database, indexes and TOAST included."""
        try:
            return self._used_bytes()
        except StoreUnavailable:
            return 0

    def _used_bytes(self) -> int:
        with self._using() as db:
            (used,) = db.execute(
                "SELECT pg_total_relation_size('sessions') + pg_total_relation_size('findings')"
            ).fetchone()  # type: ignore[misc]
        return int(used)

    def prune(self, *, max_age: float = 0.0, now: float | None = None) -> Pruned:
        """As the SQLite store's; every daemon prunes every host's ended sessions by the same rules."""
        cutoff = (now if now is not None else time.time()) - max_age
        sessions = findings = 0
        while max_age > 0:
            gone = self._delete_ended("AND ended < %s", (cutoff,))
            if not gone.sessions:
                break
            sessions, findings = sessions + gone.sessions, findings + gone.findings
        while self.max_bytes and self._used_bytes() > self.max_bytes * 0.9:
            gone = self._delete_ended("", ())
            if not gone.sessions:
                break
            sessions, findings = sessions + gone.sessions, findings + gone.findings
        return Pruned(sessions, findings)

    def _delete_ended(self, condition: str, args: tuple[object, ...]) -> Pruned:
        with self._using("delete old sessions") as db, db.transaction():
            ids = [ident for (ident,) in db.execute(
                f"SELECT id FROM sessions WHERE ended IS NOT NULL {condition} ORDER BY id LIMIT %s FOR UPDATE "
                "SKIP LOCKED", (*args, _PRUNE_BATCH),
            )]  # fmt: skip
            if not ids:
                return Pruned()
            findings = db.execute("DELETE FROM findings WHERE session = ANY(%s)", (ids,)).rowcount
            db.execute("DELETE FROM sessions WHERE id = ANY(%s)", (ids,))
        return Pruned(len(ids), findings)


def _login_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return ""


def _is_full(exc: psycopg.Error) -> bool:
    return getattr(exc, "sqlstate", "") in ("53100", "53200")  # disk_full, out_of_memory
