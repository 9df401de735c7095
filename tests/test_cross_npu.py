"""Memory-permission regions and cross-NPU racecheck (issue 28): the session's handling of ``region_permission``,
the job's comparison of shared-memory accesses, then real daemons, `sanitizerd run` and client processes on the
emulated examples (examples/emulated/cross_npu.py)."""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from client_shim import Client, ClientError
from client_shim.events import EventKind, Pipe, Space, accesses, syncs
from sanitizerd.chips import DEFAULT_CHIP, chip_named
from sanitizerd.detectors import _cross_npu, crossnpu
from sanitizerd.detectors._cross_npu import JobAccesses
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.detectors.crossnpu import CrossNpuRacecheck
from sanitizerd.sessions.session import Peer, RegionRefused, Session
from sanitizerd.sessions.work import SharedSpan
from sanitizerd_protocol import RemoteProtocolError
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import CROSS_NPU, Finding
from tests.conftest import ROOT, RunningDaemon, assert_serves_fresh_session, sanitizerd, start_daemon, stop_daemon
from tests.test_hostile import free_port, metric

EXAMPLE = ROOT / "examples" / "emulated" / "cross_npu.py"
JOB = re.compile(r"SUMMARY: job (\S+):")
CROSS_CONFIG = m.Config(tools=["racecheck"], check_cross_npu_races=True)
SHARED = 0x12C100000000


def marked_line(name: str) -> int:
    for number, line in enumerate(EXAMPLE.read_text().splitlines(), 1):
        if f"# line: {name}" in line:
            return number
    raise AssertionError(f"no line marked {name}")


# --- the session: regions in, bounded --------------------------------------------------------------------------


def session(device: int = 0, ident: int = 1) -> Session:
    return Session(ident, m.Hello(version=1, job="j", device=device), CROSS_CONFIG, Peer())


