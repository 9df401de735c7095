"""Per-job sockets in msSanitizer's form (sanitizerd/server/compat_socket.py), against real daemons.

The socket a ``compat_listen`` opens is reached as msSanitizer's client reaches it: an abstract address with the
full 110-byte length (the name padded with NUL bytes to the end of ``sun_path``). Connections of another uid are
closed unanswered; the socket lives as long as the control connection that asked for it; its bounds refuse clearly.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from sanitizerd.control_client import ControlClient
from sanitizerd.server.compat_socket import SUN_PATH, abstract_address, socket_name
from sanitizerd_protocol import messages as m
from tests.conftest import TEST_WORKERS, RunningDaemon, sanitizerd, start_daemon, stop_daemon
from tests.other_uid import NOBODY


def layout_name() -> str:
    from sanitizerd.compat import wire

    return wire.DEFAULT_LAYOUT


def listen(control: ControlClient, job: str, layout: str | None = None) -> m.CompatListening:
    control.send(m.JobStart(job=job, config=m.Config()))
    answer = control.request(m.CompatListen(job=job, layout=layout or layout_name()))
    assert isinstance(answer, m.CompatListening), answer
    return answer


def connect(name: str, *, padded: bool = True, timeout: float = 5.0) -> socket.socket:
    """Connect as msSanitizer's client does (``padded``: the whole sun_path, address length 110)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(abstract_address(name) if padded else b"\0" + name.encode())
    except BaseException:
        sock.close()
        raise
    return sock


def refused(name: str) -> bool:
    try:
        connect(name).close()
    except ConnectionRefusedError:
        return True
    return False


