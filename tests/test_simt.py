"""SIMT threads in racecheck and synccheck, driven with hand-built event streams (detectors/_simt.py): what
orders threads (__syncthreads() epochs), what does not (the main scalar), atomics, and every new field and kind
at and past its bounds."""

from __future__ import annotations

import numpy as np
import pytest

from client_shim.events import EventKind, Pipe, Space, accesses, syncs
from sanitizerd.detectors import _simt
from sanitizerd.findings.render import render_text
from sanitizerd_protocol.messages import HostOp
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import EVENT_DTYPE, FLAG_CLAIM, FLAG_SIMT_ENTRY, MAX_SIMT_THREADS, simt_dims_address
from tests.detector_helpers import make_detector, run_kernel, stream

READ, WRITE, SYNC = EventKind.READ, EventKind.WRITE, EventKind.SYNC_THREADS


def start(x: int, y: int = 1, z: int = 1, block: int = 0) -> np.ndarray:
    return syncs(EventKind.SIMT_START, Pipe.S, address=simt_dims_address(x, y, z), block_id=block)


def end(block: int = 0) -> np.ndarray:
    return syncs(EventKind.SIMT_END, Pipe.S, block_id=block)


def thread_access(kind: EventKind, thread: int, address: int, *, size: int = 4, space: Space = Space.UB,
                  atomic: bool = False, location: int = 0, block: int = 0) -> np.ndarray:  # fmt: skip
    """An access of SIMT thread ``thread`` (0-based linear index)."""
    return accesses(kind, space, address, size, thread=thread + 1, atomic=atomic, location=location, block_id=block)


def barrier(thread: int, location: int = 7, block: int = 0) -> np.ndarray:
    return syncs(SYNC, Pipe.S, thread=thread + 1, location=location, block_id=block)


def races(*parts: np.ndarray, splits: int = 0) -> list[Finding]:
    events = stream(*parts)
    batches = np.array_split(events, splits) if splits else [events]
    return run_kernel(make_detector("racecheck"), *batches, name="simt_kernel")


def syncfindings(*parts: np.ndarray) -> list[Finding]:
    return run_kernel(make_detector("synccheck"), stream(*parts), name="simt_kernel")


def kinds(findings: list[Finding]) -> list[str]:
    return sorted(f.kind for f in findings)


