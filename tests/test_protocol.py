"""The sans-I/O wire protocol: framing, message round-trips, the state machine and every error reason.

Shaped after h11's tests: a ``ConnectionPair`` joins a client and a server ``Connection`` through a fake
network, ``feed_three_ways`` feeds a frame whole, byte by byte and with trailing data, and a fuzz test holds
the receiver to "parse it or raise RemoteProtocolError, never anything else".
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_shim.events import BlockType, EventKind, Pipe, Space, accesses, syncs
from sanitizerd_protocol import (
    CONNECTION_CLOSED,
    EVENT_DTYPE,
    NEED_DATA,
    PROTOCOL_VERSION,
    REASONS,
    Connection,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    Role,
    State,
    as_events,
)
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import Finding, Frame
from sanitizerd_protocol.texts import CUT_MARK, MAX_CALLERS, MAX_LOG_TEXT, MAX_NAME, cut


def frame(body: bytes) -> bytes:
    """A frame: the u32 little-endian body length, then the body."""
    return struct.pack("<I", len(body)) + body


def raw_frame(obj: object) -> bytes:
    """A frame around any msgpack object, bypassing the sending Connection's checks."""
    return frame(msgspec.msgpack.encode(obj))


def sample_events() -> np.ndarray:
    """Memory and sync events mixed, with every field away from its default somewhere."""
    memory = accesses(
        EventKind.WRITE,
        Space.UB,
        [0x100, 0x2000, 0xFFFF_FFFF_FFFF],
        32,
        block_num=8,
        repeat=[2, 3, 4],
        repeat_stride=8,
        pipe=Pipe.V,
        block_id=[0, 1, 7],
        block_type=BlockType.AIC,
        serial=[7, 8, 2**64 - 1],
        pc=0x77C,
        location=3,
        atomic=True,
        align=64,
    )
    sync = syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 5, serial=9, mode=1)
    return np.concatenate([memory, sync])


def records_of(events: np.ndarray) -> memoryview:
    return events.view(np.uint8).data


class ConnectionPair:
    """A client and a server Connection joined by a fake network: what one sends, the other receives."""

    def __init__(self) -> None:
        self.client = Connection(Role.CLIENT)
        self.server = Connection(Role.SERVER)

    def other(self, sender: Connection) -> Connection:
        return self.server if sender is self.client else self.client

    def send(self, sender: Connection, message: m.Message) -> list[m.Message]:
        """Send ``message``, deliver its bytes, and return every message the peer parsed (checked equal)."""
        receiver = self.other(sender)
        receiver.receive_data(sender.send(message))
        received = [receiver.next_event()]
        if receiver.state is not State.ERROR:  # after an error nothing more is parsed
            assert receiver.next_event() is NEED_DATA
        assert received == [message]
        return received

    def handshake(self, role: str = "producer") -> None:
        self.send(self.client, m.Hello(version=PROTOCOL_VERSION, role=role, pid=42))  # type: ignore[arg-type]
        self.send(self.server, m.Welcome(session=1, config=m.Config()))
        assert self.client.state is State.READY
        assert self.server.state is State.READY


def ready_pair(role: str = "producer") -> ConnectionPair:
    pair = ConnectionPair()
    pair.handshake(role)
    return pair


def drain(conn: Connection) -> list[object]:
    """Every message the connection can parse now, up to NEED_DATA or CONNECTION_CLOSED (included)."""
    out: list[object] = []
    while True:
        event = conn.next_event()
        out.append(event)
        if event is NEED_DATA or event is CONNECTION_CLOSED:
            return out


def remote_error(conn: Connection, data: bytes, *, eof: bool = False) -> RemoteProtocolError:
    conn.receive_data(data)
    if eof:
        conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError) as info:
        drain(conn)
    assert conn.state is State.ERROR
    return info.value


# --- every message type, in the state where it may travel ---------------------------------------------------

FINDING = Finding(
    kind="illegal_read",
    severity="error",
    job="demo",
    session=3,
    pid=1234,
    device=1,
    kernel="add_custom",
    blocks={"aiv": [0, 1, 3], "aic": [2]},
    space="UB",
    address=0x12C0C0015000,
    size=224,
    serial=10,
    pc=0x77C,
    location=Frame(file="add_custom.cpp", line=18, column=5, function="add_custom"),
    stack=[Frame(file="add_custom.cpp", line=18, column=5), Frame(file="impl.h", line=58, column=9)],
    detail="detail",
    count=4,
    id=17,
    time=1234.5,
)
CONFIG = m.Config(
    tools=["memcheck", "racecheck"],
    leak_check=True,
    check_unused_memory=True,
    block_id=3,
    kernel_name="add",
    cache_size=7,
    log_level="info",
)

