"""What msSanitizer's records may become: the bounds of sanitizerd/compat/records/convert/bounds.py, by fuzzing every
converter with random field values, at every payload layout a release reads it with."""

from __future__ import annotations

import json
import re
import struct
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from sanitizerd.chips import CHIPS
from sanitizerd.compat import wire
from sanitizerd.compat.records.convert import CONVERTERS, BlockContext
from sanitizerd.compat.records.convert.base import Registered, convert_bounded
from sanitizerd.compat.records.convert.bounds import (
    KERNEL_CAP,
    MAX_KERNEL_EXPANDED_EVENTS,
    MAX_RECORD_EVENTS,
    MAX_RECORD_PIECES,
    REASONS,
    RECORD_PIECES,
    ExpansionBudget,
)
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.compat.records.types import RecordType
from sanitizerd.metrics import REFUSED_REASONS
from sanitizerd_protocol.patterns import extents, piece_counts
from sanitizerd_protocol.records import EventKind
from tests import compat_model as cm

SEED = 25
RECORDS = 16  # records per fuzzed batch
BATCHES = 3  # batches per (record type, payload layout)
# Events a record's plain operands make beside its counted expansions (a vector op's masked slots, a unit flag's
# syncs): what the converters may make before the budget has seen a count, per record.
PLAIN_EVENTS = 64

# The 84-byte FIX_L0C_TO_UB record of issue 25 (u32 type, then its payload at the reference layout): nd_num 65 476
# matrices of 56 967 x 3 560 blocks, 130 954 events before the bounds.
ISSUE_RECORD = bytes.fromhex(
    "8d0000002a4458143d9bed3668186e263d11f2cae7b0b47e17de0d3f17a45a5428db01bc1ece4f611dfa05c36da11fbf4f1acb004e1d"
    "9b268a96c2ff36ab87de4921c4ff01bb3101fa2499330ae16a307d0b455a"
)


def _key(dtype: np.dtype) -> str:
    return repr([(name, str(dtype.fields[name][0]), dtype.fields[name][1]) for name in dtype.names or ()])


def _payload_dtypes() -> list[tuple[int, np.dtype]]:
    """Every (record type, payload dtype) a release's slot decoder hands a converter: the reference's and each
    distinct adapted one."""
    seen: dict[tuple[int, str], tuple[int, np.dtype]] = {}
    for layout in wire.LAYOUTS.values():
        for record_type, dtype in record_table(layout).dtypes.items():
            seen.setdefault((record_type, _key(dtype)), (record_type, dtype))
    for record_type, registered in CONVERTERS.items():
        seen.setdefault((record_type, _key(registered.dtype)), (record_type, registered.dtype))
    return sorted(seen.values(), key=lambda pair: (pair[0], _key(pair[1])))


PAYLOADS = _payload_dtypes()


def _random_records(rng: np.random.Generator, dtype: np.dtype, n: int) -> np.ndarray:
    """``n`` records of ``dtype`` with each field drawn per record from: any bits, 0-3, all ones, 16-bit, 8-bit.
    Counts and strides then range from none through the hardware's widths to what no hardware writes."""
    raw = rng.integers(0, 256, size=(n, dtype.itemsize), dtype=np.uint8)
    records = raw.view(dtype).reshape(n)
    for name in dtype.names or ():
        base = dtype.fields[name][0]  # type: ignore[index]
        if base.kind not in "ui":
            continue
        width = base.itemsize * 8
        top = (1 << width) - 1
        mode = rng.integers(0, 5, size=n)
        anything = rng.integers(0, 1 << min(width, 63), size=n, dtype=np.uint64)
        values = np.select(
            [mode == 0, mode == 1, mode == 2, mode == 3],
            [
                anything,
                anything & np.uint64(3),
                np.full(n, top, dtype=np.uint64),
                anything & np.uint64(min(top, 0xFFFF)),
            ],
            anything & np.uint64(0xFF),
        )
        records[name] = values.astype(base)
    return records


