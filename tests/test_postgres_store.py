"""One store for a fleet: the PostgreSQL store (``serve --store postgresql://…``) against a real server. The same
behaviour as the SQLite store (the SQLite tests run again on it), the schema's migrations, each daemon closing only
the sessions it left open, and the acceptance: two daemons writing to one database, whose findings one query
returns to their user and not to another."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanitizerd.findings.postgres import PostgresStore, migrations
from sanitizerd.findings.store import StoreUnavailable
from tests import other_uid
from tests import test_store as sqlite_tests
from tests.conftest import DEMO, RunningDaemon, sanitizerd, start_daemon, stop_daemon
from tests.other_uid import NOBODY
from tests.postgres_server import PostgresServer, postgres  # noqa: F401  (a fixture)
from tests.test_store import finding


@pytest.fixture
def database(postgres: PostgresServer) -> str:  # noqa: F811
    return postgres.new_database()


@pytest.fixture
def store(postgres: PostgresServer, database: str) -> Iterator[PostgresStore]:  # noqa: F811
    s = PostgresStore(postgres.url(database), daemon="host-a:/state")
    yield s
    s.close()


class TestSameAsSQLite(sqlite_tests.TestFindingsStore):
    """Every behaviour of the SQLite store's tests, on the PostgreSQL store (its ``store`` fixture above); the tests
    of SQLite's own file (paths, pragmas, reopening, its migration of uid columns) are left out."""

    test_creates_parent_directories = None  # type: ignore[assignment]
    test_persists_across_reopen = None  # type: ignore[assignment]
    test_a_full_database_reports_full_and_stores_none_of_the_batch = None  # type: ignore[assignment]
    test_an_older_store_gains_uid_columns_filled_from_its_sessions = None  # type: ignore[assignment]
    test_prune_by_age_then_by_size = None  # type: ignore[assignment]


class TestFiltersSameAsSQLite(sqlite_tests.TestFilters):
    pass


class TestPostgres:
    def test_migrations_apply_once_however_many_daemons_start_together(
        self, postgres: PostgresServer, database: str  # noqa: F811
    ) -> None:
        errors: list[BaseException] = []

        def start() -> None:
            try:
                PostgresStore(postgres.url(database), daemon="d").close()
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=start) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        applied = postgres.sql("SELECT version FROM schema_migrations ORDER BY version", database).split()
        assert applied == [str(version) for version, _ in migrations()] == ["1", "2", "3"]

    def test_each_daemon_closes_and_keeps_only_its_own_sessions(
        self, postgres: PostgresServer, database: str  # noqa: F811
    ) -> None:
        a = PostgresStore(postgres.url(database), daemon="host-a:/state")
        b = PostgresStore(postgres.url(database), daemon="host-b:/state")
        mine, theirs = a.open_session("job-a", uid=0), b.open_session("job-b", uid=0)
        assert a.close_abandoned() == 1  # host-a restarted: its session, not host-b's live one
        assert a.session(mine).state == "ended" and b.session(theirs).state == "live"  # type: ignore[union-attr]
        a.reopen_session(mine)
        assert b.close_abandoned() == 1  # only theirs: reopening gave mine back to host-a
        a.close()
        b.close()

    def test_prune_by_age_and_size(self, postgres: PostgresServer, database: str) -> None:  # noqa: F811
        store = PostgresStore(postgres.url(database), daemon="d")
        for age in (100.0, 200.0):
            session = store.open_session("j", uid=0)
            store.add_findings([finding("j", session, 0x10)])
            info = store.session(session)
            assert info is not None
            info.state, info.ended = "ended", age
            store.close_session(info)
        assert store.prune(max_age=1000.0, now=1150.0).sessions == 1  # ended at 100: older than 1000 s at 1150
        assert [f.time > 0 for f in store.findings()] == [True]
        store.max_bytes = 1  # nothing fits: every ended session goes, then a write is refused as full
        assert store.prune().sessions == 1
        store.open_session("j", uid=0)
        with pytest.raises(StoreUnavailable, match="size limit"):
            store.add_findings([finding("j", 3, 0x10)])
        store.close()

    def test_a_lost_connection_is_one_refused_call_then_opened_again(
        self, postgres: PostgresServer, database: str  # noqa: F811
    ) -> None:
        """The server ends the store's connection (a restart, an administrator): the call that finds it gone fails
        as StoreUnavailable, which the daemon counts as unstored; the next opens a new connection."""
        store = PostgresStore(postgres.url(database), daemon="d")
        session = store.open_session("j", uid=0)
        postgres.sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'")
        with pytest.raises(StoreUnavailable, match="cannot store 1 finding"):
            store.add_findings([finding("j", session, 0x10)])
        store.add_findings([finding("j", session, 0x20)])
        assert [f.address for f in store.findings()] == [0x20]
        store.close()

    def test_a_server_that_is_not_there_is_one_line_at_start(self, short_dir: Path) -> None:
        url = f"postgresql://sanitizerd@/findings?host={short_dir}&port=1"
        result = sanitizerd("serve", "--socket", str(short_dir / "s.sock"), "--state-dir", str(short_dir / "state"),
                            "--workers", "1", "--store", url, timeout=60)  # fmt: skip
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("sanitizerd: cannot start: the findings store: cannot open the store:")
        assert result.stderr.strip().count("\n") == 0