# (sender, role of the client, message); the sender is "client" or "server".
HANDSHAKE_MESSAGES: list[tuple[str, str, m.Message]] = [
    (
        "client",
        "producer",
        m.Hello(
            version=1,
            role="producer",
            pid=1234,
            host="node7",
            tool="mssanitizer",
            job="demo",
            rank=3,
            local_rank=1,
            world_size=8,
            device=2,
            config=CONFIG,
        ),
    ),
    ("client", "control", m.Hello(version=1, role="control", pid=9)),
]
PRODUCER_MESSAGES: list[tuple[str, m.Message]] = [
    ("client", m.DeviceSummary(chip="Ascend910B1", block_num=24, device=0)),
    (
        "client",
        m.Signature(
            step=3,
            local_step=1,
            replay=1,
            rank=2,
            phase="post_all_reduce",
            replica_group="dp",
            replicas=4,
            entries=[
                m.SignatureEntry(name="gradient:0:weight", schema="((4,), 'torch.float32', 'cpu')", digest=2**64 - 1)
            ],
        ),
    ),
    (
        "client",
        m.Locations(
            locations=[
                m.Location(id=1, file="a.cpp", line=4, column=2, function="f", callers=[2, 3]),
                m.Location(id=2, file="b.cpp"),
            ]
        ),
    ),
    ("client", m.KernelBegin(kernel=1, name="add_custom", block_dim=8, kernel_type="mix", pc_start=0x1000)),
    ("client", m.Events(kernel=1, records=records_of(sample_events()))),
    ("client", m.Events(kernel=1, records=memoryview(b""))),
    ("client", m.KernelEnd(kernel=1)),
    (
        "client",
        m.HostOp(
            op="memcpy",
            address=0x12C040000000,
            size=4096,
            src=0x12C040001000,
            source="hal",
            desc="weights",
            serial=37,
            location=1,
            module=5,
        ),
    ),
    ("client", m.HostOp(op="malloc", address=2**64 - 1)),
    ("client", m.GuardWrite(user_address=2**64 - 1, user_size=2**32 - 1, out_address=0x1040, out_size=32)),
    ("client", m.Ipc(op="set", name="kv_cache", address=0x1000, size=4096, serial=3, location=1)),
    ("client", m.RegionPermission(address=0x1000, size=4096, device=1, flags=m.REGION_READ | m.REGION_SHARED)),
    ("server", m.IpcResult(op="map", name="kv_cache", address=0x5000, ok=False, reason="no export")),
    ("client", m.Log(text="héllo ✓", level="warn")),
    ("server", m.Verdict(kernel=1, events=9, errors=2, warnings=1, checked=False)),
]
CONTROL_MESSAGES: list[tuple[str, m.Message]] = [
    ("client", m.JobStart(job="demo", config=CONFIG)),
    ("client", m.Watch(job="demo")),
    ("client", m.QueryFindings(job="demo", session=3)),
    ("client", m.QuerySessions()),
    ("client", m.QueryJobs()),
    (
        "server",
        m.Jobs(
            jobs=[
                m.JobInfo(
                    job="ddp",
                    state="live",
                    sessions=4,
                    live=4,
                    ranks=[0, 1, 2, 3],
                    devices=[0, 1, 2, 3],
                    signatures={0: 3, 1: 3, 2: 3, 3: 3},
                    started=1.5,
                )
            ]
        ),
    ),
    ("client", m.WaitJob(job="demo")),
    ("server", m.Findings(findings=[FINDING, Finding(kind="memory_leak", severity="warning")])),
    (
        "server",
        m.Sessions(
            sessions=[
                m.SessionInfo(
                    session=3,
                    job="demo",
                    pid=1234,
                    uid=1000,
                    host="h",
                    tool="t",
                    device=1,
                    rank=0,
                    state="ended",
                    end_reason="closed by client",
                    started=1.5,
                    ended=2.5,
                    kernels=4,
                    events=100,
                    findings=2,
                )
            ]
        ),
    ),
    ("server", m.JobIdle(job="demo", sessions=2, kernels=3, events=4, findings=5)),
    ("client", m.CompatListen(job="demo", layout="26.0.0")),
    ("server", m.CompatListening(job="demo", name="/tmp/msop_connect.20260402120000.4242.sock")),
    ("server", m.CompatListening(job="demo", reason="request_limit", message="uid 1000 holds its 16 sockets")),
    (
        "server",
        m.KernelChecked(session=3, kernel=1, name="add_custom", tools=["memcheck"], events=961, errors=2, warnings=0),
    ),
    ("server", m.Recorded(session=3, body=b"\x81\xa4type\xa5close")),
]
# Messages that end the connection, each in a fresh READY pair.
ENDING_MESSAGES: list[tuple[str, str, m.Message]] = [
    ("server", "producer", m.Closed(session=1, kernels=2, events=3, findings=4)),
    ("server", "control", m.Closed(session=1)),
    ("server", "producer", m.Error(reason="shutdown", message="daemon stopping")),
    ("client", "control", m.Error(reason="bad_packet", message="what was that")),
]


class TestRoundTrip:
    @pytest.mark.parametrize(("sender", "role", "message"), HANDSHAKE_MESSAGES)
    def test_handshake_messages(self, sender: str, role: str, message: m.Message) -> None:
        """A hello (either role) and the welcome answering it arrive equal to what was sent."""
        pair = ConnectionPair()
        pair.send(pair.client, message)
        assert pair.server.client_role == role
        pair.send(pair.server, m.Welcome(session=7, config=CONFIG, server="sanitizerd 0.1"))
        assert pair.client.state is pair.server.state is State.READY

    @pytest.mark.parametrize(("sender", "message"), PRODUCER_MESSAGES)
    def test_producer_session_messages(self, sender: str, message: m.Message) -> None:
        """Every producer-session message arrives at the peer equal to what was sent."""
        pair = ready_pair("producer")
        pair.send(getattr(pair, sender), message)
        assert pair.client.state is pair.server.state is State.READY

    @pytest.mark.parametrize(("sender", "message"), CONTROL_MESSAGES)
    def test_control_session_messages(self, sender: str, message: m.Message) -> None:
        """Every control-session message arrives at the peer equal to what was sent."""
        pair = ready_pair("control")
        pair.send(getattr(pair, sender), message)
        assert pair.client.state is pair.server.state is State.READY

    @pytest.mark.parametrize(("sender", "role", "message"), ENDING_MESSAGES)
    def test_ending_messages(self, sender: str, role: str, message: m.Message) -> None:
        """closed and error arrive intact and move both ends to CLOSED or ERROR."""
        pair = ready_pair(role)
        pair.send(getattr(pair, sender), message)
        expected = State.ERROR if isinstance(message, m.Error) else State.CLOSED
        assert pair.client.state is pair.server.state is expected

    def test_close_then_closed(self) -> None:
        """A client's close reaches the server, which may still send a verdict and then closed."""
        pair = ready_pair()
        pair.send(pair.client, m.Close())
        pair.send(pair.server, m.Verdict(kernel=1, events=0, errors=0, warnings=0))
        pair.send(pair.server, m.Closed(session=1, kernels=1))
        assert pair.client.state is pair.server.state is State.CLOSED

    def test_handshake_error_reply(self) -> None:
        """The server may answer a hello with error instead of welcome."""
        pair = ConnectionPair()
        pair.send(pair.client, m.Hello(version=1))
        pair.send(pair.server, m.Error(reason="session_limit", message="too many"))
        assert pair.client.state is pair.server.state is State.ERROR

    def test_every_message_type_is_covered(self) -> None:
        """The round-trip tables above name every message type of the protocol."""
        covered = {type(msg) for _, _, msg in HANDSHAKE_MESSAGES + ENDING_MESSAGES}
        covered |= {type(msg) for _, msg in PRODUCER_MESSAGES + CONTROL_MESSAGES}
        covered |= {m.Welcome, m.Close}
        assert covered == set(m.AnyMessage.__args__)

    def test_daemon_encodes_closed_as_documented(self) -> None:
        """The closed frame of docs/protocol.md §9.2 is byte for byte what the server sends."""
        pair = ready_pair()
        data = pair.server.send(m.Closed(session=1, kernels=1, events=1, findings=0))
        expected = bytes.fromhex(
            "3b000000 86a4 74797065 a6 636c6f736564 a7 73657373696f6e 01 a7 6b65726e656c73 01"
            " a6 6576656e7473 01 a8 66696e64696e6773 00 a8 756e73746f726564 00"
        )
        assert data == expected

    def test_documented_hello_frame_decodes(self) -> None:
        """The minimal hello frame of docs/protocol.md §9.1 decodes to a producer hello."""
        data = bytes.fromhex(
            "25000000 84 a474797065 a568656c6c6f a776657273696f6e 01 a3706964 cd04d2 a36a6f62 a464656d6f"
        )
        server = Connection(Role.SERVER)
        server.receive_data(data)
        assert server.next_event() == m.Hello(version=1, pid=1234, job="demo")
        assert server.client_role == "producer"

    def test_unknown_fields_and_any_key_order_decode(self) -> None:
        """A map with type not first and an unknown field still decodes, using defaults for omitted fields."""
        server = ready_pair().server
        server.receive_data(raw_frame({"kernel": 5, "future_field": [1, {"x": 2}], "type": "kernel_end"}))
        assert server.next_event() == m.KernelEnd(kernel=5)