class TestRegions:
    def test_a_region_goes_to_the_detectors_with_the_sessions_device(self) -> None:
        [region] = session(device=3).handle(m.RegionPermission(address=0x1000, size=64, flags=m.REGION_READ))
        assert isinstance(region, m.RegionPermission) and (region.device, region.flags) == (3, m.REGION_READ)

    def test_size_zero_marks_nothing(self) -> None:
        s = session()
        assert s.handle(m.RegionPermission(address=0x1000, size=0, flags=0)) == []
        assert s.regions == 0

    @pytest.mark.parametrize(("address", "size"), [(2**64 - 1, 1), (1, 2**64 - 1), (2**63, 2**63)])
    def test_a_region_past_the_end_of_the_address_space_is_a_bad_packet(self, address: int, size: int) -> None:
        with pytest.raises(RemoteProtocolError, match="passes the end of the address space") as caught:
            session().handle(m.RegionPermission(address=address, size=size))
        assert caught.value.reason == "bad_packet"

    def test_a_region_ending_at_the_last_address_is_held(self) -> None:
        [region] = session().handle(m.RegionPermission(address=2**64 - 2, size=1))
        assert isinstance(region, m.RegionPermission)

    @pytest.mark.parametrize("flags", [0x8, 0x10, 0xFF, 2**32 - 1, -1])
    def test_unknown_flags_are_a_bad_packet(self, flags: int) -> None:
        with pytest.raises(RemoteProtocolError, match="bits outside read") as caught:
            session().handle(m.RegionPermission(address=0x1000, size=64, flags=flags))
        assert caught.value.reason == "bad_packet"

    def test_regions_past_the_bound_are_refused_and_said(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """At the bound a region is still held; past it, refused with an internal_error finding (a run whose regions
        were not all applied cannot pass as clean), and the session goes on."""
        monkeypatch.setattr(m, "MAX_REGIONS", 3)
        s = session()
        held = [s.handle(m.RegionPermission(address=0x1000 * i, size=64)) for i in range(1, 4)]
        assert all(isinstance(items[0], m.RegionPermission) for items in held)
        [refused] = s.handle(m.RegionPermission(address=0x9000, size=64))
        assert isinstance(refused, RegionRefused)
        assert refused.finding.kind == "internal_error" and "bound of 3 regions" in refused.finding.detail
        assert s.regions == 3

    def test_ipc_exports_and_mappings_are_shared_spans_named_by_the_exporter(self) -> None:
        from sanitizerd.sessions.ipc import IpcTable

        table = IpcTable()
        exporter = Session(1, m.Hello(version=1, job="j", device=0), CROSS_CONFIG, Peer(), ipc=table)
        importer = Session(2, m.Hello(version=1, job="j", device=1), CROSS_CONFIG, Peer(), ipc=table)
        set_items = exporter.handle(m.Ipc(op="set", name="kv", address=0x1000, size=256))
        map_items = importer.handle(m.Ipc(op="map", name="kv", address=0x9000))
        assert [i for i in set_items if isinstance(i, SharedSpan)] == [SharedSpan(0x1000, 256, 1, 0x1000)]
        assert [i for i in map_items if isinstance(i, SharedSpan)] == [SharedSpan(0x9000, 256, 1, 0x1000)]
        unmap_items = importer.handle(m.Ipc(op="unmap", address=0x9000))
        assert [i for i in unmap_items if isinstance(i, SharedSpan)] == [SharedSpan(0x9000, 0, 0, 0)]


# --- the comparison: state plus a function over batches ---------------------------------------------------------


def context(session_id: int, device: int, job: JobAccesses) -> SessionContext:
    return SessionContext(job="j", session=session_id, pid=1, device=device, chip=chip_named(DEFAULT_CHIP),
                          config=CROSS_CONFIG, cross_npu=job)  # fmt: skip


def device(session_id: int, dev: int, job: JobAccesses, *, shared: bool = True) -> CrossNpuRacecheck:
    checker = CrossNpuRacecheck(context(session_id, dev, job), job)
    if shared:
        checker.region_permission(m.RegionPermission(address=SHARED, size=4096, device=dev, flags=7))
    return checker


def counted(checker: CrossNpuRacecheck) -> tuple[CrossNpuRacecheck, list[tuple[str, int]]]:
    """The checker, and what it tells the daemon's metric it left out at its bounds, as it tells it."""
    cuts: list[tuple[str, int]] = []
    checker.context.on_cross_npu_cut = lambda reason, count: cuts.append((reason, count))
    return checker, cuts


def kernel(checker: CrossNpuRacecheck, *batches: np.ndarray) -> list[Finding]:
    checker.kernel_begin(KernelLaunch(1, "k", 1, "aiv"))
    for batch in batches:
        checker.check(batch)
    return checker.kernel_end()


def write(address: int, serial: int = 1, **kw: object) -> np.ndarray:
    return accesses(EventKind.WRITE, Space.GM, address, 32, pipe=Pipe.MTE3, serial=serial, **kw)


def read(address: int, serial: int = 2, **kw: object) -> np.ndarray:
    return accesses(EventKind.READ, Space.GM, address, 32, pipe=Pipe.MTE2, serial=serial, **kw)


def barrier(**kw: object) -> np.ndarray:
    return syncs(EventKind.NPU_BARRIER, Pipe.S, **kw)


class TestComparison:
    def test_unordered_write_and_read_on_two_devices_race(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED)) == []
        [race] = kernel(device(2, 1, job), read(SHARED + 16))
        assert race.kind == "race_raw" and race.detail == CROSS_NPU
        assert [(a.op, a.device, a.address) for a in race.accesses] == [("Write", 0, SHARED), ("Read", 1, SHARED + 16)]

    def test_a_barrier_between_them_orders_them(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), barrier(serial=3)) == []
        assert kernel(device(2, 1, job), barrier(serial=1), read(SHARED)) == []

    def test_barriers_of_an_earlier_kernel_carry_over(self) -> None:
        job = JobAccesses()
        first, second = device(1, 0, job), device(2, 1, job)
        assert kernel(first, write(SHARED), barrier(serial=3)) == []
        assert kernel(second, barrier(serial=1)) == []  # its first kernel passes the barrier
        assert kernel(second, read(SHARED)) == []  # its next kernel runs after it

    def test_same_epoch_on_both_sides_of_a_barrier_races(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), barrier(serial=1), write(SHARED)) == []
        [race] = kernel(device(2, 1, job), barrier(serial=1), read(SHARED, serial=5))
        assert race.kind == "race_raw"

    def test_one_device_two_sessions_is_not_cross_npu(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED)) == []
        assert kernel(device(2, 0, job), write(SHARED)) == []

    def test_reads_alone_and_atomic_pairs_do_not_race(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), read(SHARED), write(SHARED + 64, atomic=True)) == []
        assert kernel(device(2, 1, job), read(SHARED), write(SHARED + 64, atomic=True)) == []

    def test_memory_not_shared_is_not_compared(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job, shared=False), write(SHARED)) == []
        assert kernel(device(2, 1, job, shared=False), write(SHARED)) == []
        assert job.held.size == 0

    def test_ipc_memory_is_compared_in_the_exporters_addresses(self) -> None:
        job = JobAccesses()
        exporter, importer = device(1, 0, job, shared=False), device(2, 1, job, shared=False)
        exporter.shared_span(0x1000, 256, 1, 0x1000)
        importer.shared_span(0x9000, 256, 1, 0x1000)
        assert kernel(exporter, write(0x1040)) == []
        [race] = kernel(importer, write(0x9040 + 16, serial=7))
        assert race.kind == "race_waw"
        assert [(a.device, a.address) for a in race.accesses] == [(0, 0x1040), (1, 0x9050)]
        importer.shared_span(0x9000, 0, 0, 0)  # unmapped: no longer shared
        assert kernel(importer, write(0x9040, serial=9)) == []

    def test_held_accesses_are_capped_and_the_rest_said(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_cross_npu, "MAX_SHARED_ACCESSES", 4)
        monkeypatch.setattr(crossnpu, "MAX_SHARED_ACCESSES", 4)
        job = JobAccesses()
        addresses = SHARED + 64 * np.arange(6, dtype=np.uint64)
        first, cuts = counted(device(1, 0, job))
        findings = kernel(first, write(addresses))
        [cut] = findings
        assert cut.kind == "internal_error" and "2 accesses of this kernel to shared memory not held" in cut.detail
        assert job.held.size == 4 and cuts == [("job_accesses", 2)]
        second, cuts = counted(device(2, 1, job))
        findings = kernel(second, read(SHARED))
        assert [f.kind for f in findings] == ["race_raw", "internal_error"]  # held, compared, and itself not held
        assert cuts == [("job_accesses", 1)]
        assert job.dropped == 3
        job.release()
        assert job.held.size == 0

    def test_pair_tests_past_the_bound_are_not_made_and_said(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_cross_npu, "MAX_PAIR_TESTS", 2)
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED + 64 * np.arange(3, dtype=np.uint64))) == []
        second, cuts = counted(device(2, 1, job))
        [cut] = kernel(second, read(SHARED))
        assert "0 accesses of this kernel to shared memory not held and 3 access pairs not compared" in cut.detail
        assert cuts == [("pair_tests", 3)]

    def test_all_jobs_together_are_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A flood of jobs cannot hold more than the host's bound; a job that goes gives its share back."""
        monkeypatch.setattr(_cross_npu, "MAX_HOST_SHARED_ACCESSES", _cross_npu.HOST_HELD.held + 3)
        jobs = [JobAccesses() for _ in range(3)]
        addresses = SHARED + 64 * np.arange(2, dtype=np.uint64)
        kernel(device(1, 0, jobs[0]), write(addresses))
        second, cuts = counted(device(2, 0, jobs[1]))
        [cut] = kernel(second, write(addresses))
        assert "1 accesses of this kernel to shared memory not held" in cut.detail
        assert cuts == [("host_accesses", 1)]
        jobs[0].release()
        assert kernel(device(3, 0, jobs[2]), write(addresses)) == []
        for job in jobs:
            job.release()


