"""msSanitizer's mstx cross-NPU barrier on its own wire (issue 28): MSTX_STUB records of interface 9 packed at the
offsets wires.json measured, read by the compat door into the native NPU_BARRIER; hostile barrier records; and end to
end, two msSanitizer-form connections of one job on two devices through a real daemon's compat socket."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

from sanitizerd.compat import wire
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.compat.records.types import RecordType
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import EventKind, Pipe
from tests.conftest import ROOT, RunningDaemon, sanitizerd
from tests.mssanitizer_job_client import CROSS_NPU_BARRIER, READ_LINE, SHARED, WRITE_LINE
from tests.test_compat_layouts import Client, connect, events_of, feed_all, raw_named
from tests.test_hooks import bare_env

MEMBER = "interface.mstxCrossNpuBarrier."


def _mstx_fields(name: str) -> dict[str, list]:
    return raw_named(name)["payload_structs"]["MstxRecord"]["fields"]


WITH_BARRIER = [name for name in wire.LAYOUTS if MEMBER + "usedDeviceNum" in _mstx_fields(name)]
WITH_PIPE_ALL = [name for name in WITH_BARRIER if MEMBER + "pipeBarrierAll" in _mstx_fields(name)]
FIRST, FIRST_WITH_PIPE_ALL = "mssanitizer-9743f8b7", "mssanitizer-ef097263"
SIGNALS_ONLY = "mssanitizer-5cb9ea94"  # signal set / wait, no cross-NPU barrier yet
MSTX = int(RecordType.MSTX_STUB)


def test_the_barrier_is_read_where_measured_and_nowhere_else() -> None:
    """MstxCrossNpuBarrier {u32 usedDeviceNum; u32 *usedDeviceId; u32 usedCoreNum; u32 *usedCoreId; bool isAIVOnly;
    bool pipeBarrierAll} in MstxRecord's union at 48: usedDeviceNum 48, pipeBarrierAll 81 once it exists. Read from
    the barrier's first release to master; the reference and the releases before have no such member."""
    assert FIRST in WITH_BARRIER and FIRST_WITH_PIPE_ALL in WITH_PIPE_ALL and FIRST not in WITH_PIPE_ALL
    assert wire.layout_named("master").name in WITH_PIPE_ALL and wire.layout_named("26.1.0").name in WITH_PIPE_ALL
    for name in WITH_BARRIER:
        fields = _mstx_fields(name)
        assert fields[MEMBER + "usedDeviceNum"][:2] == [48, "<u4"] and fields[MEMBER + "usedCoreNum"][0] == 64
        dtype = record_table(wire.LAYOUTS[name]).dtypes[MSTX]
        assert dtype.fields["npu_devices"][1] == 48
        assert ("npu_pipe_all" in dtype.names) == (name in WITH_PIPE_ALL)
        if name in WITH_PIPE_ALL:
            assert fields[MEMBER + "pipeBarrierAll"][:2] == [81, "?"] and dtype.fields["npu_pipe_all"][1] == 81
    for name in (wire.DEFAULT_LAYOUT, SIGNALS_ONLY):
        dtype = record_table(wire.LAYOUTS[name]).dtypes[MSTX]  # the other annotations are still read there
        assert "npu_devices" not in dtype.names and "npu_pipe_all" not in dtype.names


def barrier(client: Client, pc: int, *, block_id: int = 0, **values: int) -> bytes:
    fields = {"interfaceType": CROSS_NPU_BARRIER, "location.pc": pc, "location.blockId": block_id}
    return client.record("MSTX_STUB", fields | {MEMBER + k: v for k, v in values.items() if k != "error"}
                         | ({"error": values["error"]} if "error" in values else {}))  # fmt: skip


def converted(client: Client, records: list[bytes]) -> tuple[np.ndarray, list[m.Message]]:
    conn = connect(wire.LAYOUTS[client.name])
    out: list[m.Message] = []
    feed_all(conn, client.device_summary() + client.kernel_summary() + client.slot(records), out)
    return events_of(out), out


