"""The fair share of a process's detector threads (sanitizerd/sessions/threads.py), and the per-kernel CPU budget
of a session's detector (sanitizerd/sessions/pipeline.py), on real threads and a real event loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import anyio
import numpy as np
import pytest

from client_shim import EventKind, Space, accesses
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.sessions.pipeline import drive_detector
from sanitizerd.sessions.threads import DetectorThreads
from sanitizerd.sessions.work import Batch, EndKernel, Finish, StartKernel, Work
from sanitizerd_protocol.messages import HostOp
from sanitizerd_protocol.model import Finding
from tests.detector_helpers import make_detector


class Gates:
    """Checks that block on their thread until the test lets each go, and the order in which they started."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.running = 0
        self.most_running = 0
        self._gates: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def check(self, name: str) -> Callable[[], str]:
        gate = self._gates.setdefault(name, threading.Event())

        def run() -> str:
            with self._lock:
                self.started.append(name)
                self.running += 1
                self.most_running = max(self.most_running, self.running)
            gate.wait(10)
            with self._lock:
                self.running -= 1
            return name

        return run

    def let_go(self, name: str) -> None:
        self._gates[name].set()


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Poll: the conditions are set on detector threads, which have no event loop to set an anyio.Event from."""
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(0.005)


async def started(gates: Gates, name: str) -> None:
    await until(lambda: name in gates.started)


async def queue(
    tg: anyio.abc.TaskGroup, threads: DetectorThreads, gates: Gates, uid: int, session: int, name: str
) -> None:
    """Start a check and wait until it holds a thread or waits for one (its place in the turns is taken)."""
    before = threads.waiting + threads.busy
    tg.start_soon(threads.run, uid, session, gates.check(name))
    await until(lambda: threads.waiting + threads.busy > before)


class TestFairShare:
    def test_another_uid_is_next_however_many_checks_one_uid_queues(self) -> None:
        """One thread; uid 1 runs a check and queues three more from three sessions; uid 2 queues one after them.
        uid 2's runs second (a FIFO would run it last), then uid 1's sessions by turns."""
        gates, threads = Gates(), DetectorThreads(1)

        async def scenario() -> None:
            async with anyio.create_task_group() as tg:
                await queue(tg, threads, gates, 1, 1, "u1s1-a")
                for name, session in (("u1s2", 2), ("u1s3", 3), ("u1s1-b", 1)):
                    await queue(tg, threads, gates, 1, session, name)
                await queue(tg, threads, gates, 2, 9, "u2s9")
                for name in ("u1s1-a", "u1s2", "u2s9", "u1s3", "u1s1-b"):
                    await started(gates, name)
                    gates.let_go(name)

        anyio.run(scenario)
        assert gates.started == ["u1s1-a", "u1s2", "u2s9", "u1s3", "u1s1-b"]
        assert gates.most_running == 1

    def test_a_uid_holding_every_thread_gives_the_next_free_one_to_another(self) -> None:
        """Four threads, all running uid 1's checks, with four more of uid 1's queued before uid 2's one: the first
        thread that comes free runs uid 2's check (it holds none, uid 1 holds three)."""
        gates, threads = Gates(), DetectorThreads(4)

        async def scenario() -> None:
            async with anyio.create_task_group() as tg:
                for i in range(8):
                    await queue(tg, threads, gates, 1, 100 + i, f"hostile-{i}")
                await queue(tg, threads, gates, 2, 7, "ordinary")
                assert (threads.busy, threads.waiting) == (4, 5)
                gates.let_go("hostile-2")
                await until(lambda: "ordinary" in gates.started)
                assert gates.started[4] == "ordinary"
                for i in range(8):
                    gates.let_go(f"hostile-{i}")
                gates.let_go("ordinary")

        anyio.run(scenario)
        assert gates.most_running == 4 and threads.busy == 0 and threads.waiting == 0

    def test_within_a_uid_the_session_holding_fewer_threads_goes_first(self) -> None:
        """Two threads held by session 1 of uid 1; session 1 queues two more, then session 2 one: session 2's runs
        on the first free thread."""
        gates, threads = Gates(), DetectorThreads(2)

        async def scenario() -> None:
            async with anyio.create_task_group() as tg:
                for name in ("s1-a", "s1-b", "s1-c", "s1-d"):
                    await queue(tg, threads, gates, 1, 1, name)
                await queue(tg, threads, gates, 1, 2, "s2")
                gates.let_go("s1-a")
                await until(lambda: len(gates.started) == 3)
                assert gates.started[2] == "s2"
                for name in ("s1-b", "s1-c", "s1-d", "s2"):
                    gates.let_go(name)

        anyio.run(scenario)
        assert sorted(gates.started) == ["s1-a", "s1-b", "s1-c", "s1-d", "s2"]

    def test_a_uid_that_comes_back_joins_the_back_of_the_turns(self) -> None:
        """uid 2 and uid 3 wait in that order; uid 1, served and gone quiet, comes back: it runs after both."""
        gates, threads = Gates(), DetectorThreads(1)

        async def scenario() -> None:
            async with anyio.create_task_group() as tg:
                await queue(tg, threads, gates, 1, 1, "u1-a")
                await queue(tg, threads, gates, 2, 2, "u2")
                await queue(tg, threads, gates, 3, 3, "u3")
                await queue(tg, threads, gates, 1, 1, "u1-b")
                for name in ("u1-a", "u2", "u3", "u1-b"):
                    await started(gates, name)
                    gates.let_go(name)

        anyio.run(scenario)
        assert gates.started == ["u1-a", "u2", "u3", "u1-b"]

    def test_a_cancelled_wait_leaves_its_place_and_a_cancelled_grant_passes_the_thread_on(self) -> None:
        gates, threads = Gates(), DetectorThreads(1)

        async def scenario() -> None:
            async with anyio.create_task_group() as tg:
                await queue(tg, threads, gates, 1, 1, "running")
                with anyio.CancelScope() as scope:
                    scope.cancel()
                    with pytest.raises(anyio.get_cancelled_exc_class()):
                        await threads.run(2, 2, gates.check("never"))
                assert threads.waiting == 0
                async with anyio.create_task_group() as waiting:
                    waiting.start_soon(threads.run, 3, 3, gates.check("cancelled-on-grant"))
                    await until(lambda: threads.waiting == 1)
                    await queue(tg, threads, gates, 4, 4, "next")
                    gates.let_go("running")
                    waiting.cancel_scope.cancel()  # granted meanwhile, or not yet: either way it never runs
                await until(lambda: "next" in gates.started or "cancelled-on-grant" in gates.started)
                gates.let_go("next")
                gates.let_go("cancelled-on-grant")

        anyio.run(scenario)
        assert "never" not in gates.started
        assert threads.busy == 0 and threads.waiting == 0

    def test_saturated_only_with_every_thread_busy_and_a_check_waiting_past_the_bound(self) -> None:
        now = [100.0]
        gates, threads = Gates(), DetectorThreads(2, clock=lambda: now[0])

        async def scenario() -> None:
            async with anyio.create_task_group() as tg:
                await queue(tg, threads, gates, 1, 1, "a")
                now[0] += 60
                assert threads.saturated(10.0) == ""  # a thread is free
                await queue(tg, threads, gates, 1, 2, "b")
                assert threads.saturated(10.0) == ""  # all busy, none waits
                await queue(tg, threads, gates, 2, 3, "c")
                now[0] += 5
                assert threads.saturated(10.0) == "" and threads.oldest_wait() == 5.0
                now[0] += 6
                why = threads.saturated(10.0)
                assert why == "saturated: all 2 detector threads busy, 1 check(s) waiting, the oldest for 11 s"
                gates.let_go("a")
                await until(lambda: threads.waiting == 0)
                assert threads.saturated(10.0) == "" and threads.oldest_wait() == 0.0
                gates.let_go("b")
                gates.let_go("c")

        anyio.run(scenario)


