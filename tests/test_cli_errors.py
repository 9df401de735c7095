"""The CLI says what is wrong in one line and exits non-zero, never with a traceback, for every expected condition:
bad settings (command line or file), a port in use, a state directory that is read-only or full, an unknown admin
group, a refusal by the daemon. Each runs the real ``sanitizerd`` command."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, RunningDaemon, sanitizerd, start_daemon, stop_daemon


def refused(result: subprocess.CompletedProcess[str], message: str, *, code: int) -> None:
    """The command failed with ``code``, said ``message``, and printed no traceback."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode == code, output
    assert message in result.stderr, output


def refused_at_start(result: subprocess.CompletedProcess[str], message: str) -> None:
    """A daemon that cannot start says why in exactly one line."""
    refused(result, message, code=1)
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert result.stderr.startswith("sanitizerd: cannot start: "), result.stderr


def serve(base: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    paths = ("--socket", str(base / "s.sock"), "--state-dir", str(base / "state"))
    return sanitizerd("serve", *paths, "--workers", "1", *extra, timeout=60)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def mounted_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A small file system of our own (tests run as root); skipped where mounting is not allowed."""
    where.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


class TestServeSettings:
    @pytest.mark.parametrize(
        ("flags", "message"),
        [
            (["--queue-depth", "0.5"], "argument --queue-depth: must be an integer from 1 to 1024; got '0.5'"),
            (["--detector-threads", "1.5"], "argument --detector-threads: must be an integer from 1 to 256"),
            (["--handshake-timeout", "-1"], "argument --handshake-timeout: must be seconds, more than 0"),
            (["--metrics-addr", "::1:9464"], "argument --metrics-addr: '::1:9464': an IPv6 host goes in brackets"),
            (["--metrics-addr", "127.0.0.1"], "argument --metrics-addr: '127.0.0.1' is not HOST:PORT"),
            (["--metrics-addr", "[::1]:70000"], "the port in '[::1]:70000' must be a number from 1 to 65535"),
            (["--metrics-addr", "[nope]:1"], "argument --metrics-addr: '[nope]' is not an IPv6 address"),
            (["--admin-group", "no-such-group-here"], "argument --admin-group: there is no group named"),
            (["--socket", "/tmp/" + "s" * 120], "argument --socket: a socket path is 1 to 107 bytes"),
        ],
    )
    def test_a_bad_flag_is_refused_by_name(self, short_dir: Path, flags: list[str], message: str) -> None:
        result = serve(short_dir, *flags)
        refused(result, message, code=2)
        assert not (short_dir / "state").exists()  # refused before anything was made

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("[limits]\nqueue_depth = 0.5\n", "limits.queue_depth must be an integer from 1 to 1024; got 0.5"),
            ("[limits]\ndetector_threads = 1.5\n", "limits.detector_threads must be an integer from 1 to 256"),
            ("[limits]\nadmin_groups = ['no-such-group-here']\n", "limits.admin_groups: there is no group named"),
            ("metrics_addr = 'localhost'\n", "metrics_addr: 'localhost' is not HOST:PORT"),
            ("[limits]\nqueue_dpth = 2\n", "unknown setting limits.queue_dpth"),
        ],
    )
    def test_a_bad_file_is_refused_by_name(self, short_dir: Path, text: str, message: str) -> None:
        path = short_dir / "sanitizerd.toml"
        path.write_text(text)
        result = serve(short_dir, "--config", str(path))
        refused(result, f"sanitizerd: {path}: {message}", code=2)
        assert result.stderr.strip().count("\n") == 0

    def test_a_missing_config_file(self, short_dir: Path) -> None:
        refused(
            serve(short_dir, "--config", str(short_dir / "none.toml")),
            "none.toml: no such file",
            code=2,
        )


class TestStart:
    def test_metrics_port_in_use(self, short_dir: Path) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            result = serve(short_dir, "--metrics-addr", f"127.0.0.1:{port}")
        refused_at_start(result, f"metrics on 127.0.0.1:{port}: Address already in use")
        assert not (short_dir / "s.sock").exists()

    def test_ipv6_metrics_address_is_served(self, short_dir: Path) -> None:
        if not socket.has_ipv6:
            pytest.skip("no IPv6")
        port = free_port()
        daemon = start_daemon(short_dir, "--metrics-addr", f"[::1]:{port}")
        try:
            assert urllib.request.urlopen(f"http://[::1]:{port}/healthz", timeout=10).read() == b"ok\n"
        finally:
            assert stop_daemon(daemon) == 0

    def test_metrics_host_that_does_not_resolve(self, short_dir: Path) -> None:
        result = serve(short_dir, "--metrics-addr", "no-such-host.invalid:9464")
        refused_at_start(result, "metrics on no-such-host.invalid:9464: cannot resolve 'no-such-host.invalid'")

    def test_socket_directory_cannot_be_made(self, short_dir: Path) -> None:
        (short_dir / "file").write_text("")
        result = sanitizerd("serve", "--socket", str(short_dir / "file/s.sock"), "--state-dir", str(short_dir / "st"))
        refused_at_start(result, f"the socket {short_dir}/file/s.sock: {short_dir}/file: File exists")

    def test_state_directory_on_a_read_only_file_system(self, short_dir: Path) -> None:
        with mounted_tmpfs(short_dir / "ro", "1m") as state:
            subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
            result = sanitizerd("serve", "--socket", str(short_dir / "s.sock"), "--state-dir", str(state))
            refused_at_start(result, f"the state directory {state} is on a read-only file system")
            result = sanitizerd("serve", "--socket", str(short_dir / "s.sock"), "--state-dir", str(state / "sub"))
            refused_at_start(result, f"the state directory {state}/sub: Read-only file system")

    def test_state_directory_full(self, short_dir: Path) -> None:
        with mounted_tmpfs(short_dir / "full", "4m") as state:
            with contextlib.suppress(OSError), open(state / "filler", "wb") as filler:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            result = sanitizerd("serve", "--socket", str(short_dir / "s.sock"), "--state-dir", str(state))
            refused_at_start(result, f"the state directory {state} is full (0 bytes free)")

    def test_state_directory_not_writable(self, short_dir: Path) -> None:
        """As the service user would be: another uid's directory (the CLI runs as nobody, with read access)."""
        _can_be_nobody()
        short_dir.chmod(0o755)
        state, run_dir = short_dir / "state", short_dir / "run"
        state.mkdir(mode=0o755)
        run_dir.mkdir()
        os.chown(run_dir, 65534, 65534)
        result = subprocess.run(
            [*_AS_NOBODY, sys.executable, "-m", "sanitizerd", "serve", "--socket", str(run_dir / "s.sock"),
             "--state-dir", str(state), "--workers", "1"],
            capture_output=True, text=True, timeout=60, cwd=ROOT, env=_nobody_env(short_dir),
        )  # fmt: skip
        refused_at_start(result, f"the state directory {state} is not writable by uid 65534")


# nobody, keeping read access to files (the venv lives under /root): the daemon then sees a uid that is not root
# and not an admin, and the CLI runs unchanged.
_AS_NOBODY = [
    "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=+dac_read_search",
    "--ambient-caps=+dac_read_search",
]  # fmt: skip


def _can_be_nobody() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the CLI as another user")


def _nobody_env(home: Path) -> dict[str, str]:
    return dict(os.environ, HOME=str(home), PYTHONPATH=str(ROOT), XDG_RUNTIME_DIR=str(home))


def as_nobody(daemon: RunningDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_AS_NOBODY, sys.executable, "-m", "sanitizerd", *args, "--socket", str(daemon.socket)],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=_nobody_env(daemon.state_dir.parent),
    )  # fmt: skip