# --- feeding frames whole, byte by byte and with trailing data ----------------------------------------------


def feed_three_ways(make_receiver: Callable[[], Connection], data: bytes, expected: m.Message) -> None:
    """h11's ``tr``: the same frame must parse the same whichever way the bytes arrive."""
    # Whole.
    receiver = make_receiver()
    receiver.receive_data(data)
    assert receiver.next_event() == expected
    assert receiver.next_event() is NEED_DATA
    assert receiver.buffered == 0
    # Byte by byte.
    receiver = make_receiver()
    for i in range(len(data) - 1):
        receiver.receive_data(data[i : i + 1])
        assert receiver.next_event() is NEED_DATA
    receiver.receive_data(data[-1:])
    assert receiver.next_event() == expected
    assert receiver.next_event() is NEED_DATA
    # With trailing data: the start of the next frame stays buffered.
    for trailing in (data[:2], data[:4], data[: len(data) - 1]):
        receiver = make_receiver()
        receiver.receive_data(data + trailing)
        assert receiver.next_event() == expected
        assert receiver.next_event() is NEED_DATA
        assert receiver.buffered == len(trailing)


def _server_in_handshake() -> Connection:
    return Connection(Role.SERVER)


def _client_in_handshake() -> Connection:
    client = Connection(Role.CLIENT)
    client.send(m.Hello(version=1))
    return client


class TestFeeding:
    def test_hello(self) -> None:
        """A hello parses the same fed whole, byte by byte, or followed by the next frame's start."""
        message = HANDSHAKE_MESSAGES[0][2]
        feed_three_ways(_server_in_handshake, Connection(Role.CLIENT).send(message), message)

    def test_welcome(self) -> None:
        """A welcome parses the same however its bytes arrive."""
        pair = ConnectionPair()
        pair.send(pair.client, m.Hello(version=1))
        message = m.Welcome(session=99, config=CONFIG)
        feed_three_ways(_client_in_handshake, pair.server.send(message), message)

    @pytest.mark.parametrize(("sender", "message"), PRODUCER_MESSAGES)
    def test_producer_messages(self, sender: str, message: m.Message) -> None:
        """Every producer-session message parses the same however its bytes arrive."""
        pair = ready_pair("producer")
        data = getattr(pair, sender).send(message)

        def receiver() -> Connection:
            fresh = ready_pair("producer")
            return fresh.other(getattr(fresh, sender))

        feed_three_ways(receiver, data, message)

    @pytest.mark.parametrize(("sender", "message"), CONTROL_MESSAGES)
    def test_control_messages(self, sender: str, message: m.Message) -> None:
        """Every control-session message parses the same however its bytes arrive."""
        pair = ready_pair("control")
        data = getattr(pair, sender).send(message)

        def receiver() -> Connection:
            fresh = ready_pair("control")
            return fresh.other(getattr(fresh, sender))

        feed_three_ways(receiver, data, message)

    def test_several_frames_in_one_chunk(self) -> None:
        """Back-to-back frames delivered in one chunk come out one message per call, in order."""
        pair = ready_pair()
        sent = [m.KernelBegin(kernel=1, name="k", block_dim=1), m.Log(text="a"), m.KernelEnd(kernel=1)]
        data = b"".join(pair.client.send(msg) for msg in sent)
        assert drain(pair.server) == [NEED_DATA]
        pair.server.receive_data(data)
        assert drain(pair.server) == [*sent, NEED_DATA]

    def test_clean_eof_between_frames(self) -> None:
        """EOF right after a whole frame is CONNECTION_CLOSED, not an error."""
        pair = ready_pair()
        pair.server.receive_data(pair.client.send(m.Log(text="bye")))
        pair.server.receive_data(b"")
        assert pair.server.next_event() == m.Log(text="bye")
        assert pair.server.next_event() is CONNECTION_CLOSED
        assert pair.server.state is State.READY

    def test_data_after_eof_is_local_error(self) -> None:
        """Feeding bytes after signalling EOF is a bug of the caller (LocalProtocolError)."""
        conn = Connection(Role.SERVER)
        conn.receive_data(b"")
        with pytest.raises(LocalProtocolError):
            conn.receive_data(b"\x00")


class TestEventsBatch:
    def test_decodes_to_the_same_array(self) -> None:
        """An events batch decodes to a numpy array equal, field by field, to the one sent."""
        events = sample_events()
        pair = ready_pair()
        (received,) = pair.send(pair.client, m.Events(kernel=4, records=records_of(events)))
        decoded = as_events(received.records)
        assert decoded.dtype == EVENT_DTYPE
        assert decoded.tobytes() == events.tobytes()
        for name in ("address", "serial", "kind", "block_type", "flags", "align", "mode", "dst_pipe"):
            assert np.array_equal(decoded[name], events[name])

    def test_records_are_a_view_of_that_frame_only(self) -> None:
        """records is a zero-copy view into the immutable bytes it arrived in, and receiving carries on."""
        events = sample_events()
        pair = ready_pair()
        data = pair.client.send(m.Events(kernel=1, records=records_of(events)))
        follow = pair.client.send(m.KernelEnd(kernel=1))
        pair.server.receive_data(data + follow[:3])
        received = pair.server.next_event()
        assert isinstance(received, m.Events)
        owner = received.records.obj
        assert isinstance(owner, bytes)  # immutable: later receives cannot change the batch under the detectors
        assert received.records.nbytes == events.nbytes
        decoded = as_events(received.records)
        assert not decoded.flags.owndata
        # The view pins what was received for it, not a growing buffer, so receiving carries on.
        pair.server.receive_data(follow[3:])
        assert pair.server.next_event() == m.KernelEnd(kernel=1)
        assert decoded.tobytes() == events.tobytes()

    @pytest.mark.parametrize("count", [0, 1, 5, 4096])
    def test_head_then_records_is_the_whole_frame(self, count: int) -> None:
        """A batch's head (send_events_head) followed by its records parses as the Events message itself, whatever
        its size: the client sends the records from its own array, after the head."""
        events = np.resize(sample_events(), count)
        pair = ready_pair()
        head = pair.client.send_events_head(3, events.nbytes)
        pair.server.receive_data(bytes(head) + events.tobytes())
        received = pair.server.next_event()
        assert isinstance(received, m.Events)
        assert received.kernel == 3
        assert bytes(received.records) == events.tobytes()
        assert pair.server.next_event() is NEED_DATA

    def test_head_is_checked_as_the_message(self) -> None:
        """A head is refused where its batch would be: a size that is not whole records, or before the handshake;
        and the refusal leaves the connection as it was."""
        pair = ready_pair()
        with pytest.raises(LocalProtocolError) as refused:
            pair.client.send_events_head(1, EVENT_DTYPE.itemsize + 1)
        assert refused.value.reason == "bad_batch"
        assert pair.client.state is State.READY
        with pytest.raises(LocalProtocolError):
            Connection(Role.CLIENT).send_events_head(1, 0)


