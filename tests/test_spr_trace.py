"""memcheck --trace-non-default-spr-reg=vector (msSanitizer master of August 2026): the option as msSanitizer parses
it, examples/emulated/spr.py end to end (real daemon, real `sanitizerd run`, real client processes), master's
``instrName`` packed at the measured offsets and read by the compat door, and the trace's state at and past its
bounds."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from sanitizerd.chips import chip_named
from sanitizerd.cli.options import UsageError, parse_run_args
from sanitizerd.compat import wire
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.compat.records.types import RecordType
from sanitizerd.control_client import ControlClient
from sanitizerd.detectors import DETECTORS
from sanitizerd.detectors._spr_trace import MAX_TRACED_SITES
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.findings.render import render_text
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import (
    EVENT_DTYPE,
    REGISTER_OBSERVED,
    BlockType,
    EventKind,
    InstrName,
    Pipe,
    Register,
    Space,
    empty_events,
)
from tests.conftest import ROOT, RunningDaemon, run_example, sanitizerd
from tests.test_compat_layouts import Client, connect, events_of, feed_all, raw_named
from tests.test_compat_socket import connect as compat_connect
from tests.test_compat_socket import recv_exactly

SPR = ROOT / "examples" / "emulated" / "spr.py"
TRACE = ("-t", "memcheck", "--trace-non-default-spr-reg=vector")
ALL = (1 << 64) - 1


def marked_line(name: str) -> int:
    for number, line in enumerate(SPR.read_text().splitlines(), 1):
        if f"# line: {name}" in line:
            return number
    raise AssertionError(f"no line marked {name}")


# --- the option ------------------------------------------------------------------------------------------------


def test_only_vector_is_accepted_in_mssanitizers_words() -> None:
    with pytest.raises(UsageError) as refused:
        parse_run_args(["--trace-non-default-spr-reg=scalar", "/bin/true"])
    assert str(refused.value).startswith(
        "[sanitizerd] ERROR: --trace-non-default-spr-reg param is invalid, only vector MODE is supported now\n"
    )
    with pytest.raises(UsageError):
        parse_run_args(["--trace-non-default-spr-reg=", "/bin/true"])


@pytest.mark.parametrize("level", ["warn", "error"])
def test_the_log_level_is_raised_to_info_and_said(level: str) -> None:
    options = parse_run_args([f"--log-level={level}", "--trace-non-default-spr-reg=vector", "/bin/true"])
    assert options.config.trace_non_default_spr_reg and options.config.log_level == "info"
    assert (
        "[sanitizerd] --trace-non-default-spr-reg has been enabled, --log-level automatically sets to INFO."
        in options.notices
    )
    quiet = parse_run_args(["--log-level=info", "--trace-non-default-spr-reg=vector", "/bin/true"])
    assert not any("automatically" in notice for notice in quiet.notices)


def test_without_memcheck_it_is_a_sub_option_said_and_the_level_kept() -> None:
    options = parse_run_args(["-t", "racecheck", "--trace-non-default-spr-reg=vector", "/bin/true"])
    assert options.config.log_level == "warn"
    assert (
        "[sanitizerd] --trace-non-default-spr-reg is a sub-option for memcheck, you must enable both memcheck and "
        "this, otherwise this option will not work." in options.notices
    )


# --- end to end --------------------------------------------------------------------------------------------------


def traces(findings: list[dict]) -> list[tuple[str, str, int, int, int, int]]:
    return sorted(
        (f["instr"], f["mask_mode"], f["mask_high"], f["mask_low"], f["location"]["line"], f["count"])
        for f in findings
        if f["kind"] == "non_default_mask"
    )


def test_a_mask_left_narrow_traces_both_instructions(daemon: RunningDaemon) -> None:
    findings, out = run_example(daemon, [str(SPR), "mask_left_narrow"], *TRACE)
    vadd, vmul = marked_line("vadd"), marked_line("vmul")
    assert traces(findings) == [("VADD", "Normal", 0, ALL, vadd, 1), ("VMUL", "Normal", 0, ALL, vmul, 1)]
    assert {f["severity"] for f in findings if f["kind"] == "non_default_mask"} == {"info"}
    assert [f["kind"] for f in findings if f["severity"] != "info"] == ["register_not_reset"]
    text = out.splitlines()
    head = text.index(
        "====== INFO: VADD is using non-default mask. MaskMode: Normal, MaskHigh: 0x0, MaskLow: 0xffffffffffffffff"
    )
    assert text[head + 1] == "======    in kernel spr_custom on device 0"
    assert text[head + 2].startswith(f"======    code in spr.py:{vadd} (serialNo:")
    assert "0 error(s), 1 warning(s)" in out  # a trace is neither


def test_counter_mode_and_a_loop(daemon: RunningDaemon) -> None:
    findings, out = run_example(daemon, [str(SPR), "counter_mode"], *TRACE)
    assert traces(findings) == [("VADD", "Counter", 0, 200, marked_line("vadd"), 1)]
    assert "MaskMode: Counter, MaskHigh: 0x0, MaskLow: 0xc8" in out
    findings, out = run_example(daemon, [str(SPR), "in_a_loop"], *TRACE)
    assert traces(findings) == [("VADD", "Normal", 0, ALL, marked_line("vadd"), 4)]
    assert "======    executed 4 times with these values (first serialNo shown)" in out


def test_the_clean_kernel_is_silent_under_every_tool(daemon: RunningDaemon) -> None:
    tools = ("-t", "memcheck", "-t", "racecheck", "-t", "initcheck", "-t", "synccheck")
    assert run_example(daemon, [str(SPR), "none"], *tools, "--trace-non-default-spr-reg=vector")[0] == []


def test_off_unless_asked(daemon: RunningDaemon) -> None:
    findings, out = run_example(daemon, [str(SPR), "counter_mode"], "-t", "memcheck", "--log-level=info")
    assert findings == [] and "INFO" not in out


# --- the compat door: master's instrName ---------------------------------------------------------------------

WITH_INSTR = [n for n, lay in wire.LAYOUTS.items() if "instrName" in lay.payload_structs["BinaryOpRecord"]["fields"]]
UB = 6  # AddressSpace::UB in the record


def test_the_releases_with_instr_name_read_it() -> None:
    """BinaryOpRecord.instrName sits at 98 (in what was padding) on the releases that have it, master among them;
    26.1.0 has none, and its records are read as before, unnamed."""
    assert wire.layout_named("master").name in WITH_INSTR
    assert wire.layout_named("26.1.0").name not in WITH_INSTR
    for name in WITH_INSTR:
        fields = raw_named(name)["payload_structs"]["BinaryOpRecord"]["fields"]
        assert fields["instrName"] == [98, "u1"] and fields["maskMode"] == [97, "u1"]
        dtype = record_table(wire.LAYOUTS[name]).dtypes[int(RecordType.BINARY_OP)]
        assert dtype.fields["instr"][1] == 98 and dtype.itemsize == 104
    old = record_table(wire.layout_named("26.1.0")).dtypes[int(RecordType.BINARY_OP)]
    assert "instr" not in (old.fields or {})


def binary(client: Client, pc: int, *, instr: int, mask1: int, mask0: int = ALL, mode: int = 0) -> bytes:
    values = {"dst": 0x200, "src0": 0, "src1": 0x100, "location.pc": pc, "location.blockId": 0,
              "vectorMask.mask0": mask0, "vectorMask.mask1": mask1, "repeat": 1, "maskMode": mode,
              "dstBlockNum": 8, "src0BlockNum": 8, "src1BlockNum": 8, "dstBlockSize": 32, "src0BlockSize": 32,
              "src1BlockSize": 32, "dstBlockStride": 1, "src0BlockStride": 1, "src1BlockStride": 1,
              "dstRepeatStride": 8, "src0RepeatStride": 8, "src1RepeatStride": 8, "dstDataBits": 16,
              "src0DataBits": 16, "src1DataBits": 16}  # fmt: skip
    if "instrName" in client.raw["payload_structs"]["BinaryOpRecord"]["fields"]:
        values["instrName"] = instr
    return client.record("BINARY_OP", values)


def converted(name: str, records: list[bytes], *, trace: bool) -> np.ndarray:
    client = Client(raw_named(name))
    conn = connect(wire.LAYOUTS[name])
    config = m.Config(tools=["memcheck"], trace_non_default_spr_reg=trace)
    conn.send(m.Welcome(session=1, config=config))
    out: list[m.Message] = []
    data = client.device_summary() + client.kernel_summary(block_dim=1) + client.slot(records, block_id=0, total=1)
    feed_all(conn, data, out)
    return events_of(out)


def _records(name: str) -> list[bytes]:
    client = Client(raw_named(name))
    return [
        binary(client, 0x10, instr=InstrName.VADD, mask1=0),
        binary(client, 0x14, instr=InstrName.VMUL, mask1=ALL),
        binary(client, 0x18, instr=255, mask1=ALL, mask0=5, mode=1),
    ]


@pytest.mark.parametrize("name", WITH_INSTR)
def test_named_records_carry_their_instruction_and_mask(name: str) -> None:
    events = converted(name, _records(name), trace=True)
    memory = events[events["kind"] <= EventKind.WRITE]
    assert sorted(set(memory["instr"].tolist())) == [InstrName.VADD, InstrName.VMUL, 255]
    observed = events[events["kind"] == EventKind.SET_REGISTER]
    assert (observed["mode"] == REGISTER_OBSERVED).all() and observed.size == 9
    first = np.flatnonzero(events["serial"] == observed["serial"][0])
    assert (events["kind"][first[:3]] == EventKind.SET_REGISTER).all()  # before the record's own accesses
    last = observed[observed["serial"] == observed["serial"].max()]
    assert last["address"].tolist() == [5, ALL, 1 << 56]  # mask0, mask1, CTRL with counter mode
    findings = memcheck(events, trace=True)
    assert [(f.instr, f.mask_mode, f.mask_high, f.mask_low, f.pc) for f in findings] == [
        ("VADD", "Normal", 0, ALL, 0x10),
        ("Unknown InstrName(255)", "Counter", ALL, 5, 0x18),
    ]
    registers = DETECTORS["registercheck"](context(["registercheck"]))
    assert run(registers, events) == []  # observed values are not what the kernel left


@pytest.mark.parametrize("name", [WITH_INSTR[0], wire.layout_named("26.1.0").name])
def test_nothing_more_travels_unless_the_session_traces(name: str) -> None:
    events = converted(name, _records(name), trace=False)
    assert not (events["kind"] == EventKind.SET_REGISTER).any()
    if name not in WITH_INSTR:
        assert not events["instr"].any()


# --- the detector, at and past its bounds ------------------------------------------------------------------------


def context(tools: list[str], *, trace: bool = True) -> SessionContext:
    config = m.Config(tools=tools, trace_non_default_spr_reg=trace)
    return SessionContext(job="j", session=1, pid=2, device=0, chip=chip_named("910B1"), config=config)


def run(detector: object, *batches: np.ndarray) -> list[Finding]:
    detector.kernel_begin(KernelLaunch(kernel=1, name="k", block_dim=8, kernel_type="aiv"))  # type: ignore[attr-defined]
    for batch in batches:
        detector.check(batch)  # type: ignore[attr-defined]
    return detector.kernel_end()  # type: ignore[attr-defined]


def memcheck(*batches: np.ndarray, trace: bool = True) -> list[Finding]:
    return [f for f in run(DETECTORS["memcheck"](context(["memcheck"], trace=trace)), *batches)
            if f.severity == "info"]  # fmt: skip


def vector(serial: int, *, pc: int = 0x100, block: int = 0, block_type: int = BlockType.AIV,
           instr: int = InstrName.VADD, n: int = 1) -> np.ndarray:  # fmt: skip
    events = empty_events(2 * n)
    events["kind"][0::2], events["kind"][1::2] = EventKind.READ, EventKind.WRITE
    events["space"], events["pipe"], events["block_size"], events["block_num"] = Space.UB, Pipe.V, 32, 8
    events["address"][1::2] = 0x100
    events["serial"] = np.repeat(np.arange(serial, serial + n, dtype=np.uint64), 2)
    events["pc"] = np.repeat(np.arange(pc, pc + 4 * n, 4, dtype=np.uint64), 2)
    events["block_id"], events["block_type"], events["instr"] = block, block_type, instr
    return events


def setting(reg: Register, value: int, serial: int, *, block: int = 0, block_type: int = BlockType.AIV) -> np.ndarray:
    events = empty_events(1)
    events["kind"], events["event_id"], events["address"], events["serial"] = EventKind.SET_REGISTER, reg, value, serial
    events["block_id"], events["block_type"], events["block_size"] = block, block_type, 0
    return events


def test_default_masks_and_untraced_sessions_say_nothing() -> None:
    narrow = np.concatenate([setting(Register.VECTOR_MASK_1, 0, 1), vector(2)])
    assert memcheck(vector(1)) == []
    assert memcheck(narrow, trace=False) == []
    assert len(memcheck(narrow)) == 1


def test_an_instruction_split_across_batches_is_one_execution() -> None:
    both = np.concatenate([setting(Register.VECTOR_MASK_0, 1, 1), vector(2), vector(3)])
    (finding,) = memcheck(both[:2], both[2:4], both[4:])  # serial 2's read and write in two batches
    assert (finding.count, finding.serial, finding.mask_low) == (2, 2, 1)


def test_blocks_keep_their_own_registers_at_the_ends_of_their_ids() -> None:
    """Block ids 0xFFFF and block types past the known ones are blocks of their own: one block's mask is not
    another's, and the same serial in two blocks is two executions."""
    batch = np.concatenate([
        setting(Register.VECTOR_MASK_0, 7, 1, block=0xFFFF, block_type=255),
        vector(2, block=0xFFFF, block_type=255), vector(2, block=0xFFFF), vector(2, block=0, block_type=255),
        vector(3, block=0xFFFF, block_type=255),
    ])  # fmt: skip
    (finding,) = memcheck(batch)
    assert (finding.count, finding.mask_low) == (2, 7)


