"""The sync producer Session: messages in, detector work and verdicts out, with no event loop (the trio rule)."""

from __future__ import annotations

import resource
from collections.abc import Callable

import anyio
import anyio.abc
import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_shim.events import EventKind, Pipe, Space, accesses, syncs
from sanitizerd import fds
from sanitizerd.chips import chip_named
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.detectors.memcheck import Memcheck
from sanitizerd.server.admission import Connections
from sanitizerd.sessions import transport
from sanitizerd.sessions.hub import Limits
from sanitizerd.sessions.session import Answer, LogGate, Peer, Session
from sanitizerd.sessions.transport import MessageStream, UnfinishedBytes
from sanitizerd.sessions.work import BATCH_PIECES, WIDE_ACCESS_PIECES, Batch, EndKernel, StartKernel, split_by_pieces
from sanitizerd_protocol import Connection, RemoteProtocolError, Role
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import make_finding


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
        """A session with no implemented detector answers each kernel_end with a verdict directly; its batches are
        counted and make no work (nothing is cut into detectors' batches that nobody checks)."""
        s = session(tools=[])
        assert s.handle(begin(1)) == [StartKernel(KernelLaunch(1, "add_custom", 8, "aiv"))]
        assert s.handle(batch(1, EVENTS)) == []
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


# --- hostile input and the bounds of issue 10 ---------------------------------------------------------------


class TestHostileSession:
    def test_kernel_id_reused_while_still_checked(self) -> None:
        """A launch id reused after its kernel_end but before its verdict is bad_reference (it used to corrupt the
        pending count and raise KeyError inside the pump)."""
        s = session()
        s.handle(begin(1))
        assert s.handle(m.KernelEnd(kernel=1)) == [EndKernel(1)]
        with pytest.raises(RemoteProtocolError, match="still being checked") as info:
            s.handle(begin(1))
        assert info.value.reason == "bad_reference"
        assert s.kernel_checked(1, []) is not None  # the first launch still gets its verdict

    def test_kernel_id_reused_after_its_verdict_is_accepted(self) -> None:
        s = session()
        s.handle(begin(1))
        s.handle(m.KernelEnd(kernel=1))
        assert s.kernel_checked(1, []) is not None
        assert s.handle(begin(1)) != []

    def test_source_locations_are_bounded(self) -> None:
        """Past MAX_LOCATION_BYTES the session is refused as resource_limit and keeps none of that message; the same
        ids sent again replace, not add."""
        s = session()
        loc = m.Location(id=1, file="f" * 4000, function="g" * 4000)
        s.handle(m.Locations(locations=[loc]))
        for _ in range(100):
            s.handle(m.Locations(locations=[loc]))  # the same id again: replaced, not added
        assert s.location_bytes < 10_000
        many = [m.Location(id=i, file="f" * 4000, function="g" * 4000) for i in range(2, 10_000)]
        with pytest.raises(RemoteProtocolError) as info:
            s.handle(m.Locations(locations=many))
        assert info.value.reason == "resource_limit"
        assert list(s.context.locations) == [1]

    def test_live_allocations_are_bounded(self) -> None:
        """Past its bound of live allocations a malloc ends the session (resource_limit); a free makes room, a
        double malloc at one address counts once, and each source's table is counted apart."""
        s = Session(9, m.Hello(version=1, job="j"), m.Config(), Peer(), max_live_allocations=4)
        for address in (0x1000, 0x2000, 0x3000):
            s.handle(m.HostOp(op="malloc", address=address, size=16))
        s.handle(m.HostOp(op="malloc", address=0x1000, size=16))  # the same allocation again: msSanitizer ignores it
        s.handle(m.HostOp(op="malloc", address=0x1000, size=16, source="extra"))  # an annotation: its own table
        s.handle(m.HostOp(op="free", address=0x2000))
        s.handle(m.HostOp(op="store", address=0x1000, size=8))  # not an allocation
        s.handle(m.HostOp(op="malloc", address=0x4000, size=16))
        with pytest.raises(RemoteProtocolError) as info:
            s.handle(m.HostOp(op="malloc", address=0x5000, size=16))
        assert info.value.reason == "resource_limit" and "4 live allocations" in str(info.value)
        assert (("device", 0x5000)) not in s.live_allocations

    def test_client_log_gate(self) -> None:
        """A burst passes, then the rate; the lines dropped in between are told with the next one let through."""
        gate = LogGate(rate=10.0, burst=3)
        assert [gate.admit(0.0) for _ in range(5)] == [0, 0, 0, None, None]
        assert gate.admit(0.05) is None  # half a token
        assert gate.admit(0.2) == 3  # refilled: the three dropped are told
        assert gate.dropped == 0