# --- real daemons, `sanitizerd run`, real client processes ---------------------------------------------------------


def run_example(daemon: RunningDaemon, mode: str, *tools: str) -> tuple[str, list[dict]]:
    result = sanitizerd("run", "--socket", str(daemon.socket), *tools, "--", sys.executable, str(EXAMPLE), mode)
    assert result.returncode == 0, result.stderr + result.stdout
    job = JOB.search(result.stdout).group(1)
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    return result.stdout, json.loads(query.stdout)


CROSS = ("-t", "racecheck", "--check-cross-npu-races=yes")


def test_a_race_between_two_processes_of_a_job(daemon: RunningDaemon) -> None:
    """Each rank's read of its peer's slot races with the peer's write: two reports in msSanitizer's form, each
    naming both devices, then msSanitizer's closing line."""
    out, findings = run_example(daemon, "race", *CROSS)
    publish, gather = marked_line("publish"), marked_line("gather")
    assert len(findings) == 2 and {f["kind"] for f in findings} == {"race_raw"}
    sides = sorted(tuple((a["op"], a["device"], a["location"]["line"]) for a in f["accesses"]) for f in findings)
    assert sides == [(("Write", 0, publish), ("Read", 1, gather)), (("Write", 1, publish), ("Read", 0, gather))]
    assert out.count("====== ERROR: Potential RAW hazard detected at GM in allgather_custom:") == 2
    for writer, reader, slot in ((0, 1, 0), (1, 0, 0x200)):
        address = f"{SHARED + slot:#x}"
        assert re.search(
            rf"======    PIPE_MTE3 Write at RAW\(\)\+{address} in block 0 \(aiv\) on device {writer} at "
            rf"\S*cross_npu\.py:{publish} \(serialNo:\d+\)\n"
            rf"======    PIPE_MTE2 Read at RAW\(\)\+{address} in block 0 \(aiv\) on device {reader} at "
            rf"\S*cross_npu\.py:{gather} \(serialNo:\d+\)\n",
            out,
        ), out
    assert "[sanitizerd] Cross npu racecheck finished. See all detected errors above." in out