class TestStateRules:
    def test_nothing_before_hello_client_side(self) -> None:
        """A client Connection refuses to send anything but hello before the handshake."""
        client = Connection(Role.CLIENT)
        with pytest.raises(LocalProtocolError) as info:
            client.send(m.DeviceSummary(chip="910B1"))
        assert info.value.reason == "unexpected_message"

    @pytest.mark.parametrize(
        "obj",
        [
            {"type": "device", "chip": "910B1"},
            {"type": "close"},
            {"type": "job_start", "job": "j", "config": {}},
            {"type": "query_sessions"},
        ],
    )
    def test_nothing_before_hello_server_side(self, obj: dict[str, object]) -> None:
        """A server receiving anything but hello first raises unexpected_message."""
        error = remote_error(Connection(Role.SERVER), raw_frame(obj))
        assert error.reason == "unexpected_message"

    def test_nothing_pipelined_behind_hello(self) -> None:
        """Until welcome is sent, a client message other than hello is refused by the server."""
        server = Connection(Role.SERVER)
        data = raw_frame({"type": "hello", "version": 1}) + raw_frame({"type": "device", "chip": "910B1"})
        server.receive_data(data)
        assert isinstance(server.next_event(), m.Hello)
        with pytest.raises(RemoteProtocolError) as info:
            server.next_event()
        assert info.value.reason == "unexpected_message"

    def test_client_waits_for_welcome(self) -> None:
        """A client that sent hello cannot send session messages before it received welcome."""
        client = Connection(Role.CLIENT)
        client.send(m.Hello(version=1))
        with pytest.raises(LocalProtocolError):
            client.send(m.KernelBegin(kernel=1, name="k", block_dim=1))

    @pytest.mark.parametrize(("sender", "message"), [x for x in CONTROL_MESSAGES if x[0] == "client"])
    def test_producer_may_not_send_control_messages(self, sender: str, message: m.Message) -> None:
        """A producer may not send control requests; a server receiving one raises unexpected_message."""
        pair = ready_pair("producer")
        with pytest.raises(LocalProtocolError) as local:
            pair.client.send(message)
        assert local.value.reason == "unexpected_message"
        control = ready_pair("control")
        error = remote_error(ready_pair("producer").server, control.client.send(message))
        assert error.reason == "unexpected_message"

    @pytest.mark.parametrize(
        "message",
        [
            m.KernelBegin(kernel=1, name="k", block_dim=1),
            m.Events(kernel=1, records=memoryview(b"")),
            m.Log(text="x"),
        ],
    )
    def test_control_may_not_send_producer_messages(self, message: m.Message) -> None:
        """A control client may not send producer messages; a server receiving one raises."""
        with pytest.raises(LocalProtocolError):
            ready_pair("control").client.send(message)
        error = remote_error(ready_pair("control").server, ready_pair("producer").client.send(message))
        assert error.reason == "unexpected_message"

    def test_server_to_producer_may_not_send_control_answers(self) -> None:
        """A server refuses to send findings to a producer, and a producer receiving findings raises."""
        with pytest.raises(LocalProtocolError):
            ready_pair("producer").server.send(m.Findings(findings=[]))
        error = remote_error(ready_pair("producer").client, ready_pair("control").server.send(m.Findings(findings=[])))
        assert error.reason == "unexpected_message"

    def test_second_hello_in_ready_is_refused(self) -> None:
        """hello after the handshake is unexpected."""
        error = remote_error(ready_pair().server, raw_frame({"type": "hello", "version": 1}))
        assert error.reason == "unexpected_message"

    def test_welcome_twice_is_refused(self) -> None:
        """A second welcome is unexpected at the client."""
        error = remote_error(ready_pair().client, raw_frame({"type": "welcome", "session": 2, "config": {}}))
        assert error.reason == "unexpected_message"

    def test_nothing_after_close_client_side(self) -> None:
        """After sending close, a client Connection refuses every further message."""
        pair = ready_pair()
        pair.send(pair.client, m.Close())
        with pytest.raises(LocalProtocolError) as info:
            pair.client.send(m.Log(text="late"))
        assert info.value.reason == "unexpected_message"

    def test_nothing_after_close_server_side(self) -> None:
        """A server that received close raises unexpected_message for any later client message."""
        pair = ready_pair()
        pair.send(pair.client, m.Close())
        error = remote_error(pair.server, raw_frame({"type": "log", "text": "late"}))
        assert error.reason == "unexpected_message"

    def test_second_close_is_refused(self) -> None:
        """close is said once."""
        pair = ready_pair()
        pair.send(pair.client, m.Close())
        error = remote_error(pair.server, raw_frame({"type": "close"}))
        assert error.reason == "unexpected_message"

    def test_nothing_after_closed(self) -> None:
        """Once closed arrived, the client accepts no further server message, and the server sends none."""
        pair = ready_pair()
        pair.send(pair.server, m.Closed(session=1))
        with pytest.raises(LocalProtocolError):
            pair.server.send(m.Verdict(kernel=1, events=0, errors=0, warnings=0))
        error = remote_error(
            pair.client, raw_frame({"type": "verdict", "kernel": 1, "events": 0, "errors": 0, "warnings": 0})
        )
        assert error.reason == "unexpected_message"

    def test_error_sticks_after_remote_error(self) -> None:
        """After a protocol error the receiver stays in ERROR and refuses even valid frames."""
        pair = ready_pair()
        remote_error(pair.server, frame(b"\xc1"))
        pair.server.receive_data(raw_frame({"type": "log", "text": "fine"}))
        with pytest.raises(RemoteProtocolError):
            pair.server.next_event()
        with pytest.raises(RemoteProtocolError):
            pair.server.next_event()
        assert pair.server.state is State.ERROR
        with pytest.raises(LocalProtocolError):
            pair.server.send(m.Verdict(kernel=1, events=0, errors=0, warnings=0))

    def test_error_sticks_after_receiving_error(self) -> None:
        """A received error message ends the connection: nothing after it is parsed."""
        pair = ready_pair()
        pair.send(pair.server, m.Error(reason="shutdown", message="bye"))
        pair.client.receive_data(raw_frame({"type": "closed", "session": 1}))
        with pytest.raises(RemoteProtocolError):
            pair.client.next_event()
        assert pair.client.state is State.ERROR

    def test_send_error_from_any_state(self) -> None:
        """send_error frames an error whatever the state and leaves the sender in ERROR."""
        server = Connection(Role.SERVER)
        data = server.send_error("handshake_timeout", "no hello")
        assert server.state is State.ERROR
        client = _client_in_handshake()
        client.receive_data(data)
        assert client.next_event() == m.Error(reason="handshake_timeout", message="no hello")
        assert client.state is State.ERROR

    def test_error_message_may_be_sent_in_handshake_by_client(self) -> None:
        """An error is allowed from either side at any time before close."""
        pair = ConnectionPair()
        pair.send(pair.client, m.Error(reason="shutdown", message="never mind"))
        assert pair.server.state is State.ERROR

    def test_protocol_error_is_abstract(self) -> None:
        """ProtocolError itself cannot be raised; only its Local and Remote subclasses can."""
        with pytest.raises(TypeError):
            ProtocolError("x", reason="bad_packet")
        assert RemoteProtocolError("x", reason="truncated").reason == "truncated"