class TestQueries:
    def test_another_users_job_or_session_answers_as_one_that_does_not_exist(
        self, daemon: RunningDaemon, short_dir: Path
    ) -> None:
        """Another user's job or session: the same output and exit code as a job or session nobody has (a refusal
        would tell that it exists); their own lists: answered, without the other user's."""
        _can_be_nobody()
        short_dir.chmod(0o755)
        os.chown(daemon.socket, -1, 65534)  # the service's group would be nobody's here
        run = sanitizerd(
            "run", "--socket", str(daemon.socket), "--", sys.executable, str(ROOT / "examples/add_custom.py")
        )
        job = re.search(r"SUMMARY: job (\S+):", run.stdout).group(1)  # type: ignore[union-attr]
        for theirs, none in (
            (["--job", job], ["--job", "no-such-job"]),
            (["--session", "1"], ["--session", "1000000"]),
            (["--job", job, "--format", "json"], ["--job", "no-such-job", "--format", "json"]),
        ):
            result, nothing = as_nobody(daemon, "findings", *theirs), as_nobody(daemon, "findings", *none)
            assert (result.returncode, result.stdout, result.stderr) == (0, nothing.stdout, nothing.stderr), theirs
            assert result.stdout.strip() in ("[sanitizerd] 0 finding(s)", "[]"), result.stdout
        for listing in ("sessions", "jobs"):
            result = as_nobody(daemon, listing)
            assert result.returncode == 0 and "Traceback" not in result.stderr and job not in result.stdout

    @pytest.mark.parametrize("command", ["findings", "sessions", "jobs"])
    def test_no_daemon(self, short_dir: Path, command: str) -> None:
        result = sanitizerd(command, "--socket", str(short_dir / "none.sock"))
        refused(result, f"[sanitizerd] ERROR: cannot connect to sanitizerd at {short_dir}/none.sock", code=1)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "--bogus", "--", "true"], "unrecognized option '--bogus'"),
        (["run", "--leak-chek=yes", "--", "true"], "did you mean '--leak-check'?"),
        (["run", "-t"], "option requires an argument -- 't'"),
    ],
)
def test_an_unknown_run_option_is_one_line(argv: list[str], says: str) -> None:
    """`run --bogus` once printed getopt's line, "unrecognized command" and the whole help; now one line says it."""
    result = sanitizerd(*argv)
    refused(result, says, code=1)
    assert result.stderr.strip().count("\n") == 0 and result.stdout == "", result.stderr
    assert result.stderr.rstrip().endswith("(sanitizerd run --help lists the options)")