# --- the per-kernel CPU budget ---


def _slow_batch(n: int = 4096) -> np.ndarray:
    """initcheck's costly case: strided vector accesses (tens of ms of CPU for this many)."""
    kinds = np.where(np.arange(n) % 2 == 0, EventKind.WRITE, EventKind.READ)
    return accesses(kinds, Space.UB, 0, 32, block_num=8, block_stride=2, repeat=255, repeat_stride=16,
                    block_id=(np.arange(n) // 2) % 8)  # fmt: skip


class TestKernelCpuBudget:
    def test_a_launch_past_its_budget_is_cut_and_the_next_launch_is_checked(self) -> None:
        """memcheck with a budget of 1 ms: launch 1's first batch (costly) passes it, so its second batch, an
        illegal read, is not checked, and its end says so; launch 2's illegal read is found again."""
        detector = make_detector("memcheck")
        done: list[tuple[int, list[Finding], bool]] = []
        cuts: list[tuple[str, int]] = []
        counted: list[tuple[str, int]] = []
        illegal = accesses(EventKind.READ, Space.GM, 0x7000_0000, 32)
        costly = accesses(EventKind.READ, Space.GM, 0x1000 + np.arange(200_000, dtype=np.uint64) % 64, 1)

        async def kernel_done(kernel: int, findings: list[Finding], cut: bool) -> None:
            done.append((kernel, findings, cut))

        async def publish(findings: list[Finding]) -> None:
            pass

        async def scenario() -> None:
            send, receive = anyio.create_memory_object_stream[Work](16)
            async with send:
                await send.send(HostOp(op="malloc", address=0x1000, size=64))
                for kernel in (1, 2):
                    await send.send(StartKernel(KernelLaunch(kernel, f"k{kernel}", 1, "aiv")))
                    if kernel == 1:
                        await send.send(Batch(costly))
                    await send.send(Batch(illegal))
                    await send.send(EndKernel(kernel))
            await drive_detector(
                detector, detector.context, receive,
                publish=publish, kernel_done=kernel_done, threads=DetectorThreads(1).runner(0, 1),
                on_checked=lambda name, n: None, on_failure=lambda name: None,
                on_cut=lambda name, n: counted.append((name, n)),
                cpu_budget=lambda: 0.001, on_budget_cut=lambda name, events: cuts.append((name, events)),
            )  # fmt: skip

        anyio.run(scenario)
        (k1, first, cut1), (k2, second, cut2) = done
        assert (k1, cut1, k2, cut2) == (1, True, 2, False)
        assert [f.kind for f in first] == ["internal_error"]
        assert first[0].detail.startswith("memcheck's checks of this kernel launch passed their CPU budget of 0.001 s")
        assert first[0].detail.endswith("1 events in 1 batches after it were not checked by memcheck")
        assert (first[0].kernel, first[0].size) == ("k1", 1)
        assert [f.kind for f in second] == ["illegal_read"]
        assert cuts == [("memcheck", 1)] and counted == [("memcheck", 1)]

    def test_a_session_that_ends_inside_a_cut_launch_is_told(self) -> None:
        detector = make_detector("initcheck")
        published: list[Finding] = []

        async def kernel_done(kernel: int, findings: list[Finding], cut: bool) -> None:
            raise AssertionError("the launch never ended")

        async def publish(findings: list[Finding]) -> None:
            published.extend(findings)

        async def scenario() -> None:
            send, receive = anyio.create_memory_object_stream[Work](16)
            async with send:
                await send.send(StartKernel(KernelLaunch(1, "cut", 8, "aiv")))
                for _ in range(3):
                    await send.send(Batch(_slow_batch(512)))
                await send.send(Finish())
            started = time.thread_time()
            await drive_detector(
                detector, detector.context, receive,
                publish=publish, kernel_done=kernel_done, threads=DetectorThreads(1).runner(0, 1),
                on_checked=lambda name, n: None, on_failure=lambda name: None, cpu_budget=lambda: 1e-6,
            )  # fmt: skip
            assert time.thread_time() - started < 5

        anyio.run(scenario)
        [cut] = [f for f in published if "CPU budget" in f.detail]
        assert cut.kind == "internal_error" and cut.size == 1024
        assert "1024 events in 2 batches after it were not checked by initcheck" in cut.detail