_INTS = st.one_of(
    st.sampled_from([0, 1, -1, 7, 2**31, 2**63 - 1, -(2**63), 2**64 - 1]), st.integers(-(2**63), 2**64 - 1)
)
_KERNELS = st.sampled_from([0, 1, 2, 2**64 - 1])
_TEXT = st.text(max_size=20)
_HOSTILE_MESSAGES = st.one_of(
    st.builds(m.KernelBegin, kernel=_KERNELS, name=_TEXT, block_dim=_INTS, pc_start=_INTS),
    st.builds(
        m.Events,
        kernel=_KERNELS,
        records=st.integers(0, 3).flatmap(lambda n: st.binary(min_size=56 * n, max_size=56 * n)).map(memoryview),
    ),
    st.builds(
        m.KernelEnd,
        kernel=_KERNELS,
        lost=st.lists(st.builds(m.BlockLoss, block_type=_INTS, block_id=_INTS, records=_INTS), max_size=2),
    ),
    st.builds(m.HostOp, op=st.sampled_from(m.HOST_OPS), address=_INTS, size=_INTS, src=_INTS, serial=_INTS),
    st.builds(m.Ipc, op=st.sampled_from(["set", "map", "unmap", "destroy"]), name=_TEXT, address=_INTS, size=_INTS),
    st.builds(
        m.Locations,
        locations=st.lists(
            st.builds(m.Location, id=_INTS, file=_TEXT, line=_INTS, callers=st.lists(_INTS, max_size=3)), max_size=3
        ),
    ),
    st.builds(m.DeviceSummary, chip=st.sampled_from(["", "nonsense", "Ascend910B1"]), block_num=_INTS, device=_INTS),
    st.builds(m.Signature, step=_INTS, local_step=_INTS, replay=_INTS, rank=_INTS, replicas=_INTS),
    st.builds(m.Log, text=_TEXT),
    st.just("detectors report"),  # the detectors finish the oldest kernel still being checked
)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(_HOSTILE_MESSAGES, max_size=12))
def test_no_message_sequence_raises_but_a_protocol_error(messages: list[m.Message | str]) -> None:
    """Whatever valid-typed messages a producer sends, in whatever order and with whatever numbers, the session
    either handles them or raises RemoteProtocolError: never another exception inside the pump."""
    s = session(tools=["memcheck", "racecheck"])
    pending: list[int] = []
    for message in messages:
        if isinstance(message, str):
            if pending:
                kernel = pending.pop(0)
                for _ in s.detectors:
                    s.kernel_checked(kernel, [])
            continue
        try:
            work = s.handle(message)
        except RemoteProtocolError:
            return  # the connection ends here
        pending.extend(item.kernel for item in work if isinstance(item, EndKernel))


