"""Finding the right daemon safely: a private daemon's directory is its user's alone, a client skips one that is
not and trusts only a daemon run by root, the service user or itself, and an explicit socket never falls back.

A temporary directory stands in for /tmp; the other user is ``nobody``."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from client_shim import discovery
from client_shim.discovery import (
    Candidate,
    UnsafeDirectory,
    candidates,
    make_private_directory,
    private_socket_path,
    secure_private_socket_directory,
)
from client_shim.transport import NoDaemon, Untrusted, connect_unix, discover
from tests.conftest import ROOT, sanitizerd
from tests.other_uid import NOBODY

ME = os.geteuid()


def listen(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    return server


def test_the_private_socket_is_under_the_runtime_dir_or_in_a_directory_of_ones_own(tmp_path: Path) -> None:
    assert private_socket_path(1000, {"XDG_RUNTIME_DIR": "/run/user/1000"}, tmp=tmp_path) == Path(
        "/run/user/1000/sanitizerd/sanitizerd.sock"
    )
    assert private_socket_path(1000, {}, tmp=tmp_path) == tmp_path / "sanitizerd-1000" / "sanitizerd.sock"
    assert discovery.default_socket_path(0, {}) == discovery.SYSTEM_SOCKET


def test_the_host_socket_moves_with_its_variable(tmp_path: Path) -> None:
    moved = {"SANITIZERD_HOST_SOCKET": str(tmp_path / "host.sock")}
    assert discovery.default_socket_path(0, moved) == tmp_path / "host.sock"  # where root's daemon listens
    assert candidates(ME, moved, tmp=tmp_path)[0].path == tmp_path / "host.sock"  # where every client looks first
    assert candidates(ME, {}, tmp=tmp_path)[0].path == discovery.SYSTEM_SOCKET


def test_the_suite_never_looks_for_the_hosts_daemon() -> None:
    """tests/conftest.py moves the host's socket and the private one into the suite's own directory: a daemon on
    this host (root's /run/sanitizerd, the user's own) never receives the suite's sessions."""
    looked = [c.path for c in candidates()]
    assert discovery.SYSTEM_SOCKET not in looked, looked
    assert all(Path(os.environ["XDG_RUNTIME_DIR"]) in p.parents or p == discovery.host_socket_path() for p in looked)
    assert "SANITIZERD_SOCKET" not in os.environ and "SANITIZERD_JOB" not in os.environ


def test_a_private_directory_is_made_0700(tmp_path: Path) -> None:
    directory = tmp_path / f"sanitizerd-{ME}"
    make_private_directory(directory)
    st = directory.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (ME, 0o700)
    make_private_directory(directory)  # ours already: accepted as it is


def test_a_directory_another_user_made_first_is_refused(tmp_path: Path) -> None:
    """The /tmp attack: nobody creates /tmp/sanitizerd-<uid> first, to listen there."""
    directory = tmp_path / f"sanitizerd-{ME}"
    directory.mkdir(mode=0o777)
    os.chown(directory, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(UnsafeDirectory, match=f"belongs to uid {NOBODY.pw_uid}"):
        make_private_directory(directory)
    with pytest.raises(UnsafeDirectory):  # the daemon refuses it for its default socket
        secure_private_socket_directory(directory / "sanitizerd.sock", ME, {}, tmp=tmp_path)
    assert directory.lstat().st_uid == NOBODY.pw_uid  # and leaves it as it was


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777])
def test_a_directory_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(UnsafeDirectory, match="writable by others"):
        make_private_directory(directory)


def test_a_symbolic_link_is_refused_even_to_ones_own_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafeDirectory, match="not a directory"):
        make_private_directory(tmp_path / "link")


def test_the_daemon_leaves_a_socket_the_operator_chose_alone(tmp_path: Path) -> None:
    chosen = tmp_path / "shared"
    chosen.mkdir()
    chosen.chmod(0o777)
    secure_private_socket_directory(chosen / "s.sock", ME, {}, tmp=tmp_path)  # not the private path: no check


def test_clients_try_the_hosts_daemon_first_and_distrust_a_private_directory_of_another_user(tmp_path: Path) -> None:
    system = tmp_path / "run" / "sanitizerd.sock"
    found = candidates(ME, {}, system=system, tmp=tmp_path)
    assert [c.path for c in found] == [system, tmp_path / f"sanitizerd-{ME}" / "sanitizerd.sock"]
    assert [c.distrust for c in found] == ["", ""]
    private = tmp_path / f"sanitizerd-{ME}"
    private.mkdir(mode=0o700)
    os.chown(private, NOBODY.pw_uid, NOBODY.pw_gid)
    assert "belongs to uid" in candidates(ME, {}, system=system, tmp=tmp_path)[1].distrust