def test_only_memory_events_are_instructions() -> None:
    sync = setting(Register.VECTOR_MASK_1, 0, 1)
    flag = empty_events(1)
    flag["kind"], flag["instr"], flag["serial"] = EventKind.SET_FLAG, InstrName.VADD, 2
    assert memcheck(np.concatenate([sync, flag])) == []


def test_sites_past_the_bound_are_counted_and_said() -> None:
    """A client names every pc: the earliest MAX_TRACED_SITES sites are traced, the rest counted in one more INFO."""
    extra = 3
    batch = np.concatenate([setting(Register.VECTOR_MASK_1, 0, 0), vector(1, n=MAX_TRACED_SITES + extra)])
    findings = memcheck(batch[: batch.size // 2], batch[batch.size // 2 :], vector(1, n=2))  # two seen again
    traced = [f for f in findings if f.kind == "non_default_mask"]
    (left,) = [f for f in findings if f.kind == "trace_left_out"]
    assert len(traced) == MAX_TRACED_SITES and traced[0].pc == 0x100
    assert [f.count for f in traced[:3]] == [2, 2, 1]  # the two sites run again fold into theirs
    assert left.count == extra and f"{extra} more instruction site(s)" in left.detail
    assert f"at most {MAX_TRACED_SITES} sites per kernel" in render_text([left])


def test_state_resets_with_each_launch() -> None:
    detector = DETECTORS["memcheck"](context(["memcheck"]))
    assert len([f for f in run(detector, setting(Register.VECTOR_MASK_1, 0, 1), vector(2)) if f.severity == "info"])
    assert [f for f in run(detector, vector(2)) if f.severity == "info"] == []  # a new launch starts at defaults


def test_the_event_layout_keeps_its_size() -> None:
    assert EVENT_DTYPE.itemsize == 56 and EVENT_DTYPE.fields["instr"][1] == 53


def test_a_trace_is_below_warning_in_queries() -> None:
    """`findings --severity warning` means at least a warning: INFO traces are left out; no severity takes all."""
    from sanitizerd_protocol.model import kinds_named

    warning_or_worse = kinds_named([], "warning")
    assert warning_or_worse is not None
    assert {"out_of_bounds", "illegal_read"} <= warning_or_worse
    assert not {"non_default_mask", "trace_left_out"} & warning_or_worse
    assert kinds_named([], "") is None
    assert kinds_named(["non_default_mask"], "warning") == set()


# --- the compat door over a real socket ---------------------------------------------------------------------------


def send_compat_kernel(daemon: RunningDaemon, name: str, job: str, records: list[bytes], *, trace: bool) -> None:
    """``name``'s hooks on ``job``'s compat socket: the handshake, then one kernel of one block holding
    ``records``, answered (KERNEL_RECORD_RESPONSE) before the connection closes."""
    layout, client = wire.LAYOUTS[name], Client(raw_named(name))
    config = m.Config(tools=["memcheck"], trace_non_default_spr_reg=trace, log_level="info" if trace else "warn")
    with ControlClient(daemon.socket) as control:
        control.send(m.JobStart(job=job, config=config))
        answer = control.request(m.CompatListen(job=job, layout=layout.name))
        assert isinstance(answer, m.CompatListening), answer
        with compat_connect(answer.name, timeout=30) as sock:
            assert len(recv_exactly(sock, layout.config.size)) == layout.config.size
            sock.sendall(client.device_summary() + client.kernel_summary("spr_custom") + client.slot(records))
            response = layout.packet_number(wire.PacketType.KERNEL_RECORD_RESPONSE)
            assert recv_exactly(sock, 12) == struct.pack("<III", response, 1, 0)


@pytest.mark.parametrize("trace", [True, False])
def test_master_hooks_on_a_compat_socket_trace_a_non_default_mask(daemon: RunningDaemon, trace: bool) -> None:
    """master's hooks send three named BINARY_OP records through a job's compat socket: a VADD whose high mask
    word is 0, a VMUL with the default mask, and an unnamed id 255 in counter mode with MaskLow 5. With
    --trace-non-default-spr-reg=vector the daemon reports msSanitizer's INFO lines for the first and last (in that
    order) and nothing for the default mask; without it, nothing at all."""
    name = wire.layout_named("master").name
    job = f"compat-spr-{trace}"
    send_compat_kernel(daemon, name, job, _records(name), trace=trace)
    found = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format=json").stdout)
    if not trace:
        assert found == []
        return
    assert [(f["kind"], f["severity"], f["instr"], f["pc"]) for f in found] == [
        ("non_default_mask", "info", "VADD", 0x10),
        ("non_default_mask", "info", "Unknown InstrName(255)", 0x18),
    ]
    text = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "text").stdout
    lines = [line for line in text.splitlines() if line.startswith("======")]
    head = lines.index(
        "====== INFO: VADD is using non-default mask. MaskMode: Normal, MaskHigh: 0x0, MaskLow: 0xffffffffffffffff"
    )
    assert lines[head + 1] == "======    in kernel spr_custom on device 0"
    assert lines[head + 2].startswith("======    code in unknown:0 (serialNo:")  # no kernel binary: no file
    assert (
        "====== INFO: Unknown InstrName(255) is using non-default mask. MaskMode: Counter, MaskHigh: "
        "0xffffffffffffffff, MaskLow: 0x5"
    ) in lines
    assert not [line for line in lines if "VMUL" in line]