class TestConnectionBounds:
    def test_unfinished_bytes_budget_per_uid(self) -> None:
        """A uid's connections share one budget; another uid's are not charged; released bytes free it."""
        budget = UnfinishedBytes(lambda: 100)
        budget.charge(1000, 60)
        budget.charge(2000, 90)  # another uid: its own budget
        with pytest.raises(RemoteProtocolError) as info:
            budget.charge(1000, 41)
        assert info.value.reason == "buffer_limit" and "uid 1000" in str(info.value)
        budget.charge(1000, -101)
        budget.charge(1000, 100)  # exactly the budget is allowed
        assert budget.by_uid == {1000: 100, 2000: 90} and budget.total == 190

    def test_connections_admitted_per_uid_and_in_all(self) -> None:
        limits = Limits(max_connections=3, max_connections_per_uid=2)
        connections = Connections()
        assert connections.admit(1, limits) is None
        assert connections.admit(1, limits) is None
        assert "uid 1" in str(connections.admit(1, limits))
        assert connections.admit(2, limits) is None
        assert "3 open connections" in str(connections.admit(3, limits))
        connections.release(1)
        assert connections.admit(3, limits) is None
        assert (connections.total, connections.by_uid) == (3, {1: 1, 2: 1, 3: 1})

    def test_limits_fit_the_fd_limit(self) -> None:
        """Under a soft limit of 1 024 the connection and session limits are lowered, each saying why; under a large
        one they stand."""
        fitted, notes = fds.fit(Limits(), 1024)
        assert fitted.max_connections == 1024 - fds.FD_RESERVE
        assert fitted.max_sessions == fitted.max_connections - fds.CONTROL_HEADROOM
        assert fitted.max_connections_per_uid <= fitted.max_connections
        assert len(notes) == 2 and "LimitNOFILE" in notes[0]
        assert fds.fit(Limits(), 65536) == (Limits(), [])

    def test_raise_nofile_reaches_the_hard_limit(self) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
            assert fds.raise_nofile() == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] in (hard, 1 << 20)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class _SilentPeer(anyio.abc.ByteStream):
    """A peer that never sends anything."""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.sleep_forever()
        raise AssertionError

    async def send(self, item: bytes) -> None:
        pass

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class TestIdleClock:
    def test_the_idle_clock_stops_while_a_verdict_is_owed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A silent producer is idle only while the daemon owes it nothing: waiting for a long check's verdict it
        is kept however long that takes; once nothing is owed it is ended after the idle timeout."""
        monkeypatch.setattr(transport, "IDLE_RECHECK", 0.05)
        owed = [True]

        async def scenario() -> float:
            stream = MessageStream(_SilentPeer(), Connection(Role.SERVER))
            stream.idle_timeout = 0.3
            stream.owes_reply = lambda: owed[0]
            with anyio.move_on_after(1.0) as waiting:
                await stream.receive()
            assert waiting.cancelled_caught  # three idle timeouts passed, and it was still waiting
            owed[0] = False
            started = anyio.current_time()
            with pytest.raises(RemoteProtocolError) as info:
                await stream.receive()
            assert info.value.reason == "idle_timeout"
            return anyio.current_time() - started

        assert 0.25 < anyio.run(scenario) < 1.0


class _SlowPeer(_SilentPeer):
    """A peer whose first send waits until ``go`` is set: whoever sends first holds the stream's send lock."""

    def __init__(self) -> None:
        self.go = anyio.Event()
        self.sent: list[bytes] = []

    async def send(self, item: bytes) -> None:
        await self.go.wait()
        self.sent.append(bytes(item))


def _welcomed_stream(peer: anyio.abc.ByteStream) -> MessageStream:
    connection = Connection(Role.SERVER)
    connection.receive_data(Connection(Role.CLIENT).send(m.Hello(version=m.PROTOCOL_VERSION)))
    assert isinstance(connection.next_event(), m.Hello)
    connection.send(m.Welcome(session=1, config=m.Config(), server="test"))
    return MessageStream(peer, connection)


class TestSendAfterTheEnd:
    def test_a_verdict_waiting_for_the_send_lock_when_the_session_is_refused_is_not_sent(self) -> None:
        """A detector's verdict queued behind another send while the pump refuses the session: the verdict's send
        says the connection has ended (ClosedResourceError, which the verdict's sender expects), never a local
        protocol error from framing a verdict in state error; the peer gets the first frame and the error."""

        async def scenario() -> tuple[list[str], type[BaseException] | None]:
            peer = _SlowPeer()
            stream = _welcomed_stream(peer)
            failed: list[type[BaseException]] = []

            async def verdict() -> None:
                try:
                    await stream.send(m.Verdict(kernel=1, events=0, errors=0, warnings=0))
                except Exception as exc:
                    failed.append(type(exc))

            async with anyio.create_task_group() as tg:
                first = m.IpcResult(op="set", name="a", address=0, ok=True)
                tg.start_soon(stream.send, first)  # holds the send lock until go
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(verdict)  # waits for the lock
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(stream.send_error, "bad_packet", "refused")  # ends the connection, then waits too
                await anyio.wait_all_tasks_blocked()
                peer.go.set()
            kinds = [msgspec.msgpack.decode(frame[4:])["type"] for frame in peer.sent]
            return kinds, failed[0] if failed else None

        kinds, failure = anyio.run(scenario)
        assert failure is anyio.ClosedResourceError
        assert kinds == ["ipc_result", "error"]

    def test_sending_after_closed_says_the_connection_has_ended(self) -> None:
        async def scenario() -> None:
            stream = _welcomed_stream(_SilentPeer())
            await stream.send(m.Closed(session=1))
            with pytest.raises(anyio.ClosedResourceError):
                await stream.send(m.Verdict(kernel=1, events=0, errors=0, warnings=0))

        anyio.run(scenario)


