"""The kernel emulator end to end: clean kernels stay silent, each planted bug yields exactly its kinds at its
line, and the events it streams follow msSanitizer's instruction mappings (read back from a save file)."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sanitizerd.cli.savefile import read_save
from sanitizerd_protocol import decode_body
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import BlockType, EventKind, Pipe, Space, as_events
from tests.conftest import ROOT, RunningDaemon, sanitizerd

pytestmark = pytest.mark.first_pass_only("detector findings on emulated kernels: the same session code in a worker")

EXAMPLES = ROOT / "examples" / "emulated"
PLANTED = EXAMPLES / "planted.py"
ALL_TOOLS = ("-t", "memcheck", "-t", "initcheck", "-t", "synccheck", "--leak-check", "yes")
JOB = re.compile(r"SUMMARY: job (\S+):")
X, Y, Z = 0x12C0C0000000, 0x12C0D0000000, 0x12C0E0000000


def marked_line(name: str) -> int:
    """The line of planted.py marked ``# line: <name>``."""
    for number, line in enumerate(PLANTED.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# line: {name}"):
            return number
    raise AssertionError(f"no line marked {name}")


def saved_events(path: Path) -> np.ndarray:
    """Every device event a saved job's producers sent, in order."""
    _, recorded = read_save(path)
    messages = [decode_body(r.body) for r in recorded]
    return np.concatenate([as_events(msg.records) for msg in messages if isinstance(msg, m.Events)])


def emulate(daemon: RunningDaemon, short_dir: Path, name: str, source: str, *tools: str) -> tuple[str, np.ndarray]:
    """Run the emulator program ``source`` under `sanitizerd run --save` (with ``tools``): its report and every
    event it streamed."""
    program = short_dir / f"{name}.py"
    program.write_text(textwrap.dedent(source))
    saved = short_dir / f"{name}.save"
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--save", str(saved), *tools, "--", sys.executable, str(program)
    )
    assert result.returncode == 0, result.stderr
    return result.stdout, saved_events(saved)


def run_job(daemon: RunningDaemon, *args: str) -> tuple[str, list[dict[str, object]]]:
    result = sanitizerd("run", "--socket", str(daemon.socket), *ALL_TOOLS, "--", sys.executable, *args)
    assert result.returncode == 0, result.stderr + result.stdout
    job = JOB.search(result.stdout).group(1)
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    return result.stdout, json.loads(query.stdout)


class TestCleanKernels:
    @pytest.mark.parametrize(
        "program", ["add_double_buffer.py", "matmul_tiling.py", "planted.py none", "races.py none"]
    )
    def test_no_finding_with_every_detector(self, daemon: RunningDaemon, program: str) -> None:
        """A correct kernel yields no finding at all with memcheck, initcheck, synccheck and leak checking."""
        name, *args = program.split()
        stdout, findings = run_job(daemon, str(EXAMPLES / name), *args)
        assert findings == []
        assert "No error detected." in stdout


class TestPlantedRaces:
    @pytest.mark.parametrize(
        "bug", ["missing_wait_flag", "missing_pipe_barrier", "gm_overlap", "misordered_cross_flag", "deadlock"]
    )
    def test_races_are_only_races(self, daemon: RunningDaemon, bug: str) -> None:
        """The kernels of races.py plant races only: memcheck, initcheck and leak checking stay silent, and
        synccheck finds only the set_flag that missing_wait_flag leaves unpaired (a wait never set, as in
        deadlock, is not reported)."""
        _, findings = run_job(daemon, str(EXAMPLES / "races.py"), bug)
        expected = {"unpaired_set_flag"} if bug == "missing_wait_flag" else set()
        assert {f["kind"] for f in findings} == expected


