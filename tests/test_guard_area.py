"""The GM guard area (`--padding`) and host writes into it (``guard_write``): end to end on
examples/emulated/guard_area.py with a real daemon and client processes; msSanitizer's GM_ADDR_OUT_OF_BOUND_RECORD
read at the offsets wires.json measured; hostile guard_write frames and floods."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from client_shim import Client
from sanitizerd.compat import wire
from sanitizerd.sessions.session import MAX_GUARD_WRITES, GuardWriteRefused, Peer, Session, SessionFindings
from sanitizerd_protocol import messages as m
from tests.conftest import ROOT, RunningDaemon, run_example, sanitizerd, start_daemon, stop_daemon
from tests.test_compat_layouts import Client as CompatClient
from tests.test_compat_layouts import connect, feed_all, raw_named
from tests.test_hostile import conn_hello, conn_last_error, conn_map, encode, frame, free_port, metric, read_replies
from tests.test_hostile import connect as connect_raw

EXAMPLE = ROOT / "examples" / "emulated" / "guard_area.py"
TILING = 0x12C2_0000_0000


def run_job(daemon: RunningDaemon, bug: str, *options: str) -> tuple[list[dict], str]:
    return run_example(daemon, [str(EXAMPLE), bug], *options)


@pytest.mark.parametrize(("padding", "size"), [("64", 32), ("32", 32)])
def test_a_tiling_overrun_is_an_illegal_write(daemon: RunningDaemon, padding: str, size: int) -> None:
    findings, out = run_job(daemon, "tiling_overrun", "-t", "memcheck", f"--padding={padding}")
    (finding,) = findings
    assert (finding["kind"], finding["severity"], finding["address"], finding["size"]) == (
        "guard_write", "error", TILING + 96, size)  # fmt: skip
    lines = out.splitlines()
    at = lines.index(f"====== ERROR: illegal write of size {size} byte(s)")
    assert lines[at + 1 : at + 3] == [
        "======    Access to 0x12c200000060 on GM is 0 byte(s) after the nearest allocation at 0x12c200000000 of "
        "size 96 byte(s)",
        "======    in tiling_custom on device 0",
    ]


def test_a_tiling_within_its_buffer_is_silent(daemon: RunningDaemon) -> None:
    assert run_job(daemon, "none", "-t", "memcheck", "-t", "initcheck", "--padding=1024")[0] == []


def test_without_memcheck_it_is_not_reported(daemon: RunningDaemon) -> None:
    """msSanitizer's memcheck reports it; racecheck alone does not."""
    assert run_job(daemon, "tiling_overrun", "-t", "racecheck")[0] == []


@pytest.mark.parametrize("padding", ["31", "1025", "0x40", "", "99999999999999999999"])
def test_padding_out_of_range_is_refused_in_mssanitizers_words(padding: str) -> None:
    result = sanitizerd("run", f"--padding={padding}", "--", "/bin/true")
    assert result.returncode != 0
    assert "--padding param is invalid. range: 32-1024 (bytes), default:32 (bytes)" in result.stdout + result.stderr


def test_padding_outside_mssanitizers_whitelist_is_ignored_as_it_does() -> None:
    """Its whitelist takes lowercase letters and digits for --padding: a sign is refused before the number."""
    result = sanitizerd("run", "--padding=-32", "--", "/bin/true")
    assert result.returncode != 0
    assert "param 'padding' contains invalid characters and is ignored." in result.stderr


def test_the_config_bounds_padding_and_old_clients_get_the_default() -> None:
    assert msgspec.msgpack.decode(msgspec.msgpack.encode({}), type=m.Config).padding == 32
    for bad in (31, 1025, -1, 2**63):
        with pytest.raises(msgspec.ValidationError):
            msgspec.msgpack.decode(msgspec.msgpack.encode({"padding": bad}), type=m.Config)


# --- the session's bound ------------------------------------------------------------------------------------------


def test_a_flood_of_guard_writes_is_bounded_and_said_once() -> None:
    session = Session(9, m.Hello(version=1, job="j"), m.Config(tools=["memcheck"]), Peer())
    write = m.GuardWrite(user_address=0x1000, user_size=64, out_address=0x1040, out_size=32)
    replies = [item for _ in range(MAX_GUARD_WRITES + 50) for item in session.handle(write)]
    reported, refused = replies[:MAX_GUARD_WRITES], replies[MAX_GUARD_WRITES:]
    assert all(isinstance(item, SessionFindings) for item in reported)
    assert len(refused) == 50 and all(isinstance(item, GuardWriteRefused) for item in refused)
    kinds = [f.kind for item in replies for f in item.findings]  # type: ignore[union-attr]
    assert kinds == ["guard_write"] * MAX_GUARD_WRITES + ["internal_error"]


def test_guard_writes_past_the_bound_are_counted_over_the_wire(short_dir: Path) -> None:
    """A client flooding guard-area writes on a real daemon: the first MAX_GUARD_WRITES are reported, one
    internal_error says the rest are not, and each refused one is counted in sanitizerd_guard_writes_refused_total."""
    port = free_port()
    running = start_daemon(short_dir, "--handshake-timeout", "1", "--metrics-addr", f"127.0.0.1:{port}")
    try:
        assert metric(port, "sanitizerd_guard_writes_refused_total") == 0
        config = m.Config(tools=["memcheck"])
        with Client(running.socket, job="guard-flood", device=0, config=config, resume_buffer=0) as client:
            for _ in range(MAX_GUARD_WRITES + 7):
                client.guard_write(0x1000, 64, 0x1040, 32)
        query = sanitizerd("findings", "--socket", str(running.socket), "--job", "guard-flood", "--format", "json")
        kinds = [f["kind"] for f in json.loads(query.stdout)]
        assert kinds.count("guard_write") == MAX_GUARD_WRITES and kinds.count("internal_error") == 1
        assert metric(port, "sanitizerd_guard_writes_refused_total") == 7
    finally:
        assert stop_daemon(running) == 0, running.log_text()