def barriers(events: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(kind, pipe, serial, pc) of each event but the slot's BLOCK_FINISH."""
    rows = events[events["kind"] != EventKind.BLOCK_FINISH]
    return [(int(r["kind"]), int(r["pipe"]), int(r["serial"]), int(r["pc"])) for r in rows]


@pytest.mark.parametrize("name", [FIRST, FIRST_WITH_PIPE_ALL, "master"])
def test_a_barrier_becomes_an_npu_barrier(name: str) -> None:
    """One NPU_BARRIER on PIPE_S per record, at its serial and pc; with pipeBarrierAll (where the release has it) a
    pipe_barrier(PIPE_ALL) first, as msSanitizer's parser makes its pipe-all events before the barrier."""
    client = Client(raw_named(name))
    pipe_all = {"pipeBarrierAll": 1} if name in WITH_PIPE_ALL else {}
    events, _ = converted(client, [barrier(client, 0x40, usedDeviceNum=2, usedCoreNum=8, **pipe_all),
                                   barrier(client, 0x44, usedDeviceNum=2, usedCoreNum=8)])  # fmt: skip
    npu, all_pipes = int(EventKind.NPU_BARRIER), int(EventKind.PIPE_BARRIER)
    serial = wire.LAYOUTS[client.name].first_serial  # the slot's first record: where the release starts its count
    first = [(all_pipes, int(Pipe.ALL), serial, 0x40)] if pipe_all else []
    assert barriers(events) == [*first, (npu, int(Pipe.S), serial, 0x40), (npu, int(Pipe.S), serial + 1, 0x44)]


class TestHostileBarriers:
    def test_counts_at_and_past_their_bounds_make_one_barrier_each(self) -> None:
        """The device and core counts are not read for ordering (the native barrier is the whole job's): zero,
        one, and u32's top each make one barrier and nothing else; a bool byte of 0xFF is true."""
        client = Client(raw_named("master"))
        records = [
            barrier(client, 0x10, usedDeviceNum=0, usedCoreNum=0),
            barrier(client, 0x14, usedDeviceNum=2**32 - 1, usedCoreNum=2**32 - 1, usedDeviceId=2**64 - 1),
            barrier(client, 0x18, usedDeviceNum=1, usedCoreNum=1, isAIVOnly=0xFF, pipeBarrierAll=0xFF),
        ]
        events, out = converted(client, records)
        kinds = [k for k, *_ in barriers(events)]
        assert kinds == [EventKind.NPU_BARRIER, EventKind.NPU_BARRIER, EventKind.PIPE_BARRIER, EventKind.NPU_BARRIER]
        assert isinstance(out[-1], m.Close)

    def test_a_record_marked_as_an_error_makes_nothing_and_is_said(self) -> None:
        client = Client(raw_named("master"))
        events, out = converted(client, [barrier(client, 0x10, usedDeviceNum=2, error=1)])
        assert barriers(events) == []
        [end] = [x for x in out if isinstance(x, m.KernelEnd)]
        assert any("marked as errors by the kernel" in line for line in end.problems), end.problems

    def test_interface_9_of_a_release_without_the_barrier_is_nothing(self) -> None:
        """Before the barrier existed, interface 9 names nothing: no event is made of its bytes."""
        client = Client(raw_named(SIGNALS_ONLY))
        values = {"interfaceType": CROSS_NPU_BARRIER, "location.pc": 0x10}
        events, _ = converted(client, [client.record("MSTX_STUB", values)])
        assert barriers(events) == []

    def test_many_barriers_in_one_slot_stay_one_event_each(self) -> None:
        """A slot of 4096 barriers with pipeBarrierAll: two events per record, no more, and the launch ends."""
        client = Client(raw_named("master"))
        record = barrier(client, 0x10, usedDeviceNum=8, usedCoreNum=48, pipeBarrierAll=1)
        events, out = converted(client, [record] * 4096)
        counts = np.bincount(events["kind"], minlength=64)
        assert counts[EventKind.NPU_BARRIER] == 4096 and counts[EventKind.PIPE_BARRIER] == 4096
        assert any(isinstance(x, m.KernelEnd) for x in out)


# --- end to end: a real daemon, `sanitizerd run`, a client process of msSanitizer's wire ------------------------

JOB = re.compile(r"SUMMARY: job (\S+):")


def run_job(daemon: RunningDaemon, scenario: str, *tools: str) -> tuple[str, list[dict]]:
    env = bare_env(SANITIZERD_COMPAT_LAYOUT="master", PYTHONPATH=str(ROOT))
    result = sanitizerd("run", "--socket", str(daemon.socket), *tools, "--", sys.executable, "-m",
                        "tests.mssanitizer_job_client", "master", scenario, env=env)  # fmt: skip
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    job = JOB.search(result.stdout).group(1)  # type: ignore[union-attr]
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    return result.stdout, json.loads(query.stdout)


CROSS = ("-t", "racecheck", "--check-cross-npu-races=yes")


def test_unordered_accesses_of_two_devices_race_in_mssanitizers_text(daemon: RunningDaemon) -> None:
    out, findings = run_job(daemon, "race", *CROSS)
    [race] = findings
    assert race["kind"] == "race_raw" and race["detail"] == "cross-NPU"
    assert [(a["op"], a["device"]) for a in race["accesses"]] == [("Write", 0), ("Read", 1)]
    assert re.search(
        r"====== ERROR: Potential RAW hazard detected at GM in allgather_custom:\n"
        rf"======    PIPE_MTE3 Write at RAW\(\)\+{SHARED:#x} in block 0 \(aiv\) on device 0 at \S+:{WRITE_LINE} "
        r"\(serialNo:\d+\)\n"
        rf"======    PIPE_MTE2 Read at RAW\(\)\+{SHARED:#x} in block 0 \(aiv\) on device 1 at \S+:{READ_LINE} "
        r"\(serialNo:\d+\)\n",
        out,
    ), out
    assert "[sanitizerd] Cross npu racecheck finished. See all detected errors above." in out


def test_the_barrier_ordered_job_is_silent(daemon: RunningDaemon) -> None:
    """The same accesses with msSanitizer's cross-NPU barrier between them; synccheck too (it pairs no flag)."""
    out, findings = run_job(daemon, "ordered", *CROSS, "-t", "synccheck")
    assert findings == [], out
    assert "[sanitizerd] Cross npu racecheck finished. No error detected." in out