class TestErrorReasons:
    def test_frame_too_large_raised_on_prefix_alone(self) -> None:
        """A length prefix above the limit is refused as soon as its 4 bytes arrive, with no body sent."""
        server = Connection(Role.SERVER, max_frame_size=1000)
        server.receive_data(struct.pack("<I", 1001)[:3])
        assert server.next_event() is NEED_DATA
        server.receive_data(struct.pack("<I", 1001)[3:])
        with pytest.raises(RemoteProtocolError) as info:
            server.next_event()
        assert info.value.reason == "frame_too_large"
        assert "1001" in str(info.value) and "1000" in str(info.value)
        assert server.state is State.ERROR

    def test_frame_too_large_default_limit(self) -> None:
        """The default limit is 64 MiB: a prefix of 64 MiB + 1 is refused without its body."""
        error = remote_error(Connection(Role.SERVER), struct.pack("<I", 64 * 1024 * 1024 + 1))
        assert error.reason == "frame_too_large"

    def test_frame_of_exactly_the_limit_is_accepted(self) -> None:
        """A body of exactly max_frame_size bytes is read, not refused."""
        body = msgspec.msgpack.encode({"type": "hello", "version": 1, "host": "x" * 50})
        server = Connection(Role.SERVER, max_frame_size=len(body))
        server.receive_data(frame(body))
        assert isinstance(server.next_event(), m.Hello)

    @pytest.mark.parametrize(
        "body",
        [
            b"\xc1",  # never-used msgpack opcode
            b"",  # empty body
            b"\x92\x01\x02",  # an array, not a map
            msgspec.msgpack.encode({"version": 1}),  # no type
            msgspec.msgpack.encode({"type": 5, "version": 1}),  # type not a str
            msgspec.msgpack.encode({"type": "hello", "version": 1}) + b"\xc0",  # trailing bytes
            msgspec.msgpack.encode({"type": "hello"}),  # required field missing
            msgspec.msgpack.encode({"type": "hello", "version": "1"}),  # str for int
            msgspec.msgpack.encode({"type": "hello", "version": True}),  # bool for int
            msgspec.msgpack.encode({"type": "hello", "version": 1.0}),  # float for int
            msgspec.msgpack.encode({"type": "hello", "version": 1, "role": "admin"}),  # outside the Literal
            msgspec.msgpack.encode({"type": "hello", "version": 1, "pid": None}),  # nil where not allowed
            msgspec.msgpack.encode({"type": "hello", "version": 1, 7: 1}),  # non-str key
            msgspec.msgpack.encode({"type": "hello", "version": 1, "config": {"leak_check": 1}}),  # int for bool
            msgspec.msgpack.encode({"type": "hello", "version": 1, "config": {"race_fold": "yes"}}),  # str for bool
            b"\x83\xa4type\xa5hello\xa7version\x01\xa3job\xa2\xff\xfe",  # invalid UTF-8
        ],
    )
    def test_bad_packet_in_handshake(self, body: bytes) -> None:
        """Garbage msgpack or a hello with wrong field types is bad_packet."""
        error = remote_error(Connection(Role.SERVER), frame(body))
        assert error.reason == "bad_packet"

    @pytest.mark.parametrize(
        "obj",
        [
            {"type": "events", "kernel": 1, "records": "not bin"},
            {"type": "events", "kernel": 1, "records": [1, 2, 3]},
            {"type": "kernel_begin", "kernel": "1", "name": "k", "block_dim": 1},
            {"type": "kernel_begin", "kernel": 1, "name": "k", "block_dim": 1, "kernel_type": "gpu"},
            {"type": "host_op", "op": "realloc", "address": 0},
            {"type": "host_op", "op": "malloc", "address": None},
            {"type": "locations", "locations": [{"file": "a.cpp"}]},
            {"type": "locations", "locations": [{"id": 1, "file": "a.cpp", "record": 1}]},
            {"type": "locations", "locations": [{"id": 1, "file": "a.cpp", "record": None}]},
            {"type": "kernel_begin", "kernel": 1, "name": "k", "block_dim": 1, "debug_line": "no"},
            {"type": "device"},
        ],
    )
    def test_bad_packet_in_session(self, obj: dict[str, object]) -> None:
        """A session message with a missing or wrongly typed field is bad_packet."""
        error = remote_error(ready_pair().server, raw_frame(obj))
        assert error.reason == "bad_packet"

    @pytest.mark.parametrize("tag", ["nope", "HELLO", "hello ", ""])
    def test_unknown_type(self, tag: str) -> None:
        """Well-formed msgpack with an unknown type tag is unknown_type, in any state."""
        assert remote_error(Connection(Role.SERVER), raw_frame({"type": tag})).reason == "unknown_type"
        assert remote_error(ready_pair().server, raw_frame({"type": tag, "x": 1})).reason == "unknown_type"

    def test_unexpected_message(self) -> None:
        """A server-only message sent by the client is unexpected_message."""
        error = remote_error(
            ready_pair().server,
            raw_frame({"type": "verdict", "kernel": 1, "events": 0, "errors": 0, "warnings": 0}),
        )
        assert error.reason == "unexpected_message"

    def test_truncated_inside_prefix(self) -> None:
        """EOF after 1 to 3 prefix bytes is truncated."""
        for n in (1, 2, 3):
            error = remote_error(Connection(Role.SERVER), struct.pack("<I", 10)[:n], eof=True)
            assert error.reason == "truncated"

    def test_truncated_inside_body(self) -> None:
        """EOF after the prefix but before the whole body is truncated, even with no body byte yet."""
        data = raw_frame({"type": "hello", "version": 1})
        for n in (4, 5, len(data) - 1):
            error = remote_error(Connection(Role.SERVER), data[:n], eof=True)
            assert error.reason == "truncated"

    def test_version(self) -> None:
        """A hello with version 2 is refused with reason version, naming both versions."""
        error = remote_error(Connection(Role.SERVER), raw_frame({"type": "hello", "version": 2, "pid": 1}))
        assert error.reason == "version"
        assert str(error) == "client speaks protocol version 2; this daemon speaks version 1"

    def test_client_refuses_to_send_other_versions(self) -> None:
        """The client Connection will not send a hello of another version."""
        with pytest.raises(LocalProtocolError) as info:
            Connection(Role.CLIENT).send(m.Hello(version=2))
        assert info.value.reason == "version"

    @pytest.mark.parametrize("size", [1, 55, 57, 111])
    def test_bad_batch(self, size: int) -> None:
        """An events batch whose length is not a multiple of 56 is bad_batch."""
        error = remote_error(ready_pair().server, raw_frame({"type": "events", "kernel": 1, "records": b"\0" * size}))
        assert error.reason == "bad_batch"

    def test_client_refuses_to_send_bad_batch(self) -> None:
        """The client Connection will not send a batch that is not whole records."""
        with pytest.raises(LocalProtocolError) as info:
            ready_pair().client.send(m.Events(kernel=1, records=memoryview(b"\0" * 55)))
        assert info.value.reason == "bad_batch"

    def test_reasons_are_the_documented_set(self) -> None:
        """REASONS is exactly the fixed set of docs/protocol.md §8."""
        assert set(REASONS) == {
            "frame_too_large",
            "bad_packet",
            "unknown_type",
            "unexpected_message",
            "truncated",
            "version",
            "bad_batch",
            "bad_reference",
            "handshake_timeout",
            "session_limit",
            "shutdown",
            "permission_denied",
            "job_limit",
            "slow_consumer",
            "request_limit",
            "store_unavailable",
            "internal_error",
            "connection_limit",
            "buffer_limit",
            "frame_timeout",
            "idle_timeout",
            "resource_limit",
            "wire_mismatch",
        }