def test_the_distance_is_msSanitizers_u64_arithmetic() -> None:
    """An out address before the buffer (or anywhere): the distance wraps as msSanitizer's unsigned one does."""
    session = Session(9, m.Hello(version=1, job="j"), m.Config(tools=["memcheck"]), Peer())
    top = 2**64 - 1
    (item,) = session.handle(m.GuardWrite(user_address=top, user_size=2**32 - 1, out_address=0, out_size=2**32 - 1))
    (finding,) = item.findings  # type: ignore[union-attr]
    assert finding.size == 2**32 - 1 and finding.address == 0
    distance = (0 - top - (2**32 - 1)) % 2**64
    assert f"is {distance} byte(s) after the nearest allocation at 0xffffffffffffffff of size 4294967295" in (
        finding.detail)  # fmt: skip


# --- hostile guard_write frames on a real daemon --------------------------------------------------------------------


def guard(**fields: bytes) -> bytes:
    return frame(conn_map(type=msgspec.msgpack.encode("guard_write"), **fields))


U64_MAX, U32_OVER = b"\xcf" + b"\xff" * 8, msgspec.msgpack.encode(2**32)
ONE = msgspec.msgpack.encode(1)


@pytest.mark.parametrize(
    "body",
    [
        guard(user_address=ONE, user_size=ONE, out_address=ONE, out_size=U32_OVER),  # size past u32
        guard(user_address=ONE, user_size=U32_OVER, out_address=ONE, out_size=ONE),
        guard(user_address=msgspec.msgpack.encode(-1), user_size=ONE, out_address=ONE, out_size=ONE),
        guard(user_address=ONE, user_size=ONE, out_address=ONE),  # a field missing
        guard(user_address=ONE, user_size=ONE, out_address=b"\x91" * 10_000 + b"\xc0", out_size=ONE),
        guard(user_address=msgspec.msgpack.encode("0x10"), user_size=ONE, out_address=ONE, out_size=ONE),
    ],
    ids=["out-size-past-u32", "user-size-past-u32", "negative", "missing", "deep", "string"],
)
def test_hostile_guard_writes_are_refused_by_name(hostile_daemon: RunningDaemon, body: bytes) -> None:
    with connect_raw(hostile_daemon) as sock:
        sock.sendall(conn_hello("hostile-guard") + body)
        error = conn_last_error(sock)
    assert error["reason"] == "bad_packet", error
    assert len(str(error["message"])) < 1000


def test_a_guard_write_at_the_top_of_u64_is_reported(hostile_daemon: RunningDaemon) -> None:
    config = {"tools": ["memcheck"]}
    with connect_raw(hostile_daemon) as sock:
        sock.sendall(encode(type="hello", version=1, job="guard-top", config=config))
        sock.sendall(guard(user_address=U64_MAX, user_size=ONE, out_address=U64_MAX, out_size=ONE))
        sock.sendall(encode(type="close"))
        replies = read_replies(sock)
    assert [r["type"] for r in replies][-1] == "closed", replies
    query = sanitizerd("findings", "--socket", str(hostile_daemon.socket), "--job", "guard-top", "--format", "json")
    (finding,) = json.loads(query.stdout)
    assert (finding["kind"], finding["address"], finding["size"]) == ("guard_write", 2**64 - 1, 1)


# --- msSanitizer's GM_ADDR_OUT_OF_BOUND_RECORD ----------------------------------------------------------------------


@pytest.mark.parametrize("release", ["26.1.0", "master"])
def test_the_record_becomes_a_guard_write(release: str) -> None:
    """Packed at the measured offsets (userAddr 0, userSize 8, outAddr 16, outSize 24 of 32 bytes), extreme values
    included: read into the message memcheck reports, nothing lost or widened."""
    client = CompatClient(raw_named(release))
    spec = client.structs["GMAddrOutOfBoundRecord"]
    assert spec["size"] == 32
    assert [spec["fields"][f][:2] for f in ("userAddr", "userSize", "outAddr", "outSize")] == [
        [0, "<u8"], [8, "<u4"], [16, "<u8"], [24, "<u4"]]  # fmt: skip
    values = [(0x1000, 64, 0x1040, 32), (2**64 - 1, 2**32 - 1, 2**64 - 1, 2**32 - 1), (0, 0, 0, 0)]
    data = b"".join(
        client.packet("GM_ADDR_OUT_OF_BOUND_RECORD", client.put("GMAddrOutOfBoundRecord", {
            "userAddr": ua, "userSize": us, "outAddr": oa, "outSize": os_}))
        for ua, us, oa, os_ in values
    )  # fmt: skip
    conn = connect(wire.layout_named(release))
    out: list[m.Message] = []
    feed_all(conn, data, out)
    writes = [(x.user_address, x.user_size, x.out_address, x.out_size) for x in out if isinstance(x, m.GuardWrite)]
    assert writes == values