class TestThreadRaces:
    def test_two_threads_writing_one_byte_race(self) -> None:
        """Inter-thread stomping: two threads write one UB element in the same epoch."""
        (finding,) = races(start(4), thread_access(WRITE, 2, 0x40), thread_access(WRITE, 1, 0x42, size=2), end())
        assert finding.kind == "race_waw" and finding.space == "UB"
        assert [(a.op, a.thread) for a in finding.accesses] == [("Write", [1, 0, 0]), ("Write", [2, 0, 0])]

    def test_syncthreads_orders_threads(self) -> None:
        """A store, __syncthreads() in every thread, then another thread's load: ordered, no race."""
        parts = [start(2)]
        for t in (0, 1):
            parts += [thread_access(WRITE, t, 0x40 + 4 * t), barrier(t), thread_access(READ, t, 0x40 + 4 * (1 - t))]
        assert races(*parts, end()) == []

    def test_without_syncthreads_threads_race(self) -> None:
        parts = [start(2)]
        for t in (0, 1):
            parts += [thread_access(WRITE, t, 0x40 + 4 * t), thread_access(READ, t, 0x40 + 4 * (1 - t))]
        assert kinds(races(*parts, end())) == ["race_raw", "race_war"]

    @pytest.mark.parametrize("splits", [2, 3, 7, 15])
    def test_batches_split_anywhere_find_the_same(self, splits: int) -> None:
        """Epochs and open sections carry from batch to batch: the same stream cut anywhere finds the same."""
        parts = [start(4, 2)]
        for t in range(8):
            parts += [
                thread_access(WRITE, t, 0x100 + 4 * t),
                barrier(t),
                thread_access(READ, t, 0x100 + 4 * ((t + 1) % 8)),
            ]
            parts += [thread_access(WRITE, t, 0x200)]
        parts.append(end())
        whole = [(f.kind, [a.thread for a in f.accesses]) for f in races(*parts)]
        assert whole == [("race_waw", [[0, 0, 0], [3, 1, 0]])]
        assert [(f.kind, [a.thread for a in f.accesses]) for f in races(*parts, splits=splits)] == whole

    def test_thread_position_follows_the_dims(self) -> None:
        """Thread 13 of 4 x 2 x 2 is (1,1,1), as msSanitizer decomposes ids (x fastest)."""
        (finding,) = races(start(4, 2, 2), thread_access(WRITE, 0, 0), thread_access(READ, 13, 0), end())
        assert [a.thread for a in finding.accesses] == [[0, 0, 0], [1, 1, 1]]

    def test_atomics_do_not_race_with_each_other(self) -> None:
        parts = [start(3)] + [thread_access(WRITE, t, 0x80, space=Space.GM, atomic=True) for t in range(3)]
        assert races(*parts, end()) == []
        (finding,) = races(*parts, thread_access(READ, 2, 0x80, space=Space.GM), end())
        assert finding.kind == "race_raw" and finding.space == "GM"

    def test_private_memory_is_each_threads_own(self) -> None:
        parts = [
            start(2),
            thread_access(WRITE, 0, 0, space=Space.PRIVATE),
            thread_access(WRITE, 1, 0, space=Space.PRIVATE),
        ]
        assert races(*parts, end()) == []

    def test_sections_do_not_race_with_each_other(self) -> None:
        """SIMT_END ends the section: the next section's threads come after every thread of the last."""
        assert races(start(2), thread_access(WRITE, 0, 0), end(), start(2), thread_access(WRITE, 1, 0), end()) == []

    def test_blocks_do_not_race_through_their_threads(self) -> None:
        """Threads of one block only: another block's threads are checked as blocks are (not here)."""
        assert races(start(2, block=0), start(2, block=1), thread_access(WRITE, 0, 0, block=0),
                     thread_access(WRITE, 1, 0, block=1), end(0), end(1)) == []  # fmt: skip

    def test_main_scalar_races_while_the_section_is_open(self) -> None:
        scalar = accesses(WRITE, Space.GM, 0x1000, 4, pipe=Pipe.S_CAL)
        (finding,) = races(start(2), thread_access(READ, 1, 0x1000, space=Space.GM), barrier(1), scalar, end())
        assert finding.kind == "race_war"
        assert [(a.pipe, a.thread) for a in finding.accesses] == [("PIPE_S", [1, 0, 0]), ("PIPE_S", [])]
        assert races(start(2), thread_access(READ, 1, 0x1000, space=Space.GM), end(), scalar) == []

    def test_report_text(self) -> None:
        (finding,) = races(start(4), thread_access(WRITE, 2, 0x40), thread_access(WRITE, 1, 0x40), end())
        text = render_text([finding]).splitlines()
        assert text[0] == "====== ERROR: Potential WAW hazard detected at UB in simt_kernel:"
        assert text[1].startswith("======     Write Thread (1,0,0) at WAW()+0x40 in block 0 (aiv) on device 0 ")
        assert text[2].startswith("======     Write Thread (2,0,0) at WAW()+0x40 in block 0 (aiv) on device 0 ")


class TestDivergence:
    def test_every_thread_at_every_barrier_is_clean(self) -> None:
        parts = [start(4)] + [barrier(t) for t in range(4)] + [barrier(t, location=8) for t in range(4)]
        assert syncfindings(*parts, end()) == []

    def test_a_thread_short_of_a_barrier_diverges(self) -> None:
        parts = [start(2, 2)] + [barrier(t) for t in (0, 1, 3)] + [barrier(t) for t in (0, 1, 2, 3)]
        (finding,) = syncfindings(*parts, end())
        assert (finding.kind, finding.thread, finding.blocks) == ("divergent_threads", [0, 1, 0], {"aiv": [0]})
        text = render_text([finding]).splitlines()
        assert text[:2] == [
            "====== ERROR: Sync error detected. Divergent thread(s) in simt_kernel",
            "======    by thread(0,1,0) in block aiv(0) on device 0",
        ]

    def test_absent_threads_count(self) -> None:
        """Threads that never reached the barrier diverge: the first of them is named."""
        (finding,) = syncfindings(start(8), barrier(0), barrier(1), barrier(5), end())
        assert finding.thread == [2, 0, 0]