def _per_record(serials: np.ndarray, events: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    pos = np.searchsorted(serials, events["serial"])
    assert np.array_equal(serials[np.minimum(pos, serials.size - 1)], events["serial"]), "an event of no record"
    return np.bincount(pos, weights=weights, minlength=serials.size)


def _pieces(events: np.ndarray) -> np.ndarray:
    return piece_counts(events, extents(events)).astype(np.float64)


def _context(rng: np.random.Generator) -> BlockContext:
    chips = sorted(CHIPS)
    return BlockContext(block_type=int(rng.integers(0, 3)), chip=CHIPS[chips[int(rng.integers(0, len(chips)))]])


@pytest.mark.parametrize(("record_type", "dtype"), PAYLOADS, ids=lambda v: v if isinstance(v, str) else None)
def test_fuzz_every_converter_stays_within_its_bounds(record_type: int, dtype: np.dtype) -> None:
    """Random field values through the converter under a launch's budget: each record becomes at most
    MAX_RECORD_EVENTS events of at most MAX_RECORD_PIECES pieces; what the converter makes before the budget's
    final check (the expansion the bound is computed before) is within the same bound, plus its plain events; and
    a refused record makes no event and is said."""
    registered = Registered(dtype, CONVERTERS[record_type].convert)
    name = RecordType(record_type).name
    rng = np.random.default_rng([SEED, record_type, dtype.itemsize, len(dtype.names or ())])
    for _ in range(BATCHES):
        records = _random_records(rng, dtype, RECORDS)
        serials = np.arange(RECORDS, dtype=np.uint64) * np.uint64(3) + np.uint64(11)
        context = _context(rng)
        budget = context.budget
        # What the converter itself makes, its counts charged first: the expansion the bounds are computed before.
        budget.begin(name, serials)
        try:
            made = registered.convert(record_type, records, serials, context)
        except Exception:  # the decoder drops a type whose converter fails (said as a problem): not a bound
            budget.abandon()
            continue
        assert _per_record(serials, made).max(initial=0) <= MAX_RECORD_EVENTS + PLAIN_EVENTS
        events = budget.end(made)
        per_record = _per_record(serials, events)
        assert per_record.max(initial=0) <= MAX_RECORD_EVENTS
        # Pieces: within the bound, or the record is a plain one (a few events, each bounded as a native one is)
        pieces = _per_record(serials, events, _pieces(events))
        assert ((pieces <= MAX_RECORD_PIECES) | (per_record <= PLAIN_EVENTS)).all()
        # The same through convert_bounded, as the slot decoder calls it, with a launch's budget of its own.
        again = BlockContext(block_type=context.block_type, chip=context.chip)
        same = convert_bounded(registered, record_type, name, records, serials, again)
        assert np.array_equal(same.view(np.uint8), events.view(np.uint8))
        refused = sum(budget.take_counts().values())
        assert refused == sum(again.budget.take_counts().values())
        assert bool(refused) == bool(budget.problem_lines())
        assert RECORDS - refused >= np.count_nonzero(per_record)  # a refused record made nothing


@pytest.mark.parametrize("record_type", sorted(CONVERTERS), ids=lambda t: RecordType(t).name)
def test_a_launch_of_hostile_records_is_capped(record_type: int) -> None:
    """Batch after batch of records with every count at its widest, through one launch's budget: what the launch
    becomes stays within its cap (plus each record's plain events), and once the cap is reached every later
    record is refused unconverted."""
    registered = CONVERTERS[record_type]
    dtype = registered.dtype
    name = RecordType(record_type).name
    rng = np.random.default_rng([SEED, record_type])
    context = BlockContext(block_type=1, chip=CHIPS["910B1"])
    total = 0
    seen = 0
    for batch in range(6):
        records = _random_records(rng, dtype, 64)
        for field in dtype.names or ():  # the widest counts: 16-bit all ones, where the field has 16 bits
            if field not in ("file_no", "line_no", "pc", "block_id") and dtype.fields[field][0].itemsize == 2:  # type: ignore[index]
                records[field] = 0xFFFF
        serials = np.arange(64, dtype=np.uint64) + np.uint64(1000 + 64 * batch)
        try:
            events = convert_bounded(registered, record_type, name, records, serials, context)
        except Exception:
            continue
        seen += 64
        total += events.size
        assert _per_record(serials, events).max(initial=0) <= MAX_RECORD_EVENTS
    assert total <= MAX_KERNEL_EXPANDED_EVENTS + PLAIN_EVENTS * seen
    if context.budget.exhausted:
        after = convert_bounded(registered, record_type, name, records, serials + np.uint64(64), context)
        assert after.size == 0
        assert any(line.startswith("kernel_records_refused: ") for line in context.budget.problem_lines())


def test_the_issue_record_is_refused_before_it_is_expanded() -> None:
    registered = CONVERTERS[RecordType.FIX_L0C_TO_UB]
    records = np.frombuffer(ISSUE_RECORD[4:] * 3, dtype=registered.dtype)
    context = BlockContext(block_type=1, chip=CHIPS["910B1"])
    context.budget.begin("FIX_L0C_TO_UB", np.array([5, 6, 7], dtype=np.uint64))
    made = registered.convert(RecordType.FIX_L0C_TO_UB, records, np.array([5, 6, 7], dtype=np.uint64), context)
    # Refused at its loop count, nothing expanded: all it made is its unit flag's set and wait (plain events)
    assert made["kind"].tolist() == [EventKind.SET_FLAG, EventKind.WAIT_FLAG] * 3
    assert context.budget.end(made).size == 0
    assert context.budget.take_counts() == {RECORD_PIECES: 3}
    assert context.budget.problem_lines() == [
        "record_refused: FIX_L0C_TO_UB record serial 5 not checked: its accesses would be up to 1 990 486 638 048 "
        "pieces, past the 131 072 one record may (3 records of this kernel refused so)"
    ]


def test_the_launch_cap_refuses_the_rest_of_the_launch() -> None:
    # 65 535 bursts whose stride does not fit an event: 2 x 65 535 events a record, within a record's bound; the
    # launch's cap takes some of them, and every record after (of any type, expanding or not) is refused
    wide = cm.record("MOV_ALIGN_V2", src=0, dst=0x1000, len_burst=40, n_burst=0xFFFF, src_stride=1 << 30,
                     dst_stride=1 << 30, src_mem=cm.MEM["UB"], dst_mem=cm.MEM["GM"])  # fmt: skip
    registered = CONVERTERS[RecordType.MOV_ALIGN_V2]
    records = np.frombuffer(wide[4:] * 40, dtype=registered.dtype)
    context = BlockContext(block_type=0, chip=CHIPS["910B1"])
    serials = np.arange(40, dtype=np.uint64) + np.uint64(100)
    events = convert_bounded(registered, RecordType.MOV_ALIGN_V2, "MOV_ALIGN_V2", records, serials, context)
    # The reads of all 40 are charged before the writes of any: the cap falls within the writes, and a record is
    # kept whole or not at all, from the first on.
    kept = np.unique(events["serial"]).size
    assert 0 < kept < 40 and np.unique(events["serial"]).tolist() == serials[:kept].tolist()
    assert events.size == kept * 2 * 0xFFFF <= MAX_KERNEL_EXPANDED_EVENTS + 2 * 40
    assert context.budget.exhausted
    plain = cm.record("SET_FLAG", src=1, dst=2, event_id=3)
    sync = CONVERTERS[RecordType.SET_FLAG]
    after = np.frombuffer(plain[4:], dtype=sync.dtype)
    assert convert_bounded(sync, RecordType.SET_FLAG, "SET_FLAG", after, np.array([200], np.uint64), context).size == 0
    assert context.budget.take_counts() == {KERNEL_CAP: 40 - kept + 1}
    assert context.budget.problem_lines() == [
        f"kernel_records_refused: {40 - kept + 1} records from serial {100 + kept} on not checked (MOV_ALIGN_V2, "
        "SET_FLAG): the kernel's expanding records reached 1 048 576 events or 2 097 152 pieces"
    ]


def test_a_refusal_is_told_once_per_launch_and_the_cap_once() -> None:
    budget = ExpansionBudget()
    budget.events_left = 10
    budget.begin("DMA_MOV", np.array([1, 2, 3, 4], dtype=np.uint64))
    dead = budget.charge(np.array([1, 2, 3, 4], dtype=np.uint64), np.array([4, 4, 4, 4]))
    assert dead.tolist() == [False, False, True, True]  # 4 + 4 fit the 10 left, the third passes: it and the rest
    budget.end(np.empty(0, dtype=np.dtype([("serial", "<u8")])))
    budget.refuse_all("DMA_MOV", np.array([9, 10], dtype=np.uint64))
    assert budget.exhausted and budget.take_counts() == {KERNEL_CAP: 4}
    assert budget.problem_lines() == [
        "kernel_records_refused: 4 records from serial 3 on not checked (DMA_MOV): the kernel's expanding records "
        "reached 1 048 576 events or 2 097 152 pieces"
    ]


def test_the_metric_knows_every_reason() -> None:
    assert REFUSED_REASONS == REASONS


# --- through a real daemon, over msSanitizer's wire -------------------------------------------------------------

# What the daemon's processes (the listener and its worker) may reach while a client sends the issue's records,
# 10 000 of them in one slot: docs/security.md ("msSanitizer records"). Before the bounds one slot of 10 took a
# worker to +370 MB and 40 to 1.6 GB.
DAEMON_RSS_BOUND = 512 << 20
SLOT_SECONDS = 20.0  # each kernel's verdict: "within seconds" on a loaded 2-core test machine


def _daemon_peak_rss(pid: int) -> int:
    """The largest peak RSS (VmHWM) of the daemon's process and its children (worker processes), in bytes."""
    peak = 0
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
        if match:
            peak = max(peak, int(match.group(1)) << 10)
        pids += [int(child) for child in children]
    return peak


def test_the_issue_records_end_with_a_named_refusal_within_seconds(short_dir: Path) -> None:
    """The 84-byte FIX_L0C_TO_UB record of issue 25 alone, then slots of 10, 40 and 10 000 of them, each a kernel
    launch sent by a client of msSanitizer's wire to a job's socket of a real daemon (every detector on): each
    launch is answered within seconds, its verdict says which record was refused and why (one internal_error per
    launch, not a flood of findings), the refusals are counted in sanitizerd_compat_records_refused_total, and the
    daemon's peak RSS stays within DAEMON_RSS_BOUND."""
    from sanitizerd.compat import wire
    from sanitizerd.control_client import ControlClient
    from sanitizerd_protocol import messages as m
    from tests.conftest import sanitizerd, start_daemon, stop_daemon
    from tests.test_compat_socket import connect, listen, recv_exactly, wait_until
    from tests.test_e2e_daemon import free_port

    layout = wire.LAYOUTS[wire.DEFAULT_LAYOUT]
    assert layout.record_types["FIX_L0C_TO_UB"] == 141  # the record's type word, as the issue sent it
    port = free_port()
    daemon = start_daemon(short_dir, "--metrics-addr", f"127.0.0.1:{port}")

    def summary(name: bytes) -> bytes:
        payload = bytearray(layout.kernel_summary.size)
        struct.pack_into("<QIB", payload, 0, 0, 1, 1)  # one block, an AIC kernel
        payload[15 : 15 + len(name)] = name
        return wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.KERNEL_SUMMARY)) + bytes(payload)

    def slot(count: int) -> bytes:
        body = cm.slot([ISSUE_RECORD] * count, total_block_dim=1, block_type=1)
        head = wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.KERNEL_RECORD)) + wire.LENGTH.pack(len(body))
        return head + body

    tools = ["memcheck", "racecheck", "initcheck", "synccheck"]
    counts = {"issue_1": 1, "issue_10": 10, "issue_40": 40, "issue_10000": 10_000}
    took: dict[str, float] = {}
    try:
        with ControlClient(daemon.socket) as control:
            control.send(m.JobStart(job="compat-bounds", config=m.Config(tools=tools)))
            name = listen(control, "compat-bounds").name

            def said(kernel: str) -> bool:
                answer = control.request(m.QueryFindings(job="compat-bounds"))
                assert isinstance(answer, m.Findings), answer
                return any(f.kernel == kernel for f in answer.findings)

            def live() -> bool:
                answer = control.request(m.QuerySessions())
                assert isinstance(answer, m.Sessions), answer
                return any(s.job == "compat-bounds" and s.state == "live" for s in answer.sessions)

            started = time.monotonic()
            with connect(name, timeout=60) as client:
                assert len(recv_exactly(client, layout.config.size)) == layout.config.size
                for kernel, count in counts.items():
                    begun = time.monotonic()
                    client.sendall(summary(kernel.encode()) + slot(count))
                    assert recv_exactly(client, 12) == struct.pack("<III", 3001, 1, 0)  # the slot's response
                    assert wait_until(lambda k=kernel: said(k), SLOT_SECONDS), kernel  # type: ignore[misc]
                    took[kernel] = time.monotonic() - begun
            # The session ends once every launch's checks have: all of them done within seconds too.
            assert wait_until(lambda: not live(), SLOT_SECONDS)
            took["session"] = time.monotonic() - started
            rss = _daemon_peak_rss(daemon.process.pid)
            query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", "compat-bounds", "--format=json")
            assert query.returncode == 0, query.stderr
            found = json.loads(query.stdout)
        for kernel, count in counts.items():
            mine = [f for f in found if f["kernel"] == kernel]
            assert [f["kind"] for f in mine] == ["internal_error"], (kernel, mine)
            also = f" ({count:,} records of this kernel refused so)".replace(",", " ") if count > 1 else ""
            assert mine[0]["detail"] == (
                "record_refused: FIX_L0C_TO_UB record serial {} not checked: its accesses would be up to "
                "1 990 486 638 048 pieces, past the 131 072 one record may{}"
            ).format(re.search(r"serial (\d+)", mine[0]["detail"]).group(1), also), mine  # type: ignore[union-attr]
        assert all(seconds < SLOT_SECONDS for seconds in took.values()), took
        assert rss < DAEMON_RSS_BOUND, f"daemon peak RSS {rss >> 20} MiB"
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        refused = sum(counts.values())
        assert re.search(
            rf'^sanitizerd_compat_records_refused_total{{reason="record_pieces"}} {refused}\.0$', text, re.M
        )
        print(f"seconds per launch {took}; daemon peak RSS {rss >> 20} MiB")
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()