# bug -> the kinds it must yield, the facts of the first finding of the first kind, and the marked line of
# planted.py that finding must point at.
PLANTED_BUGS: dict[str, tuple[set[str], dict[str, object], str]] = {
    "illegal_read": (
        {"illegal_read", "uninitialized_read"},
        {"space": "GM", "address": X + 512, "size": 224, "blocks": {"aiv": [1]}},
        "copy-x",
    ),
    "misaligned_access": (
        {"misaligned_access"},
        {"space": "UB", "address": 0x210, "size": 32, "blocks": {"aiv": [0, 1]}},
        "copy-y",
    ),
    "out_of_bounds": (
        {"out_of_bounds"},
        {"space": "GM", "address": Z, "size": 512, "blocks": {"aiv": [1]}},
        "copy-z",
    ),
    "uninitialized_read": (
        {"uninitialized_read"},
        {"space": "GM", "address": Y, "size": 512, "blocks": {"aiv": [0]}},
        "copy-y",
    ),
    "unpaired_set_flag": (
        {"unpaired_set_flag"},
        {"pipe": "PIPE_MTE3", "dst_pipe": "PIPE_MTE2", "event_id": 1, "blocks": {"aiv": [0, 1]}},
        "set-unpaired",
    ),
    "redundant_set_flag": (
        {"redundant_set_flag", "redundant_wait_flag"},
        {"pipe": "PIPE_MTE2", "dst_pipe": "PIPE_V", "blocks": {"aiv": [0, 1]}},
        "set-again",
    ),
    "register_not_reset": (
        {"register_not_reset"},
        {"register": "VECTOR_MASK_0", "actual": 255, "blocks": {"aiv": [0]}},
        "register",
    ),
    "illegal_free": ({"illegal_free"}, {"space": "GM", "address": Z, "kernel": None}, "free-again"),
    "memory_leak": ({"memory_leak"}, {"space": "GM", "address": X, "size": 1024}, "alloc-x"),
}


class TestPlantedBugs:
    @pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
    def test_exactly_its_kinds_at_its_line(self, daemon: RunningDaemon, bug: str) -> None:
        """Each planted bug yields exactly its finding kind(s), with the right place, size, blocks and line."""
        kinds, facts, line = PLANTED_BUGS[bug]
        _, findings = run_job(daemon, str(PLANTED), bug)
        assert {f["kind"] for f in findings} == kinds
        of_kind = [f for f in findings if f["kind"] == sorted(kinds)[0]]
        first = min(of_kind, key=lambda f: (f["serial"], f["location"]["line"] if f["location"] else 0))
        assert {k: first[k] for k in facts} == facts
        assert marked_line(line) in {f["location"]["line"] for f in of_kind if f["location"]}
        assert all(f["location"]["file"].endswith("planted.py") for f in of_kind if f["location"])


class TestLogLevelError:
    def test_skips_the_stomping_check_only(self, daemon: RunningDaemon) -> None:
        """--log-level=error skips multi-core stomping (a warning nobody would see), as msSanitizer does; the same
        kernel at the default level is reported (TestPlantedBugs), and errors are still checked at error level."""
        for bug, kinds in (("out_of_bounds", set()), ("illegal_read", {"illegal_read", "uninitialized_read"})):
            result = sanitizerd(
                "run", "--socket", str(daemon.socket), *ALL_TOOLS, "--log-level=error",
                "--", sys.executable, str(PLANTED), bug,
            )  # fmt: skip
            job = JOB.search(result.stdout).group(1)
            query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
            assert {f["kind"] for f in json.loads(query.stdout)} == kinds, bug