# --- fuzzing ------------------------------------------------------------------------------------------------


def parse_everything(conn: Connection, data: bytes, *, chunk: int) -> None:
    """Feed ``data`` in chunks then EOF; parse until done. Only RemoteProtocolError may escape."""
    try:
        for i in range(0, len(data), max(chunk, 1)):
            conn.receive_data(data[i : i + chunk])
            drain(conn)
        conn.receive_data(b"")
        drain(conn)
    except RemoteProtocolError as exc:
        assert exc.reason in REASONS
        assert conn.state is State.ERROR


def valid_frames() -> list[tuple[str, bytes]]:
    """(role, bytes a client of that role may send after the handshake) for every client message."""
    out = []
    for role, table in (("producer", PRODUCER_MESSAGES), ("control", CONTROL_MESSAGES)):
        for sender, message in table:
            if sender == "client":
                out.append((role, ready_pair(role).client.send(message)))
    return out


VALID_FRAMES = valid_frames()
HELLO_FRAME = Connection(Role.CLIENT).send(HANDSHAKE_MESSAGES[0][2])
FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    role, data = draw(st.sampled_from(VALID_FRAMES))
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "set_byte"]))
        i = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set_byte" and buf:
            buf[i] = draw(st.integers(0, 255))
        elif op == "insert":
            buf[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and buf:
            del buf[i : i + draw(st.integers(1, 8))]
        elif op == "truncate":
            del buf[i:]
    return role, bytes(buf)


class TestFuzz:
    @FUZZ
    @given(data=st.binary(max_size=300), chunk=st.integers(1, 64))
    def test_arbitrary_bytes_in_handshake(self, data: bytes, chunk: int) -> None:
        """Arbitrary bytes fed to a fresh server either parse or raise RemoteProtocolError."""
        parse_everything(Connection(Role.SERVER, max_frame_size=4096), data, chunk=chunk)

    @FUZZ
    @given(data=st.binary(max_size=300), role=st.sampled_from(["producer", "control"]), chunk=st.integers(1, 64))
    def test_arbitrary_bytes_in_session(self, data: bytes, role: str, chunk: int) -> None:
        """Arbitrary bytes fed to a server in READY either parse or raise RemoteProtocolError."""
        server = ready_pair(role).server
        server.max_frame_size = 4096
        parse_everything(server, data, chunk=chunk)

    @FUZZ
    @given(case=mutated(), chunk=st.integers(1, 512))
    def test_mutated_valid_frames(self, case: tuple[str, bytes], chunk: int) -> None:
        """Mutations of valid session frames either parse or raise RemoteProtocolError."""
        role, data = case
        parse_everything(ready_pair(role).server, data, chunk=chunk)

    @FUZZ
    @given(body=st.binary(max_size=200), prefix_delta=st.integers(-3, 3))
    def test_frames_with_arbitrary_bodies(self, body: bytes, prefix_delta: int) -> None:
        """An arbitrary body, framed right or slightly off, either parses or raises RemoteProtocolError."""
        length = max(len(body) + prefix_delta, 0)
        parse_everything(Connection(Role.SERVER), struct.pack("<I", length) + body, chunk=len(body) + 4)
        parse_everything(ready_pair().server, struct.pack("<I", length) + body, chunk=7)

    @FUZZ
    @given(
        obj=st.recursive(
            st.none()
            | st.booleans()
            | st.integers(-(2**63), 2**64 - 1)
            | st.floats()
            | st.text(max_size=8)
            | st.binary(max_size=8),
            lambda children: (
                st.lists(children, max_size=4)
                | st.dictionaries(st.text(max_size=8) | st.integers(0, 3), children, max_size=4)
            ),
            max_leaves=12,
        ),
        tag=st.sampled_from([t.__struct_config__.tag for t in m.AnyMessage.__args__] + ["zzz"]),
        role=st.sampled_from(["producer", "control"]),
    )
    def test_wellformed_msgpack_with_known_tags(self, obj: object, tag: str, role: str) -> None:
        """Valid msgpack maps with a real tag and arbitrary fields parse or raise RemoteProtocolError."""
        message = {"type": tag, "version": 1, "kernel": 1}
        if isinstance(obj, dict):
            message.update({k: v for k, v in obj.items() if k != "type"})
        else:
            message["records"] = obj
        parse_everything(ready_pair(role).server, raw_frame(message), chunk=1000)
        parse_everything(Connection(Role.SERVER), raw_frame(message), chunk=1000)

    def test_deeply_nested_body(self) -> None:
        """A pathologically nested msgpack body is a protocol error, not a crash."""
        body = b"\x81\xa4type" + b"\x91" * 100_000 + b"\xc0"
        error = remote_error(Connection(Role.SERVER, max_frame_size=1 << 20), frame(body))
        assert error.reason == "bad_packet"


class TestReceiveBuffer:
    @settings(max_examples=200, deadline=None, database=None)
    @given(
        data=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=8), takes=st.lists(st.integers(0, 80))
    )
    def test_takes_return_the_bytes_in_order(self, data: bytes, cuts: list[int], takes: list[int]) -> None:
        """However the bytes arrive and are taken, peek and take return them in order and the size adds up."""
        from sanitizerd_protocol._buffer import ReceiveBuffer

        buffer = ReceiveBuffer()
        bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
        for lo, hi in itertools.pairwise(bounds):
            buffer.append(data[lo:hi])
        taken = b""
        for n in takes:
            n = min(n, len(buffer))
            assert buffer.peek(min(n, 4)) == data[len(taken) : len(taken) + min(n, 4)]
            taken += bytes(buffer.take(n))
            assert len(buffer) == len(data) - len(taken)
        assert taken == data[: len(taken)]

    @settings(max_examples=200, deadline=None, database=None)
    @given(
        data=st.binary(max_size=600),
        steps=st.lists(st.tuples(st.sampled_from(["append", "read", "gather", "take"]), st.integers(0, 300))),
    )
    def test_reads_into_its_memory_and_gathers_in_order(self, data: bytes, steps: list[tuple[str, int]]) -> None:
        """Bytes appended, or read into ``get_buffer`` (the scratch area, or the rest of a gathered piece), come
        out of ``take`` in order; a gathered piece is taken whole as one view, with no join."""
        from sanitizerd_protocol._buffer import ReceiveBuffer

        buffer = ReceiveBuffer()
        fed = taken = 0
        gathering = 0  # the size of a piece being gathered that the data ran out for
        out = b""
        for action, n in steps:
            if action == "gather" and gathering:
                n = gathering
            if action == "append":
                buffer.append(data[fed : fed + n])
                fed = min(fed + n, len(data))
            elif action == "read" and fed < len(data):
                view = buffer.get_buffer()
                assert len(view) > 0
                k = min(n, len(view), len(data) - fed)
                view[:k] = data[fed : fed + k]
                buffer.buffer_updated(k)
                fed += k
            elif action == "gather" and len(buffer) < n:
                buffer.gather(n)
                rest = min(n - len(buffer), len(data) - fed)
                while rest:  # read the rest of the piece as a socket would, in pieces
                    view = buffer.get_buffer()
                    k = min(len(view), rest, 7)
                    view[:k] = data[fed : fed + k]
                    buffer.buffer_updated(k)
                    fed, rest = fed + k, rest - k
                gathering = n if len(buffer) < n else 0
                if len(buffer) == n:
                    piece = buffer.take(n)
                    assert isinstance(piece, memoryview) and piece.readonly
                    out += bytes(piece)
                    taken += n
            elif action == "take":
                n = min(n, len(buffer))
                if n:
                    gathering = 0  # taking from a piece not yet whole makes it an ordinary chunk
                assert buffer.peek(min(n, 4)) == data[taken : taken + min(n, 4)]
                out += bytes(buffer.take(n))
                taken += n
            assert len(buffer) == fed - taken
        assert out == data[:taken]