def wait_until(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class TestName:
    def test_form(self) -> None:
        """``/tmp/msop_connect.<YYYYmmddHHMMSS>.<pid>.sock``, in local time, as msSanitizer's launcher names it."""
        when = time.mktime((2026, 4, 2, 12, 30, 5, 0, 0, -1))
        assert socket_name(4242, when) == "/tmp/msop_connect.20260402123005.4242.sock"

    def test_padded_to_the_whole_sun_path(self) -> None:
        address = abstract_address("/tmp/msop_connect.20260402123005.4242.sock")
        assert len(address) == SUN_PATH and address[0] == 0 and address.rstrip(b"\0")[1:].startswith(b"/tmp/")
        with pytest.raises(ValueError):
            abstract_address("x" * SUN_PATH)


class TestSocket:
    def test_reachable_at_msSanitizers_address_only(self, daemon: RunningDaemon) -> None:
        """The name is in msSanitizer's form for this process's pid; the full 110-byte address reaches it, the short
        one (the name alone) is another address and does not."""
        with ControlClient(daemon.socket) as control:
            answer = listen(control, "compat-form")
            assert answer.reason == "" and answer.job == "compat-form"
            assert re.fullmatch(rf"/tmp/msop_connect\.\d{{14}}\.{os.getpid()}\.sock", answer.name), answer.name
            connect(answer.name).close()
            with pytest.raises(ConnectionRefusedError):
                connect(answer.name, padded=False)
            # and the kernel lists it as an abstract socket, padding included
            table = Path("/proc/net/unix").read_text()
            assert "@" + answer.name + "@" * (SUN_PATH - 1 - len(answer.name)) in table

    def test_two_sockets_of_one_process_get_distinct_names(self, daemon: RunningDaemon) -> None:
        """A second socket for the same pid within the same second is stamped a second on, still in form."""
        with ControlClient(daemon.socket) as control:
            first, second = listen(control, "compat-a"), listen(control, "compat-b")
            assert first.name and second.name and first.name != second.name
            connect(first.name).close()
            connect(second.name).close()

    def test_closes_with_its_control_connection(self, daemon: RunningDaemon) -> None:
        control = ControlClient(daemon.socket)
        name = listen(control, "compat-life").name
        connect(name).close()
        control.close()
        assert wait_until(lambda: refused(name)), "the socket outlived its control connection"
        daemon.wait_for_log("compat socket closed")

    def test_closes_at_daemon_stop(self, short_dir: Path) -> None:
        running = start_daemon(short_dir)
        try:
            control = ControlClient(running.socket)
            name = listen(control, "compat-stop").name
            connect(name).close()
        finally:
            assert stop_daemon(running) == 0, running.log_text()
        control.close()
        assert refused(name)

    def test_closes_when_the_daemon_drains(self, short_dir: Path) -> None:
        """At SIGTERM the socket closes at once (no new session of the job), while a session it let in still
        holds the drain."""
        running = start_daemon(short_dir, "--drain-timeout", "30")
        try:
            control = ControlClient(running.socket)
            name = listen(control, "compat-drain").name
            client = connect(name)
            running.wait_for_log("session started")
            running.process.send_signal(signal.SIGTERM)
            assert wait_until(lambda: refused(name))
            assert running.process.poll() is None, "the daemon should still be draining the session"
            client.close()
        finally:
            assert stop_daemon(running) == 0, running.log_text()
        control.close()

    def test_unknown_layout_refused_clearly(self, daemon: RunningDaemon) -> None:
        """A layout the daemon does not speak: a refusal naming it and those it knows; the connection serves on."""
        with ControlClient(daemon.socket) as control:
            answer = listen(control, "compat-layout", layout="mssanitizer-nonesuch")
            assert (answer.name, answer.reason) == ("", "version")
            assert "'mssanitizer-nonesuch' is not one this daemon speaks" in answer.message
            assert layout_name() in answer.message
            assert isinstance(control.request(m.QuerySessions()), m.Sessions)

    def test_another_users_job_name_is_a_job_of_the_askers_own(self, daemon: RunningDaemon) -> None:
        """Job names are each uid's own: nobody asking for a socket for root's job gets one for a job of nobody's
        own, answered as for a name nobody uses (no refusal that would say root's job exists)."""
        from tests.other_uid import as_uid, open_socket_to_all
        from tests.other_uid import control as control_frames

        with ControlClient(daemon.socket) as control:
            listen(control, "compat-owned")
            open_socket_to_all(daemon)
            for job in ("compat-owned", "compat-never-used"):
                answer = as_uid(NOBODY, daemon, control_frames(m.CompatListen(job=job, layout=layout_name())), expect=2)
                assert [a["type"] for a in answer] == ["welcome", "compat_listening"], answer
                assert answer[1]["name"] and not answer[1].get("reason"), answer


_NOBODY_CONNECTS = r"""
import socket, sys
name = sys.argv[1].encode()
sock = socket.socket(socket.AF_UNIX)
sock.settimeout(5)
sock.connect(b"\0" + name + b"\0" * (107 - len(name)))
try:
    sock.sendall(b"\x00" * 64)  # what a client would send first (a packet type and more)
    data = sock.recv(1 << 16)
except OSError as exc:
    data = b""
print(len(data))
"""


class TestPeerCheck:
    def test_another_uid_is_closed_unanswered(self, short_dir: Path) -> None:
        """An abstract socket has no file mode: anyone may connect, so SO_PEERCRED decides. Another uid's
        connection is closed with no byte sent, counted and logged as a refusal; the owner's still works."""
        from tests.test_e2e_daemon import free_port

        port = free_port()
        daemon = start_daemon(short_dir, "--metrics-addr", f"127.0.0.1:{port}")
        try:
            with ControlClient(daemon.socket) as control:
                name = listen(control, "compat-peer").name
                result = subprocess.run(
                    ["/usr/bin/python3", "-c", _NOBODY_CONNECTS, name],
                    user=NOBODY.pw_uid, group=NOBODY.pw_gid, extra_groups=[], capture_output=True, text=True,
                    timeout=30,
                )  # fmt: skip
                assert result.returncode == 0, result.stderr
                assert result.stdout.strip() == "0"
                log = daemon.wait_for_log("compat connection refused")
                assert f"uid {NOBODY.pw_uid} connected to uid {os.getuid()}" in log
                assert "permission_denied" in log
                connect(name).close()
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            assert 'sanitizerd_rejected_connections_total{reason="permission_denied"} 1.0' in text
            assert "sanitizerd_compat_sockets_open 1.0" in text
        finally:
            assert stop_daemon(daemon) == 0, daemon.log_text()


class TestLimits:
    def test_per_uid_limit(self, short_dir: Path) -> None:
        """Past --max-compat-sockets-per-uid a request is refused (request_limit) and the connection serves on;
        closing a socket's control connection makes room."""
        running = start_daemon(short_dir, "--max-compat-sockets-per-uid", "2")
        try:
            first = ControlClient(running.socket)
            with ControlClient(running.socket) as control:
                assert listen(first, "compat-1").name
                assert listen(control, "compat-2").name
                third = listen(control, "compat-3")
                assert (third.name, third.reason) == ("", "request_limit")
                assert f"uid {os.getuid()} holds its limit of 2 msSanitizer-form sockets" in third.message
                assert isinstance(control.request(m.QuerySessions()), m.Sessions)
                first.close()
                assert wait_until(lambda: bool(listen(control, "compat-4").name))
            running.wait_for_log("compat socket refused")
        finally:
            assert stop_daemon(running) == 0, running.log_text()

    def test_limit_holds_under_concurrent_requests(self, short_dir: Path) -> None:
        """Twelve control connections asking at once: exactly the limit's worth of sockets open."""
        from concurrent.futures import ThreadPoolExecutor

        running = start_daemon(short_dir, "--max-compat-sockets-per-uid", "4")
        controls = [ControlClient(running.socket) for _ in range(12)]
        try:
            with ThreadPoolExecutor(len(controls)) as pool:
                answers = list(pool.map(lambda pair: listen(pair[1], f"compat-{pair[0]}"), enumerate(controls)))
            assert sum(bool(a.name) for a in answers) == 4, answers
            assert {a.reason for a in answers if not a.name} == {"request_limit"}
        finally:
            for control in controls:
                control.close()
            assert stop_daemon(running) == 0, running.log_text()

    def test_total_limit(self, short_dir: Path) -> None:
        running = start_daemon(short_dir, "--max-compat-sockets", "1")
        try:
            with ControlClient(running.socket) as control:
                assert listen(control, "compat-1").name
                answer = listen(control, "compat-2")
                assert answer.reason == "request_limit"
                assert "the daemon holds its limit of 1 msSanitizer-form sockets" in answer.message
        finally:
            assert stop_daemon(running) == 0, running.log_text()

    def test_holds_a_connection_of_its_uid(self, short_dir: Path) -> None:
        """A listening socket holds an fd: it counts as one of its uid's connections, so the fd budget the
        connection limits keep covers it; the slot comes back when the socket closes. (With worker processes the
        listener holds the sockets, and its fds are its own budget: the control connection is the worker's.)"""
        running = start_daemon(short_dir, "--max-connections-per-uid", "2")
        try:
            control = ControlClient(running.socket)  # one connection
            assert listen(control, "compat-1").name  # two
            if TEST_WORKERS > 1:
                assert listen(control, "compat-1").name  # the listener's second
            answer = control.request(m.CompatListen(job="compat-1", layout=layout_name()))
            assert isinstance(answer, m.CompatListening) and answer.reason == "connection_limit", answer
            assert "(a msSanitizer-form socket holds one)" in answer.message
            control.close()

            def fresh() -> bool:
                try:
                    with ControlClient(running.socket) as again:
                        return bool(listen(again, "compat-2").name)
                except Exception:
                    return False

            assert wait_until(fresh)
        finally:
            assert stop_daemon(running) == 0, running.log_text()

    def test_counts_against_the_connections_requests(self, short_dir: Path) -> None:
        """Each socket is state the control connection holds: with --max-control-requests 2, a job_start and one
        socket fill it, and the next compat_listen ends the connection (request_limit)."""
        from client_shim.transport import ClientError

        running = start_daemon(short_dir, "--max-control-requests", "2")
        try:
            with ControlClient(running.socket) as control:
                assert listen(control, "compat-1").name
                with pytest.raises(ClientError, match="request_limit"):
                    control.request(m.CompatListen(job="compat-1", layout=layout_name()))
        finally:
            assert stop_daemon(running) == 0, running.log_text()


def test_econnrefused_is_what_a_gone_socket_gives() -> None:
    """The hooks retry a refused connect (50 x 100 ms): a name nobody listens on is refused, not left hanging."""
    with pytest.raises(OSError) as caught:
        connect(socket_name(1, 0.0))
    assert caught.value.errno == errno.ECONNREFUSED


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


class TestSession:
    def test_connection_is_a_session_of_the_job_and_gets_the_config_first(self, daemon: RunningDaemon) -> None:
        """A client speaking msSanitizer's packets over the job's socket: the first bytes it reads are the job's
        Config struct in the layout's bytes, and it is a producer session of the job (``sanitizerd sessions``),
        ended when it disconnects."""
        from sanitizerd.compat import wire

        layout = wire.LAYOUTS[layout_name()]
        config = m.Config(tools=["memcheck", "racecheck"], cache_size=7)
        with ControlClient(daemon.socket) as control:
            control.send(m.JobStart(job="compat-session", config=config))
            answer = control.request(m.CompatListen(job="compat-session", layout=layout.name))
            assert isinstance(answer, m.CompatListening) and answer.name
            with connect(answer.name) as client:
                got = recv_exactly(client, layout.config.size)
                assert got == wire.encode_config(config, layout)
                summary = layout.device_summary.struct.pack(3, 0, 0, 5)  # a 910B1 chip, device 5
                client.sendall(wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.DEVICE_SUMMARY)) + summary)

                def live() -> list[m.SessionInfo]:
                    sessions = control.request(m.QuerySessions())
                    assert isinstance(sessions, m.Sessions)
                    return [s for s in sessions.sessions if s.job == "compat-session" and s.state == "live"]

                assert wait_until(lambda: bool(live()))
                (session,) = live()
                assert (session.pid, session.uid, session.tool) == (os.getpid(), os.getuid(), "mssanitizer")
                jobs = control.request(m.QueryJobs())
                assert isinstance(jobs, m.Jobs) and any(j.job == "compat-session" for j in jobs.jobs)
            assert wait_until(lambda: not live())

    def test_ipc_operations_are_answered_over_the_socket(self, daemon: RunningDaemon) -> None:
        """The hooks block on an IPC_RESPONSE after each IPC_RECORD: one the connection answers itself (an
        operation this release does not define: FAIL at once) and one the session answers both reach them."""
        from sanitizerd.compat import wire

        layout = wire.LAYOUTS[layout_name()]
        with ControlClient(daemon.socket) as control:
            name = listen(control, "compat-ipc").name
            with connect(name) as client:
                assert len(recv_exactly(client, layout.config.size)) == layout.config.size
                undefined = struct.pack("<I", 9).ljust(layout.ipc_mem_record_size, b"\0")
                client.sendall(wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.IPC_RECORD)) + undefined)
                assert recv_exactly(client, 12) == wire.encode_ipc_response(9, False, layout)
                export = wire.ipc_views(layout)[0].struct.pack(0, 0x12C0C0000000, 4096, b"buffer")
                client.sendall(wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.IPC_RECORD)) + export)
                answer = recv_exactly(client, 12)
                assert answer in (
                    wire.encode_ipc_response(0, True, layout),
                    wire.encode_ipc_response(0, False, layout),
                ), answer

    def test_a_slot_stalled_midway_meets_the_frame_timeout(self, short_dir: Path) -> None:
        """A KERNEL_RECORD slot streams to the decoder, so nothing may be buffered while it is half received: the
        connection's ``in_packet`` still puts the frame timeout (not the hour-long idle timeout) on it."""
        from sanitizerd.compat import wire

        layout = wire.LAYOUTS[layout_name()]
        running = start_daemon(short_dir, "--frame-timeout", "1")
        try:
            with ControlClient(running.socket) as control:
                name = listen(control, "compat-stall").name
                with connect(name, timeout=20) as client:
                    assert len(recv_exactly(client, layout.config.size)) == layout.config.size
                    length = layout.heads_size + (1 << 20)
                    head = wire.PACKET_HEAD.pack(
                        layout.packet_number(wire.PacketType.KERNEL_RECORD)
                    ) + wire.LENGTH.pack(length)
                    client.sendall(head + bytes(layout.heads_size + 4096))  # then nothing more
                    started = time.monotonic()
                    while client.recv(1 << 16):
                        pass
                    assert time.monotonic() - started < 10
            log = running.wait_for_log("frame_timeout")
            assert "compat-stall" in log
        finally:
            assert stop_daemon(running) == 0, running.log_text()