ALL_TOOLS = ("-t", "memcheck", "-t", "initcheck", "-t", "synccheck")


def test_the_ordered_job_is_silent(daemon: RunningDaemon) -> None:
    """Silent under every detector, cross-NPU racecheck included."""
    out, findings = run_example(daemon, "ordered", *CROSS, *ALL_TOOLS)
    assert findings == []
    assert "[sanitizerd] Cross npu racecheck finished. No error detected." in out


def test_without_the_option_the_race_is_not_looked_for(daemon: RunningDaemon) -> None:
    """msSanitizer's default: no cross-NPU check, and no closing line for it."""
    out, findings = run_example(daemon, "race", "-t", "racecheck")
    assert findings == [] and "Cross npu racecheck" not in out


def test_a_write_into_a_read_only_region(daemon: RunningDaemon) -> None:
    """msSanitizer's bounds check refuses bytes whose permission lacks the access: an illegal write."""
    out, findings = run_example(daemon, "readonly_write", "-t", "memcheck")
    [finding] = findings
    assert (finding["kind"], finding["address"], finding["size"]) == ("illegal_write", 0x12C300000000, 512)
    assert finding["location"]["line"] == marked_line("overwrite")
    assert "====== ERROR: illegal write of size 512\n======    at 0x12c300000000 on GM in scale_custom\n" in out


def test_reads_of_a_read_only_region_are_silent(daemon: RunningDaemon) -> None:
    assert run_example(daemon, "readonly_clean", *CROSS, *ALL_TOOLS)[1] == []


def one_kernel(client: Client, *batches: np.ndarray) -> m.Verdict:
    k = client.kernel_begin("k", 1)
    for batch in batches:
        client.events(k, batch)
    client.kernel_end(k)
    return client.wait_kernel(k, timeout=30)


