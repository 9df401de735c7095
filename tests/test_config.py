"""The daemon's configuration file, the command line over it, and SIGHUP reloading limits and log level."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import time
from pathlib import Path

import pytest

from client_shim.client import Client
from client_shim.transport import ClientError
from sanitizerd import config
from sanitizerd.sessions.hub import Limits
from tests.conftest import RunningDaemon, sanitizerd, start_daemon, stop_daemon


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
            ("[limits]\nmax_sesions = 3\n", "unknown setting limits.max_sesions"),
            ("colour = 'blue'\n", "unknown setting colour"),
            ("log_level = 'loud'\n", "log_level must be one of debug, info, warning, error; got 'loud'"),
            ("[limits]\nqueue_depth = 0\n", "limits.queue_depth must be an integer from 1 to 1024; got 0"),
            ("[limits]\nqueue_depth = 0.5\n", "limits.queue_depth must be an integer from 1 to 1024; got 0.5"),
            ("[limits]\nqueue_depth = true\n", "limits.queue_depth must be an integer from 1 to 1024; got True"),
            ("[limits]\ndetector_threads = 1.5\n", "limits.detector_threads must be an integer from 1 to 256"),
            ("[limits]\nmax_sessions = '9'\n", "limits.max_sessions must be an integer"),
            ("[limits]\nhandshake_timeout = 0\n", "limits.handshake_timeout must be seconds, more than 0"),
            ("[limits]\ndrain_timeout = inf\n", "limits.drain_timeout must be seconds, more than 0 and at most 3600"),
            ("[limits]\njob_grace = nan\n", "limits.job_grace must be seconds"),
            ("[limits]\nmax_frame_size = 100\n", "limits.max_frame_size must be an integer from 256 to"),
            ("[limits]\nadmin_groups = ['no-such-group-here']\n", "limits.admin_groups: there is no group named"),
            ("[limits]\nadmin_groups = 'root'\n", "limits.admin_groups: Expected `array`, got `str`"),
            ("limits = 3\n", "limits: Expected `object`, got `int`"),
            ("socket = 5\n", "socket: Expected `str`, got `int`"),
            ("metrics_addr = '::1:9464'\n", "metrics_addr: '::1:9464': an IPv6 host goes in brackets"),
            ("metrics_addr = 'localhost:0'\n", "metrics_addr: the port in 'localhost:0' must be a number from 1"),
            ("metrics_addr = 'a b:80'\n", "metrics_addr: 'a b' is not a host name or an IPv4 address"),
            ("[limits\n", "Expected"),
        ],
    )
    def test_a_bad_file_is_refused_by_name(self, tmp_path: Path, text: str, complaint: str) -> None:
        with pytest.raises(config.ConfigError, match=r"c\.toml") as raised:
            config.read(write(tmp_path / "c.toml", text))
        assert complaint in str(raised.value)

    def test_not_a_regular_file_or_too_large(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "fifo")
        for path, complaint in (
            (tmp_path / "fifo", "not a regular file"),
            (Path("/dev/zero"), "not a regular file"),
            (tmp_path / "none.toml", "no such file"),
            (write(tmp_path / "big.toml", "# x\n" * (1 << 19)), "larger than 1048576 bytes"),
        ):
            with pytest.raises(config.ConfigError, match=re.escape(f"{path}: {complaint}")):
                config.read(path)

    def test_types_and_units(self, tmp_path: Path) -> None:
        """An integer duration is seconds as a float; IPv6 metrics addresses are taken in brackets."""
        file = config.read(write(tmp_path / "c.toml", "metrics_addr = '[::1]:9464'\n[limits]\nhandshake_timeout = 2\n"))
        assert file.top == {"metrics_addr": "[::1]:9464"}
        assert file.limits == {"handshake_timeout": 2.0} and isinstance(file.limits["handshake_timeout"], float)

    def test_admin_groups_by_name_or_number(self, tmp_path: Path) -> None:
        file = config.read(write(tmp_path / "c.toml", "[limits]\nadmin_groups = ['root', 4]\n"))
        assert config.limits(file, {}).admin_gids == frozenset({0, 4})


class TestCommandLine:
    @pytest.mark.parametrize(
        ("name", "text", "value"),
        [("queue_depth", "3", 3), ("handshake_timeout", "0.5", 0.5), ("max_frame_size", "256", 256)],
    )
    def test_a_good_value_is_taken_with_its_type(self, name: str, text: str, value: float) -> None:
        parsed = config.command_line_value(name)(text)
        assert parsed == value and type(parsed) is type(value)

    @pytest.mark.parametrize(
        ("name", "text"),
        [("queue_depth", "0.5"), ("queue_depth", "0"), ("queue_depth", "1025"), ("detector_threads", "1.5"),
         ("handshake_timeout", "0"), ("handshake_timeout", "nan"), ("drain_timeout", "inf"), ("max_sessions", "-1"),
         ("max_sessions", "many")],
    )  # fmt: skip
    def test_a_bad_value_is_refused_with_its_range(self, name: str, text: str) -> None:
        with pytest.raises(argparse.ArgumentTypeError, match=f"must be .*; got {text!r}"):
            config.command_line_value(name)(text)

    def test_every_numeric_limit_has_a_file_key_a_flag_and_a_range(self, tmp_path: Path) -> None:
        """Limits is the one list: each int or float field is read from the file and from a flag, each checked."""
        numeric = {f.name for f in dataclasses.fields(Limits) if f.type in ("int", "float", int, float)}
        assert set(config.numeric_limits()) == numeric
        for name in numeric:
            with pytest.raises(config.ConfigError, match=f"limits.{name} must be"):
                config.read(write(tmp_path / "c.toml", f"[limits]\n{name} = -1\n"))
            with pytest.raises(argparse.ArgumentTypeError):
                config.command_line_value(name)("-1")
        usage = sanitizerd("serve", "--help").stdout
        assert all(f"--{name.replace('_', '-')}" in usage for name in numeric)

    def test_every_default_is_in_its_range(self) -> None:
        """A default the file or the command line could not set is a table out of step with Limits."""
        for name in config.numeric_limits():
            default = getattr(Limits(), name)
            assert config.command_line_value(name)(str(default)) == default, name

    def test_every_limit_is_documented(self) -> None:
        assert config.__doc__ is not None
        for name in config.numeric_limits():
            assert f"``{name}``\n    " in config.__doc__, f"say what limits.{name} means in sanitizerd/config.py"
            assert name in config.LIMITS, f"give limits.{name} its range and help in config.LIMITS"

    def test_a_reload_keeps_what_is_fixed_at_start(self, tmp_path: Path) -> None:
        file = config.read(write(tmp_path / "c.toml", "[limits]\ndetector_threads = 7\nqueue_depth = 9\n"))
        after = config.reloaded(Limits(detector_threads=2), file, {})
        assert (after.detector_threads, after.queue_depth) == (2, 9)


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


def test_the_default_file_moves_with_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moved = write(tmp_path / "host.toml", "[limits]\nqueue_depth = 9\n")
    monkeypatch.setenv("SANITIZERD_CONFIG", str(moved))
    assert config.read(None).path == moved and config.read(None).limits["queue_depth"] == 9
    monkeypatch.setenv("SANITIZERD_CONFIG", str(tmp_path / "absent.toml"))
    assert config.read(None).path is None  # as /etc/sanitizerd/sanitizerd.toml: read only where it exists