class TestReadsIntoFrames:
    """The daemon reads a socket into the connection's own memory (``get_buffer``/``buffer_updated``): between
    frames into a scratch area, a frame longer than what has arrived into an array of its own."""

    @staticmethod
    def read(conn: Connection, data: bytes) -> int:
        """One read of ``data`` (at most what ``get_buffer`` offers) into the connection; how much it took."""
        view = conn.get_buffer()
        k = min(len(view), len(data))
        view[:k] = data[:k]
        conn.buffer_updated(k)
        return k

    @settings(max_examples=100, deadline=None, database=None)
    @given(
        batches=st.lists(st.integers(0, 120), min_size=1, max_size=5),
        reads=st.lists(st.integers(1, 9000), min_size=1, max_size=40),
    )
    def test_a_read_that_begins_a_longer_frame_goes_into_its_own_array(
        self, batches: list[int], reads: list[int]
    ) -> None:
        """Read in pieces of any size, the frames give the messages that whole bytes give; a read between frames
        that holds a frame's length prefix but not the whole frame leaves the rest of that frame to be read
        straight into its own array (its head copied there once, not kept as bytes first)."""
        events = np.tile(sample_events(), 40)
        sent = [
            m.KernelBegin(kernel=1, name="k", block_dim=1),
            *(m.Events(kernel=1, records=records_of(events[:n])) for n in batches),
            m.KernelEnd(kernel=1),
        ]
        client = ready_pair().client
        data = b"".join(bytes(client.send(message)) for message in sent)
        conn = ready_pair().server
        fed, got, turn = 0, [], 0
        while fed < len(data):
            between = conn.buffered == 0
            k = self.read(conn, data[fed : fed + reads[turn % len(reads)]])
            turn += 1
            if between and k >= 4:
                end = 4 + struct.unpack_from("<I", data, fed)[0]
                assert conn.frame_rest == (end - k if end > k else 0)
            fed += k
            while (event := conn.next_event()) is not NEED_DATA:
                got.append(event)
        assert [msgspec.msgpack.encode(g) for g in got] == [msgspec.msgpack.encode(s) for s in sent]

    def test_a_frame_past_the_limit_is_not_gathered_from_its_first_read(self) -> None:
        """A length prefix past the limit allocates nothing when it is read: the frame is refused as before."""
        conn = ready_pair().server
        conn.max_frame_size = 1 << 20
        assert self.read(conn, struct.pack("<I", (1 << 20) + 1) + b"x" * 100) == 104
        assert conn.frame_rest == 0
        with pytest.raises(RemoteProtocolError) as info:
            conn.next_event()
        assert info.value.reason == "frame_too_large"

    def test_a_prefix_split_across_reads_is_gathered_once_whole(self) -> None:
        """Two bytes of a prefix are kept as bytes; the frame is gathered once the prefix is whole (next_event)."""
        client = ready_pair().client
        data = bytes(client.send(m.Events(kernel=1, records=records_of(np.tile(sample_events(), 40)))))
        conn = ready_pair().server
        self.read(conn, data[:2])
        assert conn.frame_rest == 0 and conn.next_event() is NEED_DATA
        self.read(conn, data[2:100])
        assert conn.frame_rest == 0  # not between frames: the first two bytes were buffered
        assert conn.next_event() is NEED_DATA
        assert conn.frame_rest == len(data) - 100