def _demo(daemon: RunningDaemon) -> str:
    run = sanitizerd("run", "--socket", str(daemon.socket), "-t", "memcheck", "--leak-check", "yes", "--",
                     sys.executable, str(DEMO))  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.stdout.rsplit("SUMMARY: job ", 1)[1].split(":", 1)[0]


def test_two_daemons_one_database_one_query_per_user(postgres: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    """The acceptance: two daemons (two state directories, two sockets) with --store on one database; root's
    findings from both come back from one `findings --store` query as root's role, nobody's do not, and nobody's
    role reads only nobody's. Each daemon's own socket still answers only for its users."""
    import tempfile

    database = postgres.new_database()
    daemons = []
    try:
        for _ in range(2):
            base = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
            daemons.append(start_daemon(base, "--store", postgres.url(database)))
        jobs = [_demo(daemon) for daemon in daemons]
        for i, daemon in enumerate(daemons):
            other_uid.open_to_nobody(daemon.socket)
            answer = other_uid.as_uid(NOBODY, daemon, other_uid.producer_session(f"nobody-{i}"), expect=3)
            assert [a["type"] for a in answer] == ["welcome", "verdict", "closed"], answer
        postgres.grant_readers(database)

        def read(role: str, *options: str) -> list[dict[str, object]]:
            result = sanitizerd("findings", "--store", postgres.url(database, role), "--format", "json", *options)
            assert result.returncode == 0, result.stderr
            return json.loads(result.stdout)  # type: ignore[no-any-return]

        roots = read("root")
        assert {f["job"] for f in roots} == set(jobs) and len(roots) == 8  # the demo's four bugs, on each daemon
        assert {f["job"] for f in read("nobody")} == {"nobody-0", "nobody-1"}
        assert {f["kind"] for f in read("root", "--kind", "illegal_read")} == {"illegal_read"}
        assert len(read("sanitizerd")) == 10  # the daemons' own role: every user's
        # Straight SQL as nobody's role: the database itself hides root's rows, not only the CLI.
        assert postgres.sql("SET ROLE nobody; SELECT count(*) FROM findings WHERE uid = 0", database).strip() == "0"
        assert postgres.sql("SET ROLE nobody; SELECT count(*) FROM sessions WHERE uid = 0", database).strip() == "0"
        # `readers` names every user's login: each role reads its own row only, the daemons' role all of them.
        assert postgres.sql("SET ROLE nobody; SELECT role, uid FROM readers", database).split() == [
            f"nobody|{NOBODY.pw_uid}"
        ]
        assert postgres.sql("SET ROLE root; SELECT role, uid FROM readers", database).split() == ["root|0"]
        assert sorted(postgres.sql("SET ROLE sanitizerd; SELECT role FROM readers", database).split()) == [
            "nobody", "root"
        ]
        # Through a daemon's socket, as before: nobody reads nobody's own, of that daemon's database alike.
        _, seen = other_uid.view_of(NOBODY, daemons[0])
        assert seen and {f["job"] for f in seen} <= {"nobody-0", "nobody-1"}
    finally:
        for daemon in daemons:
            assert stop_daemon(daemon) == 0, daemon.log_text()