# --- findings per kernel: capped with a stated truncation -------------------------------------------------------


def test_synccheck_reports_at_most_its_cap_of_sites_and_says_the_rest() -> None:
    """Unpaired set_flags each at a pc of its own (a client names every site): the earliest MAX_KERNEL_FINDINGS
    sites are reported, one internal_error says how many more were not."""
    from client_shim.events import EventKind as Kind
    from client_shim.events import Pipe, syncs
    from sanitizerd.detectors._sites import MAX_KERNEL_FINDINGS
    from tests.detector_helpers import make_detector, run_kernel, stream

    extra = 100
    n = MAX_KERNEL_FINDINGS + extra
    events = stream(syncs(Kind.SET_FLAG, Pipe.MTE2, Pipe.V, 0, pc=np.arange(n) * 4))
    findings = run_kernel(make_detector("synccheck"), events)
    reported = [f for f in findings if f.kind == "unpaired_set_flag"]
    assert len(reported) == MAX_KERNEL_FINDINGS
    assert max(f.serial for f in reported) == MAX_KERNEL_FINDINGS  # the earliest by serial number
    # Each set is both unpaired and redundant (no wait on its flag follows): 2n sites, the cap's worth reported
    left = 2 * n - MAX_KERNEL_FINDINGS
    (cut,) = [f for f in findings if f.kind == "internal_error"]
    assert cut.detail == (
        f"{left} synccheck finding(s) at {left} more site(s) of this kernel were not reported: a kernel's report "
        f"keeps the first {MAX_KERNEL_FINDINGS} sites of each check by serial number"
    )


