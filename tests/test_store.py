"""The SQLite findings store: ids, queries, and persistence across reopening."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from sanitizerd.findings.store import FindingsStore, Pruned, StoreUnavailable
from sanitizerd_protocol.messages import SessionInfo
from sanitizerd_protocol.model import Finding, Frame, make_finding


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "nested" / "findings.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[FindingsStore]:
    s = FindingsStore(db_path)
    yield s
    s.close()


def finding(job: str, session: int, address: int, kind: str = "illegal_read") -> Finding:
    return make_finding(
        kind,
        job=job,
        session=session,
        address=address,
        size=8,
        serial=address,
        kernel="add_custom",
        blocks={"aiv": [0, 1, 3]},
        location=Frame(file="add_custom.cpp", line=18, column=5),
        stack=[Frame(file="add_custom.cpp", line=18, column=5), Frame(file="main.cpp", line=3)],
        detail="d",
        count=3,
    )


def ended(session: int, job: str, **fields: object) -> SessionInfo:
    values: dict[str, object] = {"state": "ended", "started": 10.0, "ended": 20.0, "end_reason": "closed by client"}
    values.update(fields)
    return SessionInfo(session=session, job=job, pid=1234, **values)  # type: ignore[arg-type]


class TestFindingsStore:
    def test_creates_parent_directories(self, store: FindingsStore, db_path: Path) -> None:
        """Opening a store creates its directory and database file."""
        assert db_path.exists()

    def test_ids_are_assigned_in_order(self, store: FindingsStore) -> None:
        """add_findings gives each finding a fresh increasing id and a time."""
        batch = [finding("a", 1, 0x10), finding("a", 1, 0x20)]
        store.add_findings(batch)
        store.add_findings([finding("a", 1, 0x30)])
        ids = [f.id for f in store.findings()]
        assert ids == sorted(ids) and len(set(ids)) == 3 and all(ids)
        assert [f.id for f in batch] == ids[:2]
        assert all(f.time > 0 for f in batch)

    def test_given_time_is_kept(self, store: FindingsStore) -> None:
        """A finding that already has a time keeps it."""
        f = finding("a", 1, 0x10)
        f.time = 123.25
        store.add_findings([f])
        assert store.findings()[0].time == 123.25

    def test_findings_round_trip_whole(self, store: FindingsStore) -> None:
        """A stored finding reads back equal to what was stored, id included."""
        original = finding("a", 1, 0x10)
        store.add_findings([original])
        [back] = store.findings()
        assert back == original

    def test_query_by_job_and_session(self, store: FindingsStore) -> None:
        """findings filters by job, by session, by both, or returns everything."""
        store.add_findings([finding("a", 1, 1), finding("a", 2, 2), finding("b", 3, 3), finding("a", 1, 4)])
        assert [f.address for f in store.findings(job="a")] == [1, 2, 4]
        assert [f.address for f in store.findings(session=1)] == [1, 4]
        assert [f.address for f in store.findings(job="a", session=2)] == [2]
        assert [f.address for f in store.findings(job="b", session=1)] == []
        assert [f.address for f in store.findings()] == [1, 2, 3, 4]
        assert [f.address for f in store.findings(limit=2)] == [1, 2]

    def test_session_ids_are_unique(self, store: FindingsStore) -> None:
        """open_session hands out distinct, increasing ids."""
        ids = [store.open_session("a") for _ in range(3)]
        assert ids == sorted(ids) and len(set(ids)) == 3 and all(i > 0 for i in ids)

    def test_only_ended_sessions_are_listed(self, store: FindingsStore) -> None:
        """ended_sessions lists closed sessions in id order, not live ones."""
        first, live, second = (store.open_session(job) for job in ("a", "b", "c"))
        store.close_session(ended(second, "c", kernels=2))
        store.close_session(ended(first, "a", events=5))
        infos = store.ended_sessions()
        assert [(i.session, i.job) for i in infos] == [(first, "a"), (second, "c")]
        assert infos[0].events == 5 and infos[1].kernels == 2
        assert live not in [i.session for i in infos]

    def test_ended_sessions_limit_keeps_newest(self, store: FindingsStore) -> None:
        """With a limit, the newest ended sessions are returned, oldest first."""
        ids = [store.open_session("a") for _ in range(4)]
        for ident in ids:
            store.close_session(ended(ident, "a"))
        assert [i.session for i in store.ended_sessions(limit=2)] == ids[2:]

    def test_persists_across_reopen(self, db_path: Path) -> None:
        """Findings, ended sessions and the id counters survive closing and reopening the store."""
        store = FindingsStore(db_path)
        session = store.open_session("job1")
        store.add_findings([finding("job1", session, 0x10), finding("job1", session, 0x20, kind="memory_leak")])
        store.close_session(ended(session, "job1", findings=2))
        before = store.findings()
        store.close()

        reopened = FindingsStore(db_path)
        try:
            assert reopened.findings() == before
            assert [f.kind for f in reopened.findings(session=session)] == ["illegal_read", "memory_leak"]
            [info] = reopened.ended_sessions()
            assert (info.session, info.job, info.findings, info.state) == (session, "job1", 2, "ended")
            assert reopened.open_session("job2") > session
            reopened.add_findings([finding("job2", session + 1, 0x30)])
            assert reopened.findings()[-1].id > max(f.id for f in before)
        finally:
            reopened.close()


class TestOwnershipPagingAndLimits:
    def test_rows_are_selected_by_uid_however_many_others_exist(self, store: FindingsStore) -> None:
        """A uid's ended sessions and findings come back whatever number of other uids' sessions are newer."""
        mine = store.open_session("mine", uid=1000)
        store.add_findings([finding("mine", mine, 0x10)])
        store.close_session(ended(mine, "mine", uid=1000))
        for _ in range(1200):
            other = store.open_session("noise", uid=1001)
            store.close_session(ended(other, "noise", uid=1001))
        assert [s.session for s in store.ended_sessions(uid=1000)] == [mine]
        assert [f.session for f in store.findings(uid=1000)] == [mine]
        assert store.findings(uid=1001) == []
        # Another uid naming the job or session selects what it would for ones that do not exist: nothing.
        for theirs, none in ((dict(job="mine"), dict(job="nobody-used-it")), (dict(session=mine), dict(session=10**6))):
            assert store.findings_page(uid=1001, **theirs) == store.findings_page(uid=1001, **none)  # type: ignore[arg-type]
            assert store.findings_page(uid=1001, **theirs).findings == []  # type: ignore[arg-type]

    def test_looking_up_a_session_changes_nothing(self, store: FindingsStore) -> None:
        ident = store.open_session("a", uid=7)
        store.close_session(ended(ident, "a", uid=7))
        info = store.session(ident)
        assert info is not None and info.uid == 7 and info.state == "ended"
        assert [s.session for s in store.ended_sessions()] == [ident]  # still ended: only reopen_session reopens
        store.reopen_session(ident)
        assert store.ended_sessions() == [] and store.session(999) is None

    def test_findings_come_in_pages_with_a_cursor(self, store: FindingsStore) -> None:
        store.add_findings([finding("a", 1, address) for address in range(1, 26)])
        seen, after = [], 0
        while True:
            page = store.findings_page(job="a", after=after, limit=10)
            seen += [f.address for f in page.findings]
            if not page.next:
                break
            assert page.next == page.findings[-1].id
            after = page.next
        assert seen == list(range(1, 26))
        by_bytes = store.findings_page(job="a", max_bytes=1)  # one finding at least, whatever its size
        assert len(by_bytes.findings) == 1 and by_bytes.next

    def test_a_full_database_reports_full_and_stores_none_of_the_batch(self, store: FindingsStore) -> None:
        """SQLITE_FULL (here from max_page_count, as a full disk gives it) rolls the transaction back by itself:
        the error says "full", not "cannot rollback", and no finding of the batch is stored or given an id."""
        store._db.execute(f"PRAGMA max_page_count={store._db.execute('PRAGMA page_count').fetchone()[0] + 2}")
        batch = [finding("a", 1, address) for address in range(2000)]
        with pytest.raises(StoreUnavailable, match="disk under the state directory is full") as raised:
            store.add_findings(batch)
        assert raised.value.full and "rollback" not in str(raised.value)
        assert store.findings() == [] and all(f.id == 0 for f in batch)
        with pytest.raises(StoreUnavailable, match="cannot open a session"):
            for _ in range(1000):
                store.open_session("x" * 1000)

    def test_an_older_store_gains_uid_columns_filled_from_its_sessions(self, db_path: Path) -> None:
        db_path.parent.mkdir(parents=True)
        old = sqlite3.connect(db_path)
        old.executescript(
            "CREATE TABLE sessions (id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, started REAL NOT NULL,"
            " ended REAL, info BLOB NOT NULL);"
            "CREATE TABLE findings (id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, session INTEGER NOT NULL,"
            " time REAL NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL);"
        )
        info = msgspec.json.encode(ended(1, "j", uid=1234))
        old.execute("INSERT INTO sessions (job, started, ended, info) VALUES ('j', 1, 2, ?)", (info,))
        body = msgspec.json.encode(finding("j", 1, 0x10))
        old.execute(
            "INSERT INTO findings (job, session, time, kind, body) VALUES ('j', 1, 1, 'illegal_read', ?)", (body,)
        )
        old.commit()
        old.close()
        store = FindingsStore(db_path)
        try:
            assert [s.session for s in store.ended_sessions(uid=1234)] == [1]
            assert [f.address for f in store.findings(uid=1234)] == [0x10]
            assert store._db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # pruning gives space back
        finally:
            store.close()

    def test_sessions_a_dead_daemon_left_open_are_closed_with_their_own_reason(self, store: FindingsStore) -> None:
        left = store.open_session("j", uid=5)
        store.add_findings([finding("j", left, 1), finding("j", left, 2)])
        assert store.close_abandoned() == 1 and store.close_abandoned() == 0
        [info] = store.ended_sessions(uid=5)
        assert (info.state, info.end_reason, info.findings) == ("ended", "daemon stopped unexpectedly", 2)

    def test_prune_by_age_then_by_size(self, db_path: Path) -> None:
        store = FindingsStore(db_path)
        try:
            for age in (10, 5, 0):
                ident = store.open_session(f"age{age}")
                store.add_findings([finding(f"age{age}", ident, a) for a in range(10)])
                store.close_session(ended(ident, f"age{age}", ended=1000.0 - age * 86400))
            assert store.prune(max_age=7 * 86400, now=1000.0) == Pruned(sessions=1, findings=10)
            assert {s.job for s in store.ended_sessions()} == {"age5", "age0"}
            live = store.open_session("live")
            for start in range(0, 4000, 500):
                store.add_findings([finding("live", live, a) for a in range(start, start + 500)])
            store.max_bytes = store._used_bytes() - 1
            pruned = store.prune()
            assert pruned.sessions == 2 and {s.job for s in store.ended_sessions()} == set()
            store.max_bytes = store._used_bytes()
            with pytest.raises(StoreUnavailable, match="size limit"):  # only a live session is left: stop growing
                store.add_findings([finding("live", live, 1)])
        finally:
            store.close()


class TestFilters:
    """What `findings --kind/--severity/--since` and `--follow` ask of the store."""

    def test_kinds_select_in_sql(self, store: FindingsStore) -> None:
        store.add_findings([finding("j", 1, 0x10), finding("j", 1, 0x20, kind="memory_leak"),
                            finding("j", 1, 0x30, kind="misaligned_access")])  # fmt: skip
        assert [f.kind for f in store.findings(kinds={"memory_leak", "misaligned_access"})] == [
            "memory_leak",
            "misaligned_access",
        ]
        assert store.findings(kinds=set()) == []  # a query that selects no kind selects nothing
        assert store.findings(kinds={"no_such_kind"}) == []
        assert len(store.findings(kinds=None)) == 3

    def test_since_selects_by_the_time_stored(self, store: FindingsStore) -> None:
        old, new = finding("j", 1, 0x10), finding("j", 1, 0x20)
        old.time, new.time = 100.0, 200.0
        store.add_findings([old, new])
        assert [f.address for f in store.findings(since=150.0)] == [0x20]
        assert [f.address for f in store.findings(since=200.0)] == [0x20]  # at or after
        assert store.findings(since=200.5) == []

    def test_filters_page_like_any_query(self, store: FindingsStore) -> None:
        store.add_findings([finding("j", 1, a, kind="illegal_read" if a % 2 else "illegal_write") for a in range(9)])
        first = store.findings_page(kinds={"illegal_read"}, limit=2)
        assert [f.address for f in first.findings] == [1, 3] and first.next
        rest = store.findings_page(kinds={"illegal_read"}, after=first.next)
        assert [f.address for f in rest.findings] == [5, 7] and not rest.next

    def test_newest_finding_is_the_readers_own(self, store: FindingsStore) -> None:
        assert store.newest_finding() == 0 and store.newest_finding(uid=1000) == 0
        mine = store.open_session("mine", uid=1000)
        theirs = store.open_session("theirs", uid=1001)
        store.add_findings([finding("mine", mine, 0x10)])
        store.add_findings([finding("theirs", theirs, 0x20)])
        [own] = store.findings(uid=1000)
        assert store.newest_finding(uid=1000) == own.id
        assert store.newest_finding() == store.newest_finding(uid=1001) > own.id
        assert store.newest_finding(uid=1002) == 0