def raw_thread(events: np.ndarray, thread: int) -> np.ndarray:
    events["thread"] = thread
    return events


def memcheck_kernel(*parts: np.ndarray) -> list[Finding]:
    """memcheck over one kernel, with 64 KiB of GM allocated at 0x1000 (stomping is judged in allocated GM)."""
    detector = make_detector("memcheck")
    detector.host_op(HostOp(op="malloc", address=0x1000, size=1 << 16))
    return run_kernel(detector, stream(*parts))


class TestThreadsInMemcheck:
    def test_two_threads_writing_one_gm_byte_stomp(self) -> None:
        """Inter-thread stomping: the second thread's write is out of bounds, named by its position."""
        parts = [
            start(4, 2),
            thread_access(WRITE, 1, 0x1000, space=Space.GM),
            thread_access(WRITE, 5, 0x1000, space=Space.GM),
        ]
        findings = memcheck_kernel(*parts, end())
        stomps = [f for f in findings if f.kind == "out_of_bounds"]
        assert [(f.thread, f.address, f.size) for f in stomps] == [([1, 1, 0], 0x1000, 4)]
        assert "======    by thread (1,1,0) in block aiv(0) on device 0" in render_text(stomps)

    def test_threads_do_not_stomp_on_the_pipes(self) -> None:
        """A block's pipes and its threads own GM apart: a DMA write then a thread's write of it is not stomping
        (msSanitizer keeps the two in separate shadows), nor one thread writing its element twice."""
        dma = accesses(WRITE, Space.GM, 0x1000, 64, pipe=Pipe.MTE3)
        parts = [
            dma,
            start(2),
            thread_access(WRITE, 0, 0x1000, space=Space.GM),
            thread_access(WRITE, 0, 0x1000, space=Space.GM),
        ]
        assert [f for f in memcheck_kernel(*parts, end()) if f.kind == "out_of_bounds"] == []

    def test_atomic_threads_do_not_stomp(self) -> None:
        parts = [start(2)] + [thread_access(WRITE, t, 0x1000, space=Space.GM, atomic=True) for t in (0, 1)]
        assert [f for f in memcheck_kernel(*parts, end()) if f.kind == "out_of_bounds"] == []


class TestOwnershipClaims:
    """FLAG_CLAIM: a thread's write that only claims its bytes for the inter-thread stomping check."""

    @staticmethod
    def claim(thread: int, address: int) -> np.ndarray:
        events = thread_access(WRITE, thread, address, space=Space.GM)
        events["flags"] |= FLAG_CLAIM
        return events

    def test_a_claim_makes_a_later_write_in_its_batch_stomping_whatever_the_thread_ids(self) -> None:
        """The claim (thread 6) comes before thread 1's write: thread 1 stomped, as the device said; the claim is
        taken first even where, by block and thread, thread 1's write would be."""
        parts = [start(8), self.claim(6, 0x1000), thread_access(WRITE, 1, 0x1000, space=Space.GM)]
        stomps = [f for f in memcheck_kernel(*parts, end()) if f.kind == "out_of_bounds"]
        assert [(f.thread, f.address, f.size) for f in stomps] == [([1, 0, 0], 0x1000, 4)]

    def test_a_claim_is_no_access_of_the_other_checks(self) -> None:
        """A claim outside every allocation, misaligned, racing a thread's read of it, read by no one before:
        memcheck, racecheck, initcheck and synccheck say nothing of it, and count nothing unchecked."""
        claim = self.claim(6, 0x90001)
        assert memcheck_kernel(start(8), claim, end()) == []
        reader = thread_access(EventKind.READ, 1, 0x1000, space=Space.GM)
        assert races(start(8), self.claim(6, 0x1000), reader, end()) == []
        for tool in ("initcheck", "synccheck"):
            assert run_kernel(make_detector(tool), stream(start(8), claim, end())) == []