def test_permission_of_another_devices_region(daemon: RunningDaemon) -> None:
    """A region of another device that is not shared allows this session nothing; a shared one, what it says."""
    config = m.Config(tools=["memcheck"])
    with Client(daemon.socket, job="other-device", device=0, config=config, resume_buffer=0) as client:
        client.malloc(0x1000, 256)
        client.region_permission(0x1000, 64, device=1)
        client.region_permission(0x1040, 64, device=1, shared=True, write=False)
        assert one_kernel(client, read(0x1000)).errors == 1  # not shared: illegal read
        assert one_kernel(client, read(0x1040)).errors == 0  # shared and readable
        assert one_kernel(client, write(0x1040)).errors == 1  # shared, not writable
        client.region_permission(0x10E0, 32, write=False)
        assert one_kernel(client, write(0x10F0)).errors == 1  # read-only and partly past the buffer: one report
        client.free(0x1000)
        assert one_kernel(client, write(0x1000), read(0x1040)).errors == 2  # freed: out of bounds, not permission
        client.malloc(0x1000, 256)
        assert one_kernel(client, write(0x1000), read(0x1040)).errors == 0  # a new buffer there starts allowed
        client.free(0x1000)


@pytest.fixture
def metered(short_dir: Path) -> tuple[RunningDaemon, int]:
    port = free_port()
    running = start_daemon(short_dir, "--handshake-timeout", "1", "--metrics-addr", f"127.0.0.1:{port}")
    yield running, port
    assert stop_daemon(running) == 0, running.log_text()


def test_regions_past_the_bound_over_the_wire(metered: tuple[RunningDaemon, int]) -> None:
    """A client declaring regions past the session's bound: the rest are refused, counted and said, the session and
    the daemon go on; a malformed region ends only its own session, with the reason."""
    running, port = metered
    with Client(running.socket, job="regions", device=0, config=m.Config(tools=["memcheck"]), resume_buffer=0) as c:
        c.malloc(0x1000, 64 * (m.MAX_REGIONS + 2))
        for i in range(m.MAX_REGIONS + 2):
            c.region_permission(0x1000 + 64 * i, 64, write=False)
        verdict = one_kernel(c, write(0x1000), write(0x1000 + 64 * (m.MAX_REGIONS + 1)))
        assert verdict.errors == 1  # the last region was refused: its write is not judged by it
        c.free(0x1000)
    findings = json.loads(sanitizerd("findings", "--socket", str(running.socket), "--job", "regions",
                                     "--format", "json").stdout)  # fmt: skip
    refused = [f for f in findings if f["kind"] == "internal_error"]
    assert len(refused) == 2 and all("bound of 4096 regions" in f["detail"] for f in refused)
    assert metric(port, "sanitizerd_regions_refused_total") == 2
    for bad in (m.RegionPermission(address=2**64 - 1, size=2), m.RegionPermission(address=0, size=1, flags=8)):
        c = Client(running.socket, job="bad-region", device=0, resume_buffer=0)
        c._send(bad)
        with pytest.raises(ClientError, match="bad_packet"):
            c.close(timeout=10)
    assert_serves_fresh_session(running)


def test_the_metric_has_a_series_for_every_reason() -> None:
    from sanitizerd.metrics import CROSS_NPU_CUT_REASONS

    assert CROSS_NPU_CUT_REASONS == _cross_npu.CUT_REASONS