# A client as msSanitizer's is written in C: sockaddr_un zeroed, sun_path[0] = 0, the name copied after it, and
# connect() given sizeof(struct sockaddr_un) (110). Reads the Config the daemon writes first and prints its size.
_C_CLIENT = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path + 1, argv[1], sizeof(addr.sun_path) - 2);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        perror("connect");
        return 1;
    }
    char buffer[65536];
    long total = 0, got;
    while ((got = read(fd, buffer, sizeof(buffer))) > 0) {
        total += got;
        if (total >= atol(argv[2])) break;
    }
    printf("%zu %ld\n", sizeof(addr), total);
    close(fd);
    return 0;
}
"""


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler")
def test_a_c_client_connects_as_msSanitizers_does(daemon: RunningDaemon, tmp_path: Path) -> None:
    """The address a C client computes the way msSanitizer's does (the whole sockaddr_un) reaches the socket."""
    from sanitizerd.compat import wire

    source = tmp_path / "client.c"
    source.write_text(_C_CLIENT)
    binary = tmp_path / "client"
    subprocess.run(["cc", "-O1", "-o", str(binary), str(source)], check=True, capture_output=True, timeout=60)
    size = wire.LAYOUTS[layout_name()].config.size
    with ControlClient(daemon.socket) as control:
        name = listen(control, "compat-c").name
        result = subprocess.run([str(binary), name, str(size)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["110", str(size)]


def test_a_damaged_slot_is_its_kernels_finding_and_the_session_goes_on(short_dir: Path) -> None:
    """Through the daemon: a kernel whose record buffer the user program overwrote (securityVal) and whose other
    slot holds a record type no release defines is answered as the hooks expect; each problem is one internal_error
    of that kernel (msSanitizer's text for the security value), counted in ``sanitizerd_kernel_problems_total``;
    the next kernel of the same connection is checked as usual (its illegal read reported)."""
    from sanitizerd.compat import wire
    from tests import compat_model as cm
    from tests.test_e2e_daemon import free_port

    layout = wire.LAYOUTS[layout_name()]
    port = free_port()
    daemon = start_daemon(short_dir, "--metrics-addr", f"127.0.0.1:{port}")

    def summary(name: bytes) -> bytes:
        payload = bytearray(layout.kernel_summary.size)
        struct.pack_into("<QIB", payload, 0, 0, 1, 1)
        payload[15 : 15 + len(name)] = name
        return wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.KERNEL_SUMMARY)) + bytes(payload)

    def record_packet(body: bytes) -> bytes:
        return (
            wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.KERNEL_RECORD))
            + wire.LENGTH.pack(len(body))
            + body
        )

    def response(client: socket.socket) -> bytes:
        return recv_exactly(client, 12)

    # A DataCopy reading 256 bytes of GM that no allocation holds: an illegal read, in block 0.
    dma = struct.pack("<IQQ", 100, 0x0, 0x12C0C0000000) + struct.pack("<QQQH6x", 0, 0, 0x10, 0)
    dma += struct.pack("<HHHHBBBB4x", 1, 8, 0, 0, 4, 6, 0, 0)  # nBurst 1 of 8 blocks, GM -> UB
    try:
        with ControlClient(daemon.socket) as control:
            control.send(m.JobStart(job="compat-damaged", config=m.Config(tools=["memcheck"])))
            name = listen(control, "compat-damaged").name
            with connect(name, timeout=30) as client:
                assert len(recv_exactly(client, layout.config.size)) == layout.config.size
                client.sendall(
                    summary(b"damaged_kernel")
                    + record_packet(cm.slot([dma], total_block_dim=2, security=0x1234))
                    + record_packet(cm.slot([struct.pack("<I", 99_999) + bytes(60)], total_block_dim=2))
                )
                assert response(client) == struct.pack("<III", 3001, 2, 0)
                client.sendall(summary(b"good_kernel") + record_packet(cm.slot([dma], total_block_dim=1)))
                assert response(client) == struct.pack("<III", 3001, 1, 0)
            query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", "compat-damaged", "--format=json")
            assert query.returncode == 0, query.stderr
            found = json.loads(query.stdout)
            damaged = [f for f in found if f["kernel"] == "damaged_kernel"]
            assert sorted(f["kind"] for f in damaged) == ["internal_error", "internal_error"]
            details = " | ".join(f["detail"] for f in damaged)
            assert "The record address has been changed by the user program" in details
            assert "99999" in details
            assert [f["kind"] for f in found if f["kernel"] == "good_kernel"] == ["illegal_read"]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert re.search(r"^sanitizerd_kernel_problems_total 2\.0$", text, re.M), text
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()