class TestHostile:
    """Every new field and kind at and past its bounds: refused records are counted and said, never clean."""

    def test_thread_field_sits_in_the_old_reserved_bytes(self) -> None:
        assert EVENT_DTYPE.itemsize == 56 and EVENT_DTYPE.fields["thread"][1] == 54

    @pytest.mark.parametrize(("dims", "ok"), [((MAX_SIMT_THREADS, 1, 1), True), ((MAX_SIMT_THREADS + 1, 1, 1), False),
                                              ((64, 32, 1), True), ((64, 32, 2), False), ((0, 4, 4), False),
                                              ((4, 0, 1), False), ((0xFFFF, 0xFFFF, 0xFFFF), False)])  # fmt: skip
    @pytest.mark.parametrize("tool", ["racecheck", "synccheck"])
    def test_dims_at_and_past_the_bound(self, dims: tuple[int, int, int], ok: bool, tool: str) -> None:
        last = min(dims[0] * dims[1] * dims[2] - 1, 0xFFFE)  # the highest thread the dims name
        findings = run_kernel(make_detector(tool), stream(start(*dims), thread_access(WRITE, max(last, 0), 0), end()))
        if ok:
            assert findings == []
        else:
            (finding,) = findings
            assert finding.kind == "internal_error" and "did not check 1 SIMT thread records" in finding.detail

    @pytest.mark.parametrize("thread", [0xFFFF, 5, 4 + 1])
    def test_thread_past_the_dims_is_refused(self, thread: int) -> None:
        (finding,) = races(start(4), raw_thread(accesses(WRITE, Space.UB, 0, 4), thread), end())
        assert finding.kind == "internal_error" and "did not check 1 SIMT thread records" in finding.detail

    def test_thread_records_outside_a_section_are_refused(self) -> None:
        for tool in ("racecheck", "synccheck"):
            findings = run_kernel(make_detector(tool), stream(thread_access(WRITE, 0, 0), barrier(0), end()))
            assert kinds(findings) == ["internal_error"], tool
            assert "did not check 2 SIMT thread records" in findings[0].detail

    def test_a_thread_of_another_kind_is_refused(self) -> None:
        odd = raw_thread(syncs(EventKind.SET_FLAG, Pipe.S, Pipe.V), 1)
        (finding,) = races(start(2), odd, end())
        assert "did not check 1 SIMT thread records" in finding.detail

    def test_a_wide_access_is_refused(self) -> None:
        parts = [start(2), thread_access(WRITE, 0, 0, size=_simt.MAX_SIMT_ACCESS_BYTES + 1),
                 thread_access(WRITE, 1, 0, size=_simt.MAX_SIMT_ACCESS_BYTES)]  # fmt: skip
        (finding,) = races(*parts, end())
        assert "did not check 1 SIMT thread records" in finding.detail

    def test_held_rows_are_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_simt, "MAX_SIMT_ROWS", 10)
        parts = [start(16)] + [thread_access(WRITE, t, 4 * t) for t in range(16)]
        (finding,) = races(*parts, end())
        assert finding.kind == "internal_error" and "stopped checking this kernel's SIMT threads" in finding.detail

    def test_sections_count_toward_the_bound(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """SIMT_STARTs alone (each a section's dims kept) cannot grow what a launch holds past the bound."""
        monkeypatch.setattr(_simt, "MAX_SIMT_ROWS", 10)
        for tool in ("racecheck", "synccheck"):
            (finding,) = run_kernel(make_detector(tool), stream(*[start(2, block=b % 4) for b in range(11)]))
            assert "stopped checking this kernel's SIMT threads: more than 10" in finding.detail

    def test_end_without_start_and_nested_starts(self) -> None:
        """A stray SIMT_END is nothing; a SIMT_START in an open section begins a new one."""
        assert races(end(), start(2), thread_access(WRITE, 0, 0), start(2), thread_access(WRITE, 1, 0), end()) == []

    def test_random_streams_never_fail(self) -> None:
        rng = np.random.default_rng(28)
        for _ in range(30):
            events = np.zeros(400, dtype=EVENT_DTYPE)
            for name in ("address", "block_size", "thread", "block_id", "pc", "location"):
                events[name] = rng.integers(0, 1 << 16, events.size)
            events["address"] |= rng.integers(0, 1 << 40, events.size).astype(np.uint64)
            events["thread"] %= np.uint16(rng.choice([3, 2049, (1 << 16) - 1]))
            events["kind"] = rng.choice([0, 1, 36, 37, 38], events.size)
            events["space"] = rng.choice([0, 1, 6, 200], events.size)
            events["repeat"] = events["block_num"] = 1
            events["block_size"] %= 80
            events["pipe"] = rng.choice([0, 11], events.size)
            for tool in ("racecheck", "synccheck"):
                for finding in run_kernel(make_detector(tool), *np.array_split(events, 5)):
                    assert finding.kind in ("race_raw", "race_war", "race_waw", "divergent_threads", "internal_error")
            for tool in ("memcheck", "initcheck"):  # their thread positions, with dims or without
                for finding in run_kernel(make_detector(tool), *np.array_split(events, 5)):
                    assert len(finding.thread) in (0, 3)
                    render_text([finding])


def call_access(kind: EventKind, thread: int, address: int, *, size: int = 4, space: Space = Space.UB) -> np.ndarray:
    """A SIMT call's access as its block's PIPE_V instruction (FLAG_SIMT_ENTRY) by thread ``thread`` (0-based)."""
    event = accesses(kind, space, address, size, pipe=Pipe.V, thread=thread + 1)
    event["flags"] |= FLAG_SIMT_ENTRY
    return event


def dma_write(address: int, size: int = 32) -> np.ndarray:
    return accesses(WRITE, Space.UB, address, size, pipe=Pipe.MTE2)


class TestCallAccesses:
    """FLAG_SIMT_ENTRY: a SIMT call's accesses raced as its block's PIPE_V instruction (docs/protocol.md §7.8)."""

    def test_a_dma_overlapping_a_call_access_unordered_races_and_names_the_thread_by_its_sections_dims(self) -> None:
        # 128 bytes: wider than a thread record may be, so the threads' own check would count it unchecked
        (finding,) = races(start(4, 2), call_access(READ, 5, 0x200, size=128), end(), dma_write(0x260))
        assert finding.kind == "race_war" and finding.space == "UB"
        assert [(a.pipe, a.op, a.thread) for a in finding.accesses] == [
            ("PIPE_V", "Read", [1, 1, 0]), ("PIPE_MTE2", "Write", [])]  # fmt: skip
        text = render_text([finding])
        assert "======     Read Thread (1,1,0) at WAR()+0x200 in block 0 (aiv)" in text

    def test_ordered_by_set_and_wait_flag_it_is_silent(self) -> None:
        ordered = (syncs(EventKind.SET_FLAG, Pipe.V, Pipe.MTE2, 1), syncs(EventKind.WAIT_FLAG, Pipe.V, Pipe.MTE2, 1))
        assert races(start(4, 2), call_access(READ, 5, 0x200), end(), *ordered, dma_write(0x200)) == []

    def test_a_call_access_is_no_thread_record(self) -> None:
        """Two threads' accesses of one byte in one call (one serial: one PIPE_V instruction, as a client sends
        them) race with nothing of each other, the threads' own check leaving them out; the main scalar's store
        after them races with each, by the pipes."""
        events = stream(start(2), call_access(READ, 0, 0x200), call_access(WRITE, 1, 0x200), end(),
                        accesses(WRITE, Space.UB, 0x200, 4, pipe=Pipe.S))  # fmt: skip
        events["serial"][2] = events["serial"][1]
        found = run_kernel(make_detector("racecheck"), events, name="simt_kernel")
        assert sorted((f.kind, [(a.pipe, a.thread) for a in f.accesses]) for f in found) == [
            ("race_war", [("PIPE_V", [0, 0, 0]), ("PIPE_S", [])]),
            ("race_waw", [("PIPE_V", [1, 0, 0]), ("PIPE_S", [])]),
        ]

    def test_initcheck_reads_a_calls_accesses_as_its_threads(self) -> None:
        """msSanitizer's initcheck takes a call's records as the threads' accesses: a byte the call wrote is defined
        for a DMA reading it after, and a byte it read that nothing wrote is an uninitialized read by the thread."""
        dma_read = accesses(READ, Space.UB, 0x200, 4, pipe=Pipe.MTE3)
        found = run_kernel(make_detector("initcheck"), stream(start(4, 2), call_access(WRITE, 5, 0x200), end(),
                                                              dma_read), name="simt_kernel")  # fmt: skip
        assert found == []
        (finding,) = run_kernel(make_detector("initcheck"), stream(start(4, 2), call_access(READ, 5, 0x300), end()),
                                name="simt_kernel")  # fmt: skip
        assert (finding.kind, finding.thread, finding.address) == ("uninitialized_read", [1, 1, 0], 0x300)