def test_cross_npu_bounds_over_the_wire_are_counted(metered: tuple[RunningDaemon, int]) -> None:
    """Two native sessions of one job past cross-NPU racecheck's bounds: device 0's kernel sends one access to shared
    memory and one signal more than a job holds, device 1's 1 025 accesses the full job cannot hold and whose
    comparison with the 65 536 held would pass the pair tests' bound. Each kernel's verdict says so, and
    sanitizerd_cross_npu_cut_total counts each by its reason; the daemon serves on."""
    running, port = metered
    held, signals, reads = _cross_npu.MAX_SHARED_ACCESSES, _cross_npu.MAX_SIGNALS, 1025
    assert held * reads > _cross_npu.MAX_PAIR_TESTS >= held * (reads - 1)
    assert metric(port, "sanitizerd_cross_npu_cut_total") == 0
    writes = write(SHARED + 32 * (np.arange(held + 1, dtype=np.uint64) % np.uint64(128)))
    sets = syncs(EventKind.NPU_SIGNAL_SET, Pipe.S_CAL, address=SHARED + 0x8000 + 8 * np.arange(signals + 1,
                 dtype=np.uint64))  # fmt: skip
    with Client(running.socket, job="bounds", device=0, config=CROSS_CONFIG, resume_buffer=0) as writer:
        writer.region_permission(SHARED, 4096, shared=True)
        assert one_kernel(writer, writes, sets).errors >= 1  # the internal_error (and the kernel's own races)
        with Client(running.socket, job="bounds", device=1, config=CROSS_CONFIG, resume_buffer=0) as reader:
            reader.region_permission(SHARED, 4096, shared=True)
            assert one_kernel(reader, read(SHARED + 32 * np.arange(reads, dtype=np.uint64) % np.uint64(4096))).errors
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    counted_by = dict(re.findall(r'^sanitizerd_cross_npu_cut_total\{reason="(\w+)"\} (\S+)$', text, re.M))
    assert {reason: float(n) for reason, n in counted_by.items()} == {
        "job_accesses": 1 + reads, "host_accesses": 0, "pair_tests": held * reads, "signals": 1, "signal_edges": 0,
        "order_tests": 0,
    }  # fmt: skip
    findings = json.loads(sanitizerd("findings", "--socket", str(running.socket), "--job", "bounds",
                                     "--format", "json").stdout)  # fmt: skip
    said = [f["detail"] for f in findings if f["kind"] == "internal_error"]
    assert any("1 accesses of this kernel to shared memory not held" in d and "1 signal sets and waits" in d
               for d in said), said  # fmt: skip
    assert any(f"{reads} accesses of this kernel to shared memory not held and {held * reads} access pairs" in d
               for d in said), said  # fmt: skip
    assert_serves_fresh_session(running)


def test_a_race_through_ipc_memory_between_two_processes(daemon: RunningDaemon, short_dir: Path) -> None:
    """A buffer one process exports and another maps at another address is one memory: the importer's write and
    the exporter's read of the same bytes, unordered, race; each side is printed at its own address."""
    importer = short_dir / "importer.py"
    importer.write_text(
        "import client_shim\n"
        "from client_shim import EventKind, Pipe, Space, accesses\n"
        "c = client_shim.connect(device=1, rank=1)\n"
        "c.ipc_map('kv_cache', 0x22000000)\n"
        "assert c.wait_ipc(1, timeout=30)[0].ok\n"
        "k = c.kernel_begin('writer', 1)\n"
        "c.events(k, accesses(EventKind.WRITE, Space.GM, 0x22000040, 32, pipe=Pipe.MTE3, serial=c.next_serial()))\n"
        "c.kernel_end(k)\n"
        "c.wait_kernel(k, timeout=30)\n"
        "c.ipc_unmap(0x22000000)\n"
        "c.close()\n"
    )
    exporter = short_dir / "exporter.py"
    exporter.write_text(
        "import subprocess, sys\n"
        "import client_shim\n"
        "from client_shim import EventKind, Pipe, Space, accesses\n"
        "c = client_shim.connect(device=0, rank=0)\n"
        "c.malloc(0x11000000, 4096)\n"
        "c.ipc_set('kv_cache', 0x11000000, 4096)\n"
        "assert c.wait_ipc(1, timeout=30)[0].ok\n"
        f"done = subprocess.run([sys.executable, {str(importer)!r}], capture_output=True, text=True)\n"
        "assert done.returncode == 0, done.stderr\n"
        "k = c.kernel_begin('reader', 1)\n"
        "c.events(k, accesses(EventKind.READ, Space.GM, 0x11000050, 32, pipe=Pipe.MTE2, serial=c.next_serial()))\n"
        "c.kernel_end(k)\n"
        "c.wait_kernel(k, timeout=30)\n"
        "c.ipc_destroy('kv_cache')\n"
        "c.free(0x11000000)\n"
        "c.close()\n"
    )
    run = sanitizerd("run", "--socket", str(daemon.socket), *CROSS, "--", sys.executable, str(exporter))
    assert run.returncode == 0, run.stderr + run.stdout
    job = JOB.search(run.stdout).group(1)
    findings = json.loads(
        sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json").stdout
    )
    [race] = findings
    assert race["kind"] in ("race_raw", "race_war") and race["detail"] == CROSS_NPU
    assert sorted((a["device"], a["op"], a["address"]) for a in race["accesses"]) == [
        (0, "Read", 0x11000050), (1, "Write", 0x22000040),
    ]  # fmt: skip
    assert "Cross npu racecheck finished. See all detected errors above." in run.stdout


