"""The sync producer Session: messages in, detector work and verdicts out, with no event loop (the trio rule)."""

from __future__ import annotations

import numpy as np
import pytest

from client_shim.events import EventKind, Pipe, Space, accesses, syncs
from sanitizerd.chips import chip_named
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.detectors.memcheck import Memcheck
from sanitizerd.findings.model import make_finding
from sanitizerd.protocol import RemoteProtocolError
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.session import Answer, Peer, Session
from sanitizerd.sessions.work import Batch, EndKernel, StartKernel


def session(**config: object) -> Session:
    hello = m.Hello(version=1, pid=1234, job="demo", host="node", device=2, rank=5)
    return Session(9, hello, m.Config(**config), Peer(pid=4321, uid=1000, gid=1000))  # type: ignore[arg-type]


def records(events: np.ndarray) -> memoryview:
    return events.view(np.uint8).data


def batch(kernel: int, events: np.ndarray) -> m.Events:
    return m.Events(kernel=kernel, records=records(events))


def begin(kernel: int = 1, name: str = "add_custom", block_dim: int = 8) -> m.KernelBegin:
    return m.KernelBegin(kernel=kernel, name=name, block_dim=block_dim, kernel_type="aiv")


EVENTS = np.concatenate(
    [
        accesses(EventKind.READ, Space.GM, 0x1000, 32, block_id=[0, 1, 2, 1], serial=[1, 2, 3, 4]),
        syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 0, block_id=1, serial=5),
    ]
)


class TestKernelFlow:
    def test_begin_events_end_make_work(self) -> None:
        """kernel_begin, events and kernel_end become StartKernel, Batch and EndKernel work, in order."""
        s = session()
        [start] = s.handle(begin(1, "add_custom", 8))
        assert start == StartKernel(KernelLaunch(kernel=1, name="add_custom", block_dim=8, kernel_type="aiv"))
        [work] = s.handle(batch(1, EVENTS))
        assert isinstance(work, Batch)
        assert work.events.tobytes() == EVENTS.tobytes()
        assert s.handle(batch(1, EVENTS[:2])) != []
        assert s.handle(m.KernelEnd(kernel=1)) == [EndKernel(1)]
        assert s.events == EVENTS.size + 2
        assert s.kernels_seen == 1

    def test_empty_batch_makes_no_work(self) -> None:
        """An events message with no records is accepted and hands detectors nothing."""
        s = session()
        s.handle(begin())
        assert s.handle(batch(1, EVENTS[:0])) == []

    def test_display_name_drops_mix_suffix(self) -> None:
        """The launch carries msSanitizer's display name: _mix_aiv/_mix_aic removed, unknown if empty."""
        s = session()
        [start] = s.handle(begin(1, "matmul_mix_aic"))
        assert isinstance(start, StartKernel) and start.launch.name == "matmul"
        s.handle(m.KernelEnd(kernel=1))
        [start] = s.handle(begin(2, ""))
        assert isinstance(start, StartKernel) and start.launch.name == "unknown"

    def test_host_ops_pass_through(self) -> None:
        """A host operation is handed to the detectors as is, inside or outside a kernel."""
        s = session()
        op = m.HostOp(op="malloc", address=0x1000, size=64)
        assert s.handle(op) == [op]
        s.handle(begin())
        assert s.handle(op) == [op]

    def test_locations_extend_the_table(self) -> None:
        """Locations are stored in the session context for detectors to resolve."""
        s = session()
        loc = m.Location(id=3, file="add_custom.cpp", line=18)
        assert s.handle(m.Locations(locations=[loc])) == []
        assert s.context.locations[3] == loc
        assert s.context.stack(3)[0].file == "add_custom.cpp"


class TestReferences:
    def test_events_for_unknown_kernel(self) -> None:
        """events naming a kernel that never began is bad_reference."""
        s = session()
        with pytest.raises(RemoteProtocolError) as info:
            s.handle(batch(5, EVENTS))
        assert info.value.reason == "bad_reference"

    def test_events_for_other_kernel_than_the_running_one(self) -> None:
        """events naming another kernel than the running one is bad_reference."""
        s = session()
        s.handle(begin(1))
        with pytest.raises(RemoteProtocolError) as info:
            s.handle(batch(2, EVENTS))
        assert info.value.reason == "bad_reference"

    def test_events_for_finished_kernel(self) -> None:
        """events after that kernel's kernel_end is bad_reference."""
        s = session()
        s.handle(begin(1))
        s.handle(m.KernelEnd(kernel=1))
        with pytest.raises(RemoteProtocolError) as info:
            s.handle(batch(1, EVENTS))
        assert info.value.reason == "bad_reference"

    def test_kernel_end_for_unknown_kernel(self) -> None:
        """kernel_end naming no running kernel is bad_reference."""
        with pytest.raises(RemoteProtocolError) as info:
            session().handle(m.KernelEnd(kernel=3))
        assert info.value.reason == "bad_reference"

    def test_second_kernel_begin_while_running(self) -> None:
        """kernel_begin while another launch is still running is refused."""
        s = session()
        s.handle(begin(1))
        with pytest.raises(RemoteProtocolError) as info:
            s.handle(begin(2))
        assert info.value.reason == "unexpected_message"

    def test_next_kernel_after_end(self) -> None:
        """After kernel_end a new launch may begin."""
        s = session()
        s.handle(begin(1))
        s.handle(m.KernelEnd(kernel=1))
        assert isinstance(s.handle(begin(2))[0], StartKernel)