class TestDetectorGuard:
    def test_a_failure_to_answer_is_the_sessions_not_a_detector_failure(self) -> None:
        """When answering a kernel fails (a bug of the session layer), the failure reaches the session's owner
        once: it is not taken for the detector's, counted as such and answered a second time."""
        from sanitizerd.sessions.pipeline import drive_detector
        from sanitizerd.sessions.threads import DetectorThreads
        from tests.detector_helpers import make_detector

        detector = make_detector("memcheck")
        answered: list[int] = []
        failures: list[str] = []

        async def kernel_done(kernel: int, findings: list[object], cut: bool) -> None:
            answered.append(kernel)
            raise RuntimeError("the session could not answer")

        async def publish(findings: list[object]) -> None:
            pass

        async def scenario() -> None:
            send, receive = anyio.create_memory_object_stream[object](4)
            launch = KernelLaunch(kernel=3, name="k", block_dim=1, kernel_type="aiv")
            async with send:
                await send.send(StartKernel(launch))
                await send.send(EndKernel(3))
            await drive_detector(
                detector, detector.context, receive,  # type: ignore[arg-type]
                publish=publish, kernel_done=kernel_done, threads=DetectorThreads(1).runner(0, 1),  # type: ignore[arg-type]
                on_checked=lambda name, n: None, on_failure=failures.append,
            )  # fmt: skip

        with pytest.raises(RuntimeError, match="could not answer"):
            anyio.run(scenario)
        assert answered == [3] and failures == []