def test_discovery_skips_a_listener_in_another_users_directory(tmp_path: Path) -> None:
    system, private = tmp_path / "run.sock", tmp_path / f"sanitizerd-{ME}"
    private.mkdir(mode=0o700)
    server = listen(private / "sanitizerd.sock")
    try:
        os.chown(private, NOBODY.pw_uid, NOBODY.pw_gid)
        with pytest.raises(NoDaemon) as refused:
            discover(timeout=2, among=candidates(ME, {}, system=system, tmp=tmp_path))
        assert refused.value.distrusted and "belongs to uid" in refused.value.distrusted[0]
        os.chown(private, ME, -1)  # the same directory, ours: used
        sock, path = discover(timeout=2, among=candidates(ME, {}, system=system, tmp=tmp_path))
        sock.close()
        assert path == str(private / "sanitizerd.sock")
    finally:
        server.close()


def test_the_hosts_daemon_wins_over_a_private_one(tmp_path: Path) -> None:
    system = tmp_path / "system.sock"
    private = tmp_path / f"sanitizerd-{ME}"
    make_private_directory(private)
    servers = [listen(system), listen(private / "sanitizerd.sock")]
    try:
        sock, path = discover(timeout=2, among=candidates(ME, {}, system=system, tmp=tmp_path))
        sock.close()
        assert path == str(system)
    finally:
        for server in servers:
            server.close()


NOBODY_LISTENS = r"""
import socket, sys, time
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen()
print("listening", flush=True)
time.sleep(30)
"""


def test_a_daemon_run_by_another_user_is_not_trusted(short_dir: Path) -> None:
    """Whatever the path, the client checks who listens (SO_PEERCRED) before it sends anything."""
    short_dir.chmod(0o755)
    theirs = short_dir / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    script = short_dir / "listen.py"
    script.write_text(NOBODY_LISTENS)
    script.chmod(0o644)
    listener = subprocess.Popen(
        ["/usr/bin/python3", str(script), str(theirs / "s.sock")],
        user=NOBODY.pw_uid, group=NOBODY.pw_gid, extra_groups=[], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == "listening"
        with pytest.raises(Untrusted, match=f"runs as uid {NOBODY.pw_uid}"):
            connect_unix(str(theirs / "s.sock"), timeout=2)
    finally:
        listener.kill()
        listener.communicate()
    mine = listen(short_dir / "mine.sock")  # our own listener is trusted
    try:
        connect_unix(str(short_dir / "mine.sock"), timeout=2).close()
    finally:
        mine.close()


def test_a_first_connect_waits_briefly_for_the_socket_to_appear(tmp_path: Path) -> None:
    path = tmp_path / "late.sock"
    servers: list[socket.socket] = []
    appear = threading.Timer(0.3, lambda: servers.append(listen(path)))
    appear.start()
    started = time.monotonic()
    try:
        connect_unix(str(path), timeout=2).close()
    finally:
        appear.join()
        for server in servers:
            server.close()
    assert 0.2 < time.monotonic() - started < 1.5


def test_the_daemon_refuses_a_private_directory_another_user_made(short_dir: Path) -> None:
    runtime = short_dir / "xdg"
    (runtime / "sanitizerd").mkdir(parents=True)
    os.chown(runtime / "sanitizerd", NOBODY.pw_uid, NOBODY.pw_gid)
    socket_path = runtime / "sanitizerd" / "sanitizerd.sock"
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime))
    result = subprocess.run(
        [sys.executable, "-m", "sanitizerd", "serve", "--socket", str(socket_path), "--state-dir",
         str(short_dir / "state"), "--workers", "1"],
        capture_output=True, text=True, timeout=60, env=env, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 1, result
    output = result.stdout + result.stderr
    assert "belongs to uid" in output and "Traceback" not in output, output
    assert not socket_path.exists()


def test_run_with_an_explicit_socket_never_falls_back(short_dir: Path) -> None:
    missing, ran = short_dir / "absent.sock", short_dir / "ran"
    program = f"open({str(ran)!r}, 'w')"
    result = sanitizerd("run", "--socket", str(missing), "--", sys.executable, "-c", program, timeout=60)
    assert result.returncode == 1, result
    assert "--socket given" in result.stderr and str(missing) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not ran.exists()  # no private daemon took its place, and the program did not run unchecked


def test_discovery_without_candidates_says_what_it_tried(tmp_path: Path) -> None:
    with pytest.raises(NoDaemon, match="does not exist"):
        discover(timeout=1, among=[Candidate(tmp_path / "none.sock")])
