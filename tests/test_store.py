"""The SQLite findings store: ids, queries, and persistence across reopening."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sanitizerd.findings.model import Finding, Frame, make_finding
from sanitizerd.findings.store import FindingsStore
from sanitizerd.protocol.messages import SessionInfo


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