class TestFilters:
    def test_kernel_name_filter_skips_other_kernels(self) -> None:
        """A kernel whose name lacks config.kernel_name gets no work and a verdict with checked=False at once."""
        s = session(kernel_name="add")
        assert s.handle(begin(1, "mul_custom")) == []
        assert s.handle(batch(1, EVENTS)) == []
        [answer] = s.handle(m.KernelEnd(kernel=1))
        assert isinstance(answer, Answer)
        assert answer.verdict == m.Verdict(kernel=1, events=EVENTS.size, errors=0, warnings=0, checked=False)
        assert (answer.report.name, answer.report.tools, answer.report.checked) == ("mul_custom", [], False)
        assert s.events == EVENTS.size

    def test_kernel_name_filter_keeps_matching_kernels(self) -> None:
        """A kernel whose name contains config.kernel_name is checked."""
        s = session(kernel_name="add")
        assert isinstance(s.handle(begin(1, "my_add_custom"))[0], StartKernel)
        assert s.handle(m.KernelEnd(kernel=1)) == [EndKernel(1)]

    def test_block_id_filter(self) -> None:
        """With config.block_id only that block's events reach the detectors; all are still counted."""
        s = session(block_id=1)
        s.handle(begin())
        [work] = s.handle(batch(1, EVENTS))
        assert isinstance(work, Batch)
        assert work.events["serial"].tolist() == [2, 4, 5]
        assert s.events == EVENTS.size

    def test_no_block_filter_by_default(self) -> None:
        """With block_id -1 every event reaches the detectors."""
        s = session()
        s.handle(begin())
        [work] = s.handle(batch(1, EVENTS))
        assert isinstance(work, Batch) and work.events.size == EVENTS.size


class TestVerdicts:
    def test_verdict_after_every_detector(self) -> None:
        """kernel_checked answers None until the last detector reported, then a verdict with all counts."""
        s = session()
        s.detectors.append(Memcheck(s.context))  # a second real detector
        assert len(s.detectors) == 2
        s.handle(begin(4))
        s.handle(batch(4, EVENTS))
        assert s.handle(m.KernelEnd(kernel=4)) == [EndKernel(4)]
        error = make_finding("illegal_read")
        warning = make_finding("out_of_bounds")
        assert s.kernel_checked(4, [error, error]) is None
        answer = s.kernel_checked(4, [warning])
        assert answer is not None
        assert answer.verdict == m.Verdict(kernel=4, events=EVENTS.size, errors=2, warnings=1, checked=True)
        assert answer.report == m.KernelChecked(
            session=s.id,
            kernel=4,
            name="add_custom",
            tools=["memcheck", "memcheck"],
            events=EVENTS.size,
            errors=2,
            warnings=1,
        )

    def test_verdict_with_one_detector(self) -> None:
        """With a single detector its report gives the verdict straight away."""
        s = session()
        s.handle(begin(1))
        s.handle(m.KernelEnd(kernel=1))
        answer = s.kernel_checked(1, [])
        assert answer is not None and answer.verdict == m.Verdict(kernel=1, events=0, errors=0, warnings=0)

    def test_no_detectors_answers_at_once(self) -> None:
        """A session with no implemented detector answers each kernel_end with a verdict directly."""
        s = session(tools=[])
        assert s.handle(begin(1)) == [StartKernel(KernelLaunch(1, "add_custom", 8, "aiv"))]
        s.handle(batch(1, EVENTS))
        [answer] = s.handle(m.KernelEnd(kernel=1))
        assert isinstance(answer, Answer)
        assert answer.verdict == m.Verdict(kernel=1, events=EVENTS.size, errors=0, warnings=0, checked=True)

    def test_count_feeds_session_info(self) -> None:
        """Counted findings and handled events show in the session's info."""
        s = session()
        s.handle(begin())
        s.handle(batch(1, EVENTS))
        s.handle(m.KernelEnd(kernel=1))
        s.count([make_finding("illegal_read"), make_finding("memory_leak"), make_finding("unused_memory")])
        info = s.info()
        assert (info.session, info.job, info.pid, info.uid, info.host, info.rank) == (9, "demo", 1234, 1000, "node", 5)
        assert (info.kernels, info.events, info.findings, info.state) == (1, EVENTS.size, 3, "live")


class TestDevice:
    def test_device_summary_sets_chip_and_device(self) -> None:
        """A device summary selects the chip (any spelling) and the device index."""
        s = session()
        assert s.handle(m.DeviceSummary(chip="Ascend310P", device=6)) == []
        assert s.context.chip == chip_named("310P")
        assert s.context.device == 6

    def test_device_summary_without_device_keeps_hello_device(self) -> None:
        """device -1 in the summary leaves the device from hello."""
        s = session()
        s.handle(m.DeviceSummary(chip="910B3"))
        assert s.context.device == 2
        assert s.context.chip.name == "910B3"

    def test_bad_chip_name(self) -> None:
        """An unknown chip name is bad_packet."""
        with pytest.raises(RemoteProtocolError) as info:
            session().handle(m.DeviceSummary(chip="Ascend1234X"))
        assert info.value.reason == "bad_packet"

    def test_chip_drives_detector_limits(self) -> None:
        """After the device summary, memcheck checks on-chip bounds against the named chip."""
        s = session()
        s.handle(m.DeviceSummary(chip="310P"))
        detector = s.detectors[0]
        assert isinstance(detector, Memcheck)
        s.handle(begin())
        [work] = s.handle(batch(1, accesses(EventKind.READ, Space.UB, 200 * 1024, 32)))
        assert isinstance(work, Batch)
        detector.kernel_begin(KernelLaunch(1, "add_custom", 8, "aiv"))
        detector.check(work.events)
        assert detector.kernel_end() == []
