"""The daemon's configuration file, the command line over it, and SIGHUP reloading limits and log level."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from client_shim.client import Client
from client_shim.transport import ClientError
from sanitizerd import config
from sanitizerd.sessions.hub import Limits
from tests.conftest import RunningDaemon, start_daemon, stop_daemon


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


class TestFile:
    def test_defaults_then_file_then_command_line(self, tmp_path: Path) -> None:
        file = config.read(
            write(tmp_path / "c.toml", "log_level = 'warning'\n[limits]\nmax_sessions = 7\nqueue_depth = 2\n")
        )
        limits = config.limits(file, {"queue_depth": 9, "max_frame_size": None})
        assert (limits.max_sessions, limits.queue_depth, limits.max_frame_size) == (7, 9, Limits().max_frame_size)
        assert file.top == {"log_level": "warning"}

    @pytest.mark.parametrize(
        ("text", "complaint"),
        [
            ("[limits]\nmax_sesions = 3\n", "unknown setting(s) limits.max_sesions"),
            ("colour = 'blue'\n", "unknown setting(s) colour"),
            ("log_level = 'loud'\n", "log_level must be one of"),
            ("[limits]\nqueue_depth = 0\n", "limits.queue_depth must be a positive number"),
            ("[limits\n", "Expected"),
        ],
    )
    def test_a_bad_file_is_refused_by_name(self, tmp_path: Path, text: str, complaint: str) -> None:
        with pytest.raises(config.ConfigError, match=r"c\.toml") as raised:
            config.read(write(tmp_path / "c.toml", text))
        assert complaint in str(raised.value)

    def test_admin_groups_by_name_or_number(self, tmp_path: Path) -> None:
        file = config.read(write(tmp_path / "c.toml", "[limits]\nadmin_groups = ['root', 4]\n"))
        assert config.limits(file, {}).admin_gids == frozenset({0, 4})


def connect(socket: Path, job: str) -> Client:
    return Client(socket, job=job, timeout=10)


def reload(daemon: RunningDaemon, path: Path, text: str, logged: str) -> None:
    """Rewrite the config file, SIGHUP the daemon, and wait until it logs ``logged``."""
    write(path, text)
    daemon.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while logged not in daemon.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert logged in daemon.log_text()


def test_sighup_reloads_limits_and_the_command_line_still_wins(short_dir: Path) -> None:
    """max_sessions 1 from the file refuses a second session; after the file says 3 and SIGHUP, it is accepted;
    the per-uid limit from the command line (2) is kept through the reload and refuses a third."""
    path = write(short_dir / "sanitizerd.toml", "[limits]\nmax_sessions = 1\n")
    daemon = start_daemon(short_dir, "--config", str(path), "--max-sessions-per-uid", "2")
    clients = []
    try:
        clients.append(connect(daemon.socket, "a"))
        with pytest.raises(ClientError, match="session_limit"):
            connect(daemon.socket, "b")
        reload(daemon, path, "log_level = 'warning'\n[limits]\nmax_sessions = 3\n", '"reloaded"')
        assert "max_sessions=3" in daemon.log_text()
        clients.append(connect(daemon.socket, "b"))
        with pytest.raises(ClientError, match="uid 0 has its limit of 2 live sessions"):
            connect(daemon.socket, "c")
    finally:
        for client in clients:
            client.close()
        assert stop_daemon(daemon) == 0


def test_a_broken_file_on_sighup_changes_nothing(short_dir: Path) -> None:
    path = write(short_dir / "sanitizerd.toml", "[limits]\nmax_sessions = 1\n")
    daemon = start_daemon(short_dir, "--config", str(path))
    try:
        reload(daemon, path, "[limits\n", "reload failed; settings unchanged")
        client = connect(daemon.socket, "a")
        with pytest.raises(ClientError, match="session_limit"):
            connect(daemon.socket, "b")
        client.close()
    finally:
        assert stop_daemon(daemon) == 0