class TestMappings:
    def test_instructions_stream_mssanitizer_events(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """DataCopy, DataCopyPad and a MASK_COUNT vector op stream the events of reference §1.7."""
        _, streamed = emulate(
            daemon,
            short_dir,
            "kernel",
            """
            import client_shim
            from client_shim.emulator import KernelEmulator
            from client_shim.events import Space
            c = client_shim.connect()
            k = KernelEmulator(c, "mappings", 1)
            x = k.gm(0x10000, 4096)
            def body(b):
                b.data_copy(b.ub(0, 1024), x, n_burst=2, len_burst=8, src_stride=4, dst_stride=0)
                b.data_copy_pad(b.ub(0x800, 64), x.tile(0, 40), len_bytes=40)
                b.vector(b.ub(0x400, 512), [b.ub(0, 512)], count=300)
            k.run(body)
            c.free(0x10000)
            c.close()
            """,
        )
        assert streamed["kind"][-1] == EventKind.BLOCK_FINISH  # run() ends each block as msSanitizer does
        events = streamed[streamed["kind"] <= EventKind.WRITE]
        rows = [
            (int(e["kind"]), int(e["space"]), int(e["address"]), int(e["block_size"]), int(e["block_num"]),
             int(e["repeat"]), int(e["repeat_stride"]), int(e["pipe"]))
            for e in events
        ]  # fmt: skip
        R, W = EventKind.READ, EventKind.WRITE
        assert rows == [
            # DataCopy GM->UB on MTE2: 2 bursts of 8 blocks, source gap 4 blocks, destination contiguous
            (R, Space.GM, 0x10000, 32, 8, 2, 12, Pipe.MTE2),
            (W, Space.UB, 0x0, 32, 8, 2, 8, Pipe.MTE2),
            # DataCopyPad of 40 bytes: exactly 40 read on GM, ceil32(40) = 64 written on UB
            (R, Space.GM, 0x10000, 1, 40, 1, 40, Pipe.MTE2),
            (W, Space.UB, 0x800, 1, 64, 1, 64, Pipe.MTE2),
            # MASK_COUNT 300 fp16 elements = 600 bytes: 2 full repeats (512), 2 full blocks (64), a 24-byte tail
            (R, Space.UB, 0x0, 32, 8, 2, 8, Pipe.V),
            (R, Space.UB, 0x200, 32, 2, 1, 8, Pipe.V),
            (R, Space.UB, 0x240, 24, 1, 1, 8, Pipe.V),
            (W, Space.UB, 0x400, 32, 8, 2, 8, Pipe.V),
            (W, Space.UB, 0x600, 32, 2, 1, 8, Pipe.V),
            (W, Space.UB, 0x640, 24, 1, 1, 8, Pipe.V),
        ]
        assert len({int(e["serial"]) for e in events}) == 3  # one serial number per instruction


class TestQueuesAndSyncAll:
    def test_queue_and_sync_all_events(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """A TQue hand-over streams set_flag/wait_flag between its pipes; SyncAll streams a PIPE_ALL barrier, then
        msSanitizer's FFTS set and wait on flag 31; the kernel is clean with every detector."""
        stdout, events = emulate(
            daemon,
            short_dir,
            "queued",
            """
            import client_shim
            from client_shim.emulator import KernelEmulator
            from client_shim.events import Pipe
            c = client_shim.connect()
            k = KernelEmulator(c, "queued", 2)
            x = k.gm(0x10000, 1024)
            def body(b):
                q = b.queue(Pipe.MTE2, Pipe.V, 1)
                ub = b.ub(0, 512)
                b.data_copy(ub, x.tile(b.idx * 512, 512))
                q.enque()
                q.deque()
                b.vector(ub, [ub], repeat=2)
                b.sync_all()
            k.run(body)
            c.free(0x10000)
            c.close()
            """,
            *ALL_TOOLS,
        )
        assert "No error detected." in stdout
        block0 = events[(events["block_id"] == 0) & (events["kind"] >= EventKind.SET_FLAG)]
        assert int(block0["kind"][0]) == EventKind.TENSOR  # b.ub declares the block's tensor
        block0 = block0[block0["kind"] != EventKind.TENSOR]
        assert [(int(e["kind"]), int(e["pipe"]), int(e["dst_pipe"]), int(e["event_id"])) for e in block0] == [
            (EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 1),
            (EventKind.WAIT_FLAG, Pipe.MTE2, Pipe.V, 1),
            (EventKind.PIPE_BARRIER, Pipe.ALL, 0, 0),
            (EventKind.CROSS_SET, Pipe.S, Pipe.S, 31),
            (EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 31),
            (EventKind.BLOCK_FINISH, 0, 0, 0),
        ]


class TestSyncInstructions:
    def test_sync_instructions_stream_their_fields(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """Every synchronization instruction streams one event with its kind's fields (docs/protocol.md §7.4), at
        the caller's line; a MIX kernel runs its cube blocks, then two vector blocks per AI core."""
        _, events = emulate(
            daemon,
            short_dir,
            "syncs",
            """
            import client_shim
            from client_shim.emulator import KernelEmulator
            from client_shim.events import BlockType, Pipe
            c = client_shim.connect()
            k = KernelEmulator(c, "syncs", 1, kernel_type="mix")
            def body(b):
                if b.block_type != BlockType.AIC:
                    return
                b.hset_flag(Pipe.MTE1, Pipe.M, 2)
                b.hwait_flag(Pipe.MTE1, Pipe.M, 2)
                b.cross_set(Pipe.FIX, 3, mode=2)
                b.cross_set(Pipe.MTE3, 5, mode=4, sub_blocks=1)
                b.cross_wait(5, intra=True)
                b.cross_wait(3, pipe=Pipe.MTE2)
                b.ib_set(6)
                b.ib_wait(6, 1)
                b.soft_sync_all(2)
                b.mstx_cross_set(0x2000, 7, Pipe.MTE3)
                b.mstx_cross_wait(0x2000, 7, more=True)
                b.get_buf(4, Pipe.MTE2)
                b.rls_buf(4, Pipe.MTE2)
                b.npu_barrier()
                b.sync_all()
            k.run(body)
            c.close()
            """,
        )
        finished = events[events["kind"] == EventKind.BLOCK_FINISH]
        AIV, AIC = BlockType.AIV, BlockType.AIC
        assert [(int(e["block_type"]), int(e["block_id"])) for e in finished] == [(AIC, 0), (AIV, 0), (AIV, 1)]
        syncs = events[events["kind"] != EventKind.BLOCK_FINISH]
        assert set(syncs["block_type"].tolist()) == {AIC} and set(syncs["block_id"].tolist()) == {0}
        rows = [
            (int(e["kind"]), int(e["pipe"]), int(e["dst_pipe"]), int(e["event_id"]), int(e["mode"]),
             int(e["block_num"]), int(e["address"]))
            for e in syncs
        ]  # fmt: skip
        K, S = EventKind, Pipe.S
        assert rows == [
            (K.HSET_FLAG, Pipe.MTE1, Pipe.M, 2, 0, 1, 0),
            (K.HWAIT_FLAG, Pipe.MTE1, Pipe.M, 2, 0, 1, 0),
            (K.CROSS_SET, Pipe.FIX, S, 3, 2, 2, 0),  # block_num: vector sub-blocks per AI core
            (K.CROSS_SET, Pipe.MTE3, S, 5, 4, 1, 0),
            (K.CROSS_WAIT, S, S, 5, 4, 1, 0),  # wait_intra_block: mode 4
            (K.CROSS_WAIT, Pipe.MTE2, S, 3, 0, 1, 0),  # wait_flag_dev: mode 0
            (K.SOFT_SET, S, S, 6, 0, 1, 0),
            (K.SOFT_WAIT, S, S, 6, 0, 1, 1),  # address: the block waited for
            (K.SOFT_SYNC_ALL, S, S, 0, 0, 1, 2),  # address: the blocks taking part
            (K.MSTX_CROSS_SET, Pipe.MTE3, S, 7, 0, 1, 0x2000),
            (K.MSTX_CROSS_WAIT, S, S, 7, 1, 1, 0x2000),  # mode bit 0: "is more"
            (K.GET_BUF, Pipe.MTE2, S, 4, 0, 1, 0),
            (K.RLS_BUF, Pipe.MTE2, S, 4, 0, 1, 0),
            (K.NPU_BARRIER, S, S, 0, 0, 1, 0),
            (K.PIPE_BARRIER, Pipe.ALL, S, 0, 0, 1, 0),  # SyncAll: the barrier, then FFTS mode 0 on flag 31
            (K.CROSS_SET, S, S, 31, 0, 1, 0),
            (K.CROSS_WAIT, S, S, 31, 0, 1, 0),
        ]
        serials = syncs["serial"].tolist()
        assert len(set(serials)) == len(serials) - 1 and serials[-1] == serials[-2]  # SyncAll's set and wait: one
        _, recorded = read_save(short_dir / "syncs.save")
        sites = {
            loc.id: (loc.file, loc.line)
            for msg in (decode_body(r.body) for r in recorded)
            if isinstance(msg, m.Locations)
            for loc in msg.locations
        }
        lines = [sites[int(e["location"])] for e in syncs]
        assert all(file == str(short_dir / "syncs.py") for file, _ in lines)  # the kernel's lines, never the emulator's
        assert len({line for _, line in lines}) == len(rows) - 2  # SyncAll's three events: one line
