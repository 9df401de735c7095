"""The host's race-check memory budget: its accounting, and racecheck holding a launch within it (issue 10).

Every test checks what the budget holds afterwards: a reservation that outlives its launch or its session is
memory the host never gets back.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from client_shim.events import EventKind, Pipe, Space, accesses, syncs
from sanitizerd import config
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.detectors.memory_budget import MemoryBudget
from sanitizerd.detectors.racecheck import BYTES_PER_HELD_EVENT, BYTES_PER_PAIR, BYTES_PER_RANGE, Kernel, Racecheck
from sanitizerd.sessions.hub import Limits
from sanitizerd.sessions.session import Answer, Peer, Session
from sanitizerd.sessions.work import Batch, EndKernel, StartKernel
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import as_events
from tests.detector_helpers import make_detector, run_kernel, stream

R, W = EventKind.READ, EventKind.WRITE


def race_kernel() -> np.ndarray:
    """A write and a read of one UB range on two pipes with no sync between them: one RAW race, 2 events."""
    return stream(
        accesses(W, Space.UB, 0x100, 32, pipe=Pipe.MTE2),
        accesses(R, Space.UB, 0x100, 32, pipe=Pipe.V),
    )


def launch() -> KernelLaunch:
    return KernelLaunch(kernel=1, name="add_custom", block_dim=1, kernel_type="aiv")


def racecheck_with(budget: MemoryBudget) -> Racecheck:
    detector = make_detector("racecheck")
    assert isinstance(detector, Racecheck)
    detector.context.race_memory = budget.account()
    return detector


class TestBudget:
    def test_reserves_up_to_the_limit_and_refuses_past_it(self) -> None:
        refused: list[tuple[int, int, int]] = []
        budget = MemoryBudget(1000, on_refused=lambda *args: refused.append(args))
        a, b = budget.account(), budget.account()
        assert a.reserve(600) and b.reserve(400)
        assert budget.used == 1000 and (a.held, b.held) == (600, 400)
        assert not b.reserve(1)
        assert refused == [(1, 1000, 1000)] and budget.refusals == 1
        assert b.held == 400  # a refusal takes nothing

    def test_release_gives_back_everything_the_account_holds(self) -> None:
        budget = MemoryBudget(1000)
        a, b = budget.account(), budget.account()
        a.reserve(300)
        a.reserve(200)
        b.reserve(100)
        a.release()
        assert (budget.used, a.held, b.held) == (100, 0, 100)
        a.release()  # twice is harmless
        assert budget.used == 100
        assert a.reserve(900)  # and the room is there again

    def test_a_closed_account_gives_back_and_takes_nothing_more(self) -> None:
        budget = MemoryBudget(1000)
        a = budget.account()
        a.reserve(700)
        a.close()
        assert budget.used == 0
        assert not a.reserve(1)
        assert budget.used == 0 and budget.refusals == 0  # an ended session is not a refusal

    def test_resize_applies_to_new_reservations(self) -> None:
        budget = MemoryBudget(1000)
        a = budget.account()
        a.reserve(800)
        budget.resize(500)
        assert not a.reserve(1)
        a.release()
        assert a.reserve(500) and not a.reserve(1)

    def test_concurrent_accounts_never_pass_the_limit_and_end_at_zero(self) -> None:
        """Checks run on worker threads: many accounts reserving and releasing at once never take more than the
        limit together, and hold nothing once each has released."""
        budget = MemoryBudget(3_000)  # one account alone reaches it before it releases
        peak = [0]
        lock = threading.Lock()

        def worker() -> None:
            account = budget.account()
            for i in range(2000):
                if account.reserve(700):
                    with lock:
                        peak[0] = max(peak[0], budget.used)
                if i % 5 == 4:
                    account.release()
            account.close()

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert budget.used == 0
        assert 0 < peak[0] <= 3_000
        assert budget.refusals > 0


class TestRacecheckInTheBudget:
    def test_a_launch_reserves_per_held_event_and_gives_it_back_at_kernel_end(self) -> None:
        budget = MemoryBudget(1 << 30)
        detector = racecheck_with(budget)
        events = race_kernel()
        detector.kernel_begin(launch())
        detector.check(events)
        assert budget.used == events.size * BYTES_PER_HELD_EVENT
        findings = detector.kernel_end()
        assert [f.kind for f in findings] == ["race_raw"]
        assert budget.used == 0

    def test_sync_events_count_as_accesses_do(self) -> None:
        """The model needs every sync event: they are held, and reserved for, like accesses."""
        budget = MemoryBudget(1 << 30)
        detector = racecheck_with(budget)
        detector.kernel_begin(launch())
        detector.check(np.concatenate((race_kernel(), syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 0))))
        assert budget.used == 3 * BYTES_PER_HELD_EVENT
        detector.kernel_end()
        assert budget.used == 0

    def test_a_launch_the_budget_has_no_room_for_is_left_unchecked_and_says_so(self) -> None:
        """Other sessions hold the budget: the launch's race is not found, but an internal_error says that none
        of its events were checked and why (not a silent "no races"), and it holds nothing meanwhile."""
        budget = MemoryBudget(10 * BYTES_PER_HELD_EVENT)
        others = budget.account()
        assert others.reserve(9 * BYTES_PER_HELD_EVENT)
        detector = racecheck_with(budget)
        events = race_kernel()
        detector.kernel_begin(launch())
        detector.check(events[:1])  # fits
        detector.check(events[1:])  # does not: the launch gives back what it held, at once
        assert budget.used == 9 * BYTES_PER_HELD_EVENT and detector.columns.size == 0
        detector.check(events)  # later batches of the launch are only counted
        assert budget.used == 9 * BYTES_PER_HELD_EVENT
        [finding] = detector.kernel_end()
        assert finding.kind == "internal_error" and finding.severity == "error"
        assert "race-check memory budget" in finding.detail and "--race-memory" in finding.detail
        assert "4 events were not checked" in finding.detail
        assert budget.refusals == 1
        # The next launch, once the other session's launch has ended, is checked in full.
        others.release()
        assert [f.kind for f in run_kernel(detector, events)] == ["race_raw"]
        assert budget.used == 0

    def test_one_launch_never_holds_more_than_the_whole_budget(self) -> None:
        """--race-memory smaller than --max-race-events' worth: the launch is cut at the budget, like at
        --max-race-events, and the finding names the budget."""
        budget = MemoryBudget(3 * (BYTES_PER_HELD_EVENT + 2 * BYTES_PER_PAIR))
        detector = racecheck_with(budget)
        events = stream(*(accesses(R, Space.UB, 0x100 * i, 32, pipe=Pipe.V) for i in range(5)))
        findings = run_kernel(detector, events)
        assert [f.kind for f in findings] == ["internal_error"]
        assert "racecheck holds at most 3 events" in findings[0].detail
        assert "--race-memory" in findings[0].detail and "the last 2 were not checked" in findings[0].detail
        assert budget.used == 0 and budget.refusals == 0

    def test_a_strided_access_reserves_for_each_of_its_ranges(self) -> None:
        """One record whose pattern spans 65 535 blocks x 65 535 repeats with gaps would be 4 G byte ranges in the
        sweep: it asks for their memory up front, is refused, and the launch says so, at once, allocating nothing."""
        budget = MemoryBudget(1 << 30)
        detector = racecheck_with(budget)
        huge = accesses(
            R, Space.GM, 0x10000, 32, block_num=65535, block_stride=2, repeat=65535, repeat_stride=65535,
            pipe=Pipe.MTE2, serial=1,
        )  # fmt: skip
        [finding] = run_kernel(detector, race_kernel(), huge)
        assert finding.kind == "internal_error" and "3 events were not checked" in finding.detail
        needed = 3 * BYTES_PER_HELD_EVENT + (65535 * 65535 - 1) * BYTES_PER_RANGE
        assert f"it needed {needed} bytes" in finding.detail
        assert budget.used == 0 and budget.refusals == 1
        # A strided access of a few ranges is only a little dearer than a dense one.
        detector.kernel_begin(launch())
        detector.check(accesses(R, Space.UB, 0x0, 32, block_num=8, block_stride=2, pipe=Pipe.V, serial=1))
        assert budget.used == BYTES_PER_HELD_EVENT + 7 * BYTES_PER_RANGE
        detector.kernel_end()

    def test_nested_ranges_are_cut_into_pieces_only_within_the_budget(self) -> None:
        """Wide accesses over many small ones: each wide one is cut at every small one's bounds, pieces quadratic
        in the accesses. The check asks for them before making them; refused, the launch says so."""
        n = 2000
        i = np.arange(n)
        wide = i % 2 == 0
        events = accesses(
            W, Space.GM, np.where(wide, 0, (i // 2) * 64), np.where(wide, 1 << 20, 32), pipe=Pipe.MTE3, serial=i + 1
        )
        budget = MemoryBudget(n * BYTES_PER_HELD_EVENT + (1 << 20))  # the events fit; a million pieces do not
        detector = racecheck_with(budget)
        [finding] = run_kernel(detector, events)
        assert finding.kind == "internal_error" and f"its {n} accesses overlap in" in finding.detail
        assert budget.used == 0 and budget.refusals == 1
        # With room for them the same launch is checked: the wide writes race with each other.
        roomy = racecheck_with(MemoryBudget(1 << 30))
        assert {f.kind for f in run_kernel(roomy, events)} == {"race_waw"}

    def test_candidate_pairs_are_reserved_for_before_they_are_ordered_and_folded(self) -> None:
        """Reads of one word between writes: two candidate pairs per read. Other launches leave room for the events
        but not for their pairs: the launch says so, and gives everything back."""
        n = 64
        events = stream(*(accesses(R if k % 8 else W, Space.GM, 0x1000, 32, pipe=Pipe.MTE2) for k in range(n)))
        budget = MemoryBudget(1 << 20)
        others = budget.account()
        others.reserve(budget.limit - n * BYTES_PER_HELD_EVENT - 10 * BYTES_PER_PAIR)
        [finding] = run_kernel(racecheck_with(budget), events)
        assert finding.kind == "internal_error" and f"its {n} accesses make" in finding.detail
        assert "candidate pairs" in finding.detail
        assert budget.used == others.held and budget.refusals == 1

    def test_cross_block_knowledge_is_reserved_for_before_it_is_built(self) -> None:
        """Every one of 4 096 blocks sets and waits on a cross-core flag (a SyncAll): what each wait knows of every
        block is 4 096 x 4 096 x 12 clocks. Asked for before it is built, refused, and the launch says so."""
        blocks = np.arange(4096)
        events = np.concatenate(
            [
                syncs(EventKind.CROSS_SET, Pipe.S, Pipe.S, 31, block_id=blocks, serial=1),
                syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 31, block_id=blocks, serial=2),
            ]
        )
        events = events[np.argsort(events["block_id"], kind="stable")]
        budget = MemoryBudget(256 << 20)
        [finding] = run_kernel(racecheck_with(budget), events)
        assert finding.kind == "internal_error"
        assert "4096 cross-block waits across 4096 blocks" in finding.detail, finding.detail
        assert budget.used == 0 and budget.refusals == 1

    def test_a_failed_check_gives_its_share_back(self, monkeypatch: pytest.MonkeyPatch) -> None:
        budget = MemoryBudget(1 << 30)
        detector = racecheck_with(budget)

        def broken(self: Kernel) -> list[object]:
            raise RuntimeError("a detector bug")

        monkeypatch.setattr(Kernel, "findings", broken)
        detector.kernel_begin(launch())
        detector.check(race_kernel())
        with pytest.raises(RuntimeError):
            detector.kernel_end()
        assert budget.used == 0 and detector.columns.size == 0

    def test_a_session_that_ends_mid_launch_gives_its_share_back(self) -> None:
        """finish() without kernel_end (the client left), and a session cut off before finish (its account is
        closed by the daemon): nothing stays reserved."""
        budget = MemoryBudget(1 << 30)
        detector = racecheck_with(budget)
        detector.kernel_begin(launch())
        detector.check(race_kernel())
        detector.finish()
        assert budget.used == 0
        cut = racecheck_with(budget)
        cut.kernel_begin(launch())
        cut.check(race_kernel())
        assert budget.used > 0
        cut.context.race_memory.close()
        assert budget.used == 0
        cut.check(race_kernel())  # a check still running when the session closed takes nothing more
        assert budget.used == 0

    def test_a_batch_inside_a_larger_receive_buffer_keeps_none_of_it_alive(self) -> None:
        """A small frame inside a 1 MiB receive chunk: a launch holds its columns, gathered out of the records,
        never the records, so nothing it holds keeps the chunk alive."""
        events = race_kernel()
        chunk = bytes(1 << 20) + events.tobytes()
        frame = memoryview(chunk)[1 << 20 :]
        detector = racecheck_with(MemoryBudget(1 << 30))
        detector.kernel_begin(launch())
        detector.check(as_events(frame))
        columns = detector.columns
        held = [*columns.events.values(), *columns.accesses.values(), *columns.syncs.values()]
        assert held and detector.columns.size == events.size
        for column in held:
            root = column
            while isinstance(root, np.ndarray) and root.base is not None:
                root = root.base
            assert isinstance(root, np.ndarray), type(root)  # an array of the launch's own, not the frame
        detector.kernel_end()


class TestVerdict:
    def test_the_verdict_of_a_launch_left_unchecked_counts_the_error(self) -> None:
        """Through a session: the refused launch's verdict has the internal_error among its errors."""
        budget = MemoryBudget(BYTES_PER_HELD_EVENT)  # room for one event: this launch has two
        hello = m.Hello(version=1, pid=1, job="j", host="h", device=0)
        s = Session(1, hello, m.Config(tools=["racecheck"]), Peer(1, 1000, 1000), race_memory=budget.account())
        [detector] = s.detectors
        others = budget.account()
        others.reserve(BYTES_PER_HELD_EVENT)  # held by another session's launch
        answers = []
        records = race_kernel().view(np.uint8).data
        for message in (m.KernelBegin(kernel=1, name="k", block_dim=1, kernel_type="aiv"),
                        m.Events(kernel=1, records=records), m.KernelEnd(kernel=1)):  # fmt: skip
            for item in s.handle(message):
                match item:
                    case StartKernel(launch=kernel_launch):
                        detector.kernel_begin(kernel_launch)
                    case Batch(events=events):
                        detector.check(events)
                    case EndKernel(kernel=kernel):
                        answers.append(s.kernel_checked(kernel, detector.kernel_end()))
        [answer] = answers
        assert isinstance(answer, Answer)
        assert answer.verdict.errors == 1 and answer.verdict.checked
        s.context.race_memory.close()
        assert budget.used == BYTES_PER_HELD_EVENT  # the other session's, only


class TestSettings:
    def test_race_memory_from_the_file_the_command_line_and_sighup(self, tmp_path: Path) -> None:
        """``[limits] race_memory`` in the file, ``--race-memory`` over it; a reload takes the file's new value
        unless the command line gave one."""
        path = tmp_path / "c.toml"
        path.write_text("[limits]\nrace_memory = 1000000\n")
        assert config.limits(config.read(path), {"race_memory": None}).race_memory == 1_000_000
        assert config.limits(config.read(path), {"race_memory": 5000}).race_memory == 5000
        current = config.limits(config.read(path), {})
        path.write_text("[limits]\nrace_memory = 2000000\n")
        assert config.reloaded(current, config.read(path), {}).race_memory == 2_000_000
        assert config.reloaded(current, config.read(path), {"race_memory": 5000}).race_memory == 5000

    def test_the_default_is_a_quarter_of_what_the_daemon_may_use(self) -> None:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        assert 256 << 20 <= Limits().race_memory <= max(256 << 20, physical // 4)