# --- hostile bodies and long strings (issue 10) -------------------------------------------------------------


def encoded_map(**fields: bytes) -> bytes:
    """A msgpack map whose values are given already encoded (so they may be anything)."""
    return bytes([0x80 | len(fields)]) + b"".join(msgspec.msgpack.encode(k) + v for k, v in fields.items())


NESTED = b"\x91" * 1000 + b"\xc0"  # 1 000 nested arrays in 1 KiB


class TestHostileBodies:
    @pytest.mark.parametrize(
        "body",
        [
            encoded_map(type=msgspec.msgpack.encode("hello"), version=b"\x01", host=NESTED),
            encoded_map(type=msgspec.msgpack.encode("hello"), version=b"\x01", unknown=NESTED),
            encoded_map(type=NESTED),
            b"\x91" * 200_000 + b"\xc0",
        ],
        ids=["in-a-field", "in-an-unknown-field", "as-the-type", "bare"],
    )
    def test_nesting_is_bad_packet_in_the_handshake(self, body: bytes) -> None:
        """Nesting deeper than the decoder follows (a RecursionError inside msgspec) is the peer's bad_packet."""
        assert remote_error(Connection(Role.SERVER), frame(body)).reason == "bad_packet"

    @pytest.mark.parametrize("tag", ["log", "locations", "kernel_begin", "job_start"])
    def test_nesting_is_bad_packet_after_the_handshake(self, tag: str) -> None:
        body = encoded_map(type=msgspec.msgpack.encode(tag), text=NESTED, locations=NESTED, name=NESTED)
        for role in ("producer", "control"):
            assert remote_error(ready_pair(role).server, frame(body)).reason == "bad_packet"

    def test_an_unknown_type_is_quoted_short(self) -> None:
        """The error message quotes a peer's unknown type name, but never more than a few dozen characters of it."""
        error = remote_error(Connection(Role.SERVER), raw_frame({"type": "t" * 100_000}))
        assert error.reason == "unknown_type" and len(str(error)) < 200

    @pytest.mark.parametrize(
        "message",
        [
            {"type": "hello", "version": 1, "job": "j" * (m.MAX_IDENT + 1)},
            {"type": "hello", "version": 1, "config": {"kernel_name": "k" * (m.MAX_IDENT + 1)}},
        ],
        ids=["job", "kernel-filter"],
    )
    def test_identifying_names_past_their_length_are_refused(self, message: dict[str, object]) -> None:
        """A name that identifies something is refused, never cut (a cut name would name something else)."""
        assert remote_error(Connection(Role.SERVER), raw_frame(message)).reason == "bad_packet"

    @pytest.mark.parametrize(
        "message",
        [
            {"type": "ipc", "op": "set", "name": "n" * (m.MAX_IDENT + 1)},
            {"type": "device", "chip": "c" * (m.MAX_IDENT + 1)},
            {"type": "signature", "step": 1, "entries": [{"name": "e" * (m.MAX_IDENT + 1)}]},
        ],
        ids=["ipc", "chip", "signature-entry"],
    )
    def test_identifying_names_after_the_handshake(self, message: dict[str, object]) -> None:
        assert remote_error(ready_pair().server, raw_frame(message)).reason == "bad_packet"

    def test_an_identifying_name_of_exactly_its_length_is_kept(self) -> None:
        server = Connection(Role.SERVER)
        server.receive_data(raw_frame({"type": "hello", "version": 1, "job": "j" * m.MAX_IDENT}))
        hello = server.next_event()
        assert isinstance(hello, m.Hello) and hello.job == "j" * m.MAX_IDENT

    def test_descriptive_text_is_cut_marked_and_counted(self) -> None:
        """Kernel names, files, functions, callers and log texts are cut to their lengths, marked, and each cut is
        reported once by take_cuts."""
        server = ready_pair().server
        long = "x" * (MAX_NAME + 10)
        location = {"id": 1, "file": long, "function": long, "callers": list(range(MAX_CALLERS + 5))}
        server.receive_data(
            raw_frame({"type": "kernel_begin", "kernel": 1, "name": long, "block_dim": 1})
            + raw_frame({"type": "locations", "locations": [location]})
            + raw_frame({"type": "log", "text": "y" * (MAX_LOG_TEXT + 3)})
        )
        begin, locations, log, _ = drain(server)
        assert isinstance(begin, m.KernelBegin) and begin.name == "x" * MAX_NAME + CUT_MARK.format(10)
        assert isinstance(locations, m.Locations)
        [loc] = locations.locations
        assert loc.file == loc.function == begin.name and loc.callers == list(range(MAX_CALLERS))
        assert isinstance(log, m.Log) and log.text.endswith("…[cut 3 characters]")
        assert server.take_cuts() == [("kernel", 10), ("file", 10), ("function", 10), ("callers", 5), ("log", 3)]
        assert server.take_cuts() == []

    def test_text_within_its_length_is_untouched(self) -> None:
        server = ready_pair().server
        name = "n" * MAX_NAME
        server.receive_data(raw_frame({"type": "kernel_begin", "kernel": 1, "name": name, "block_dim": 1}))
        begin = server.next_event()
        assert isinstance(begin, m.KernelBegin) and begin.name == name
        assert server.take_cuts() == []

    def test_cut_counts_characters_not_bytes(self) -> None:
        assert cut("é" * 5, 5) == ("é" * 5, 0)
        assert cut("é" * 6, 5) == ("é" * 5 + "…[cut 1 characters]", 1)