def test_another_users_job_of_the_same_name_shares_nothing(daemon: RunningDaemon) -> None:
    """Jobs are each uid's own: nobody's session naming root's job, on another device, writing the same shared
    address, races with nothing of root's; root's own second device does."""
    from tests import other_uid

    other_uid.open_socket_to_all(daemon)
    with Client(daemon.socket, job="shared-job", device=0, config=CROSS_CONFIG, resume_buffer=0) as root:
        root.region_permission(SHARED, 4096, shared=True)
        assert one_kernel(root, write(SHARED)).errors == 0
        records = np.ascontiguousarray(write(SHARED, serial=9)).view(np.uint8).data
        theirs = other_uid.frames(
            m.Hello(version=m.PROTOCOL_VERSION, job="shared-job", device=1, config=CROSS_CONFIG),
            m.RegionPermission(address=SHARED, size=4096, flags=7),
            m.KernelBegin(kernel=1, name="intruder", block_dim=1),
            m.Events(kernel=1, records=records),
            m.KernelEnd(kernel=1),
            m.Close(),
        )
        answer = other_uid.as_uid(other_uid.NOBODY, daemon, theirs, expect=3)
        assert [a["type"] for a in answer] == ["welcome", "verdict", "closed"], answer
        assert answer[1]["errors"] == 0
        with Client(daemon.socket, job="shared-job", device=1, config=CROSS_CONFIG, resume_buffer=0) as second:
            second.region_permission(SHARED, 4096, shared=True)
            assert one_kernel(second, write(SHARED, serial=9)).errors == 1  # root's own devices do race
    assert other_uid.view_of(other_uid.NOBODY, daemon)[1] == []


@pytest.mark.parametrize(
    ("flags", "found"), [(m.REGION_WRITE, ["illegal_read", "illegal_read"]), (3, ["illegal_read"])]
)
def test_mssanitizers_region_permission_through_its_socket(daemon: RunningDaemon, flags: int, found: list[str]) -> None:
    """26.1.0's hooks over the job's msSanitizer-form socket: a MEM_REGION_PERMISSION packet that makes the
    buffer write-only turns the kernel's read inside it into an illegal read (beside the read past its end, found
    either way); read and write allowed, only that one."""
    from sanitizerd.compat import wire
    from sanitizerd.control_client import ControlClient
    from tests.test_compat_layouts import BUFFER, BUFFER_SIZE, FREE, INSIDE, MALLOC, PAST, R26_1, UB_DST, client_of
    from tests.test_compat_socket import connect as compat_connect
    from tests.test_compat_socket import recv_exactly, wait_until

    hooks = client_of(R26_1)
    layout = wire.layout_named(R26_1)
    assert layout is not None
    region = {"addr": BUFFER, "size": BUFFER_SIZE, "deviceId": 0, "flags": flags}
    data = (
        hooks.device_summary()
        + hooks.host_op(MALLOC, BUFFER, BUFFER_SIZE)
        + hooks.packet("MEM_REGION_PERMISSION", hooks.put("MemRegionPermissionDesc", region))
        + hooks.kernel_summary()
        + hooks.slot([hooks.dma(UB_DST, INSIDE, 0x10), hooks.dma(UB_DST + 32, PAST, 0x14)])
        + hooks.host_op(FREE, BUFFER)
    )
    job = f"compat-region-{flags}"
    with ControlClient(daemon.socket) as control:
        control.send(m.JobStart(job=job, config=m.Config(tools=["memcheck"])))
        answer = control.request(m.CompatListen(job=job, layout=layout.name))
        assert isinstance(answer, m.CompatListening) and answer.name, answer
        with compat_connect(answer.name, timeout=30) as client:
            recv_exactly(client, layout.config.size)
            client.sendall(data)
            recv_exactly(client, 12)  # the kernel's response: it was checked

        def kinds() -> list[str]:
            query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
            return sorted(f["kind"] for f in json.loads(query.stdout))

        assert wait_until(lambda: kinds() == found), kinds()