@pytest.mark.parametrize("command", ["serve", "replay", "findings", "sessions", "jobs"])
def test_every_option_has_help_text(command: str) -> None:
    """Each option of each command says what it does (`--help` lists none without words)."""
    text = sanitizerd(command, "--help").stdout
    options = re.findall(r"^  (-[-\w, ]+?)(?:  +(\S.*))?$", text, re.M)
    assert options, text
    # An option whose help does not fit beside it is followed by an indented line: its help.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^  -", line) and not re.search(r"\S  +\S", line.strip()):
            assert i + 1 < len(lines) and re.match(r"^ {10,}\S", lines[i + 1]), f"{command}: {line!r} has no help"


@pytest.mark.parametrize(
    "args",
    [("run", "--help"), ("serve", "--help"), ("findings", "--help"), ("--version",), ("jobs", "--help")],
    ids=lambda a: " ".join(a),
)
def test_output_to_a_reader_that_left_ends_quietly(args: tuple[str, ...]) -> None:
    """``sanitizerd … | head``: the reader has gone before anything is written (its end of the pipe is closed
    first, so every write fails): no traceback; exit 1, as a pipe's writer ends (argparse's own help and version
    text ignore a write that fails, and exit 0)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sanitizerd", *args], stdout=write, stderr=subprocess.PIPE, text=True,
            cwd=ROOT, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == (1 if args[0] == "run" else 0), done.stderr


def test_a_run_whose_reader_left_still_checks_and_keeps_its_status(tmp_path: Path) -> None:
    """The demo's reports to a reader that has gone: the run goes on to the end quietly and its exit status still
    says the program failed its checks (--error-exitcode), and --report still holds every finding."""
    read, write = os.pipe()
    os.close(read)
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "SANITIZERD_SOCKET"}
    env["XDG_RUNTIME_DIR"] = str(tmp_path)  # no daemon of the host's or the user's: a private one
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sanitizerd", "run", "--error-exitcode", "7", "--report", str(report),
             "--report-format", "json", "-t", "memcheck", "--leak-check", "yes", "--", sys.executable,
             str(ROOT / "examples" / "add_custom.py")],
            stdout=write, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120, env=env,
        )  # fmt: skip
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (1, 7), done.stderr
    assert {"illegal_read", "misaligned_access", "illegal_free", "memory_leak"} <= {
        f["kind"] for f in __import__("json").loads(report.read_text())
    }