def test_registercheck_holds_only_the_registers_it_checks() -> None:
    """SET_REGISTER events naming 60 000 register ids no chip has: nothing held, nothing reported."""
    from client_shim.events import EventKind as Kind
    from client_shim.events import Pipe, syncs
    from tests.detector_helpers import make_detector, run_kernel, stream

    events = stream(syncs(Kind.SET_REGISTER, Pipe.S, Pipe.S, np.arange(100, 60_100), address=5))
    detector = make_detector("registercheck")
    assert run_kernel(detector, events) == []


def test_racecheck_reports_at_most_its_cap_of_sites_and_says_the_rest() -> None:
    """Two pipes of one block writing the same UB bytes without a sync, each pair at pcs of its own: the earliest
    MAX_KERNEL_FINDINGS racing sites are reported, one internal_error says how many more were not."""
    from client_shim.events import EventKind as Kind
    from client_shim.events import Pipe, Space, accesses
    from sanitizerd.detectors._sites import MAX_KERNEL_FINDINGS
    from tests.detector_helpers import make_detector, run_kernel, stream

    extra = 10
    at = np.arange(MAX_KERNEL_FINDINGS + extra)
    events = stream(
        accesses(Kind.WRITE, Space.UB, 0x1000 + at * 32, 32, pc=at * 4, pipe=Pipe.V),
        accesses(Kind.WRITE, Space.UB, 0x1000 + at * 32, 32, pc=at * 4, pipe=Pipe.MTE3),
    )
    findings = run_kernel(make_detector("racecheck"), events)
    races = [f for f in findings if f.kind == "race_waw"]
    assert len(races) == MAX_KERNEL_FINDINGS
    assert max(f.pc for f in races) == (MAX_KERNEL_FINDINGS - 1) * 4  # the earliest by serial number
    (cut,) = [f for f in findings if f.kind == "internal_error"]
    assert cut.detail.startswith(f"{extra} racecheck finding(s) at {extra} more site(s) of this kernel were not")