class TestBatchSplit:
    """A client's batch of many pieces is checked as several, in order, each within BATCH_PIECES (an upper
    bound): the fair share of detector threads and the kernel's CPU budget act between them."""

    def test_a_batch_of_many_scattered_pieces_is_split_in_order(self) -> None:
        events = accesses(
            EventKind.READ, Space.GM, np.arange(65_536, dtype=np.uint64) * 64, 2, block_num=8, block_stride=3,
            repeat=255, repeat_stride=7,
        )  # fmt: skip
        parts = split_by_pieces(events)
        assert len(parts) == -(-65_536 * 8 * 255 // BATCH_PIECES)
        assert all(part.size * 8 * 255 <= BATCH_PIECES for part in parts)
        assert np.concatenate(parts).tobytes() == events.tobytes()  # every event once, in order

    def test_a_common_batch_is_one_and_wide_accesses_are_grouped(self) -> None:
        common = accesses(EventKind.READ, Space.GM, np.arange(65_536, dtype=np.uint64) * 256, 32, block_num=8)
        (only,) = split_by_pieces(common)
        assert only is common
        wide = accesses(
            EventKind.WRITE, Space.GM, np.arange(1_000, dtype=np.uint64) << 32, 1, block_num=65_535, block_stride=2,
            repeat=65_535, repeat_stride=1,
        )  # fmt: skip
        parts = split_by_pieces(wide)
        assert [p.size for p in parts[:-1]] == [BATCH_PIECES // WIDE_ACCESS_PIECES] * (len(parts) - 1)
        assert sum(p.size for p in parts) == 1_000

    @pytest.mark.parametrize(("kind", "memcheck_parts"), [(EventKind.READ, 1), (EventKind.WRITE, 3)])
    def test_each_detector_is_given_a_batch_cut_by_the_pieces_it_walks(
        self, kind: EventKind, memcheck_parts: int
    ) -> None:
        """One client batch of 2**21 + 2**20 GM pieces, through each detector's pipeline: initcheck, which walks
        every piece, checks it in three parts within BATCH_PIECES; memcheck, which walks only its GM writes'
        pieces and counts them itself, checks a batch of reads whole and refuses one of writes, which it then
        checks in the same three parts; every event once, in order."""
        from sanitizerd.sessions.pipeline import drive_detector
        from sanitizerd.sessions.threads import DetectorThreads
        from tests.detector_helpers import make_detector

        events = accesses(
            kind, Space.GM, 0x1000 + np.arange(6_144, dtype=np.uint64) * 4096, 8, block_num=8, block_stride=2,
            repeat=64, repeat_stride=16,
        )  # fmt: skip
        events["serial"] = np.arange(1, events.size + 1)
        batch = Batch(events)  # the session's one Batch, as each detector's pipeline receives it
        for name, expected in (("initcheck", 3), ("memcheck", memcheck_parts)):
            detector = make_detector(name)
            checked: list[np.ndarray] = []
            # the method the pipeline calls: check_within_bound where the detector counts its pieces (memcheck)
            method = "check_within_bound" if getattr(detector, "counts_pieces", False) else "check"
            original = getattr(detector, method)

            def counted(part: np.ndarray, original: Callable[[np.ndarray], None] = original,
                        checked: list[np.ndarray] = checked) -> None:
                original(part)  # a batch refused as too wide (BatchTooWide) is not counted
                checked.append(part)

            setattr(detector, method, counted)

            async def scenario(detector: object = detector) -> None:
                async def kernel_done(kernel: int, findings: list[object], cut: bool) -> None:
                    pass

                async def publish(findings: list[object]) -> None:
                    pass

                send, receive = anyio.create_memory_object_stream[object](4)
                async with send:
                    await send.send(m.HostOp(op="malloc", address=0x1000, size=6_144 * 4096))
                    await send.send(StartKernel(KernelLaunch(kernel=1, name="k", block_dim=1, kernel_type="aiv")))
                    await send.send(batch)
                    await send.send(EndKernel(1))
                await drive_detector(
                    detector, detector.context, receive,  # type: ignore[arg-type, attr-defined]
                    publish=publish, kernel_done=kernel_done, threads=DetectorThreads(1).runner(0, 1),  # type: ignore[arg-type]
                    on_checked=lambda name, n: None, on_failure=lambda name: None,
                )  # fmt: skip

            anyio.run(scenario)
            assert len(checked) == expected, (name, [part.size for part in checked])
            assert np.array_equal(np.concatenate(checked)["serial"], events["serial"]), name
            assert all(part.size * 8 * 64 <= BATCH_PIECES for part in checked) or expected == 1, name

    def test_a_batch_refused_that_cannot_be_cut_is_a_detector_failure_not_a_loop(self) -> None:
        """A detector that counts its own pieces refuses a batch the cut leaves whole (its count and the cut
        disagree): the pipeline reports the detector's failure on it and goes on, rather than asking again."""
        from sanitizerd.detectors.base import BatchTooWide
        from sanitizerd.sessions.pipeline import drive_detector
        from sanitizerd.sessions.threads import DetectorThreads
        from tests.detector_helpers import make_detector

        memcheck = make_detector("memcheck")
        asked: list[int] = []

        def refuse(events: np.ndarray) -> None:
            asked.append(events.size)
            raise BatchTooWide

        memcheck.check_within_bound = refuse  # type: ignore[attr-defined]
        failures: list[str] = []
        done: list[list[object]] = []

        async def scenario() -> None:
            async def kernel_done(kernel: int, findings: list[object], cut: bool) -> None:
                done.append(findings)

            async def publish(findings: list[object]) -> None:
                done.append(findings)

            send, receive = anyio.create_memory_object_stream[object](4)
            async with send:
                await send.send(StartKernel(KernelLaunch(kernel=1, name="k", block_dim=1, kernel_type="aiv")))
                await send.send(Batch(accesses(EventKind.WRITE, Space.GM, 0x1000, 32)))
                await send.send(EndKernel(1))
            await drive_detector(
                memcheck, memcheck.context, receive,  # type: ignore[arg-type, attr-defined]
                publish=publish, kernel_done=kernel_done, threads=DetectorThreads(1).runner(0, 1),  # type: ignore[arg-type]
                on_checked=lambda name, n: None, on_failure=failures.append,
            )  # fmt: skip

        anyio.run(scenario)
        assert asked == [1] and failures == ["memcheck"]
        assert any("memcheck failed on Batch: BatchTooWide()" in str(f.detail) for f in done[0]), done  # type: ignore[attr-defined]
