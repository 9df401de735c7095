"""msSanitizer's hook libraries: found, chosen, identified and preloaded as its launcher does (sanitizerd/cli/hooks.py).

A fake CANN install in tmp_path: empty .so files (never loaded: the program run under them is ``env``, whose output
shows the environment it got), a ``version.info``, and an ``mssanitizer.bin`` holding a commit string.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from sanitizerd.cli import hooks
from tests.conftest import RunningDaemon, sanitizerd

pytestmark = pytest.mark.first_pass_only("the preload environment of `sanitizerd run`: not the worker shape")

COMMIT = hooks.RELEASES[0].commit
LAYOUT = hooks.RELEASES[0].layout
ALL_HOOKS = (*hooks.KERNEL_HOOKS, *hooks.DEVICE_HEAP_HOOKS, *hooks.CANN_HEAP_HOOKS)


def with_string(text: str) -> bytes:
    """Bytes holding ``text`` as the compiler leaves a string literal: among other bytes, NUL-terminated."""
    return b"\x7fELF" + os.urandom(64).replace(b"\0", b"\1") + b"\0revision\0" + text.encode() + b"\0tail"


def cann_tree(  # type: ignore[no-untyped-def]
    root: Path,
    *,
    version: str | None = "26.0.0",
    commit: str | None = COMMIT,
    injection: str | None = None,
    libs=ALL_HOOKS,
) -> Path:
    """An install as msSanitizer's package lays it out; returns its ``tools/mssanitizer/lib64``. The libraries are
    empty, but for the injection library's revision string when ``injection`` is given."""
    lib = root / "tools" / "mssanitizer" / "lib64"
    lib.mkdir(parents=True)
    for name in libs:
        (lib / name).write_bytes(b"")
    if injection is not None:
        (lib / hooks.KERNEL_HOOKS[0]).write_bytes(with_string(injection))
    (root / "tools" / "mssanitizer" / "bin").mkdir()
    if commit is not None:
        (root / "tools" / "mssanitizer" / "bin" / "mssanitizer.bin").write_bytes(with_string(commit))
    if version is not None:
        info = root / hooks.VERSION_INFO
        info.parent.mkdir(parents=True)
        info.write_text(f"[PACKAGE]\nName=mindstudio-sanitizer\nVersion={version}")
    return lib


def bare_env(**extra: str) -> dict[str, str]:
    """The test's environment without any CANN variable, so the host running the tests does not leak in."""
    env = {k: v for k, v in os.environ.items() if k not in (hooks.LIB_DIR_ENV, *hooks.HOME_ENVS, hooks.LAYOUT_ENV)}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"
    env.pop("LD_PRELOAD", None)
    env.update(extra)
    return env


class TestChoice:
    @pytest.mark.parametrize(
        ("device", "cann", "names"),
        [
            (False, False, ("libmssanitizer_injection.so", "libascend_san_stub.so")),
            (True, False, ("libascend_hal_hook.so",)),
            (False, True, ("libascend_acl_hook.so",)),
        ],
    )
    def test_heap_options_choose_as_mssanitizer(self, device: bool, cann: bool, names: tuple[str, ...]) -> None:
        """Device heap: the HAL hooks; CANN heap: the ACL hooks; otherwise the injection library and its stub."""
        assert hooks.hook_names(check_device_heap=device, check_cann_heap=cann) == names


class TestDiscovery:
    def test_ascend_home_path(self, tmp_path: Path) -> None:
        lib = cann_tree(tmp_path / "cann")
        found = hooks.find_hooks(bare_env(ASCEND_HOME_PATH=str(tmp_path / "cann")))
        assert found.directory == lib.resolve()
        assert found.libraries == [lib.resolve() / n for n in hooks.KERNEL_HOOKS]

    def test_toolkit_home(self, tmp_path: Path) -> None:
        lib = cann_tree(tmp_path / "toolkit")
        found = hooks.find_hooks(bare_env(ASCEND_TOOLKIT_HOME=str(tmp_path / "toolkit")), check_cann_heap=True)
        assert found.libraries == [lib.resolve() / "libascend_acl_hook.so"]

    def test_ld_preload_path_comes_first(self, tmp_path: Path) -> None:
        """$LD_PRELOAD_PATH (what msSanitizer's wrapper sets) wins over the toolkit."""
        cann_tree(tmp_path / "cann")
        own = cann_tree(tmp_path / "own")
        env = bare_env(ASCEND_HOME_PATH=str(tmp_path / "cann"), LD_PRELOAD_PATH=str(own))
        assert hooks.find_hooks(env, check_device_heap=True).libraries == [own.resolve() / "libascend_hal_hook.so"]

    def test_beside_mssanitizer_on_path(self, tmp_path: Path) -> None:
        """No variable set: ``../lib64`` beside the ``mssanitizer`` on PATH, as its wrapper computes it."""
        lib = cann_tree(tmp_path / "cann")
        launcher = lib.parent / "bin" / "mssanitizer"
        launcher.write_text("#!/bin/sh\n")
        launcher.chmod(0o755)
        env = bare_env()
        env["PATH"] = f"{launcher.parent}{os.pathsep}{env['PATH']}"
        assert hooks.find_hooks(env).directory == lib.resolve()

    def test_a_directory_missing_the_chosen_library_is_passed_over(self, tmp_path: Path) -> None:
        """A directory without the libraries the heap option chooses is skipped, and named as partial."""
        partial = cann_tree(tmp_path / "partial", libs=("libmssanitizer_injection.so",))
        full = cann_tree(tmp_path / "full")
        env = bare_env(LD_PRELOAD_PATH=str(partial), ASCEND_HOME_PATH=str(tmp_path / "full"))
        found = hooks.find_hooks(env)
        assert found.directory == full.resolve()
        assert found.missing == [partial / "libascend_san_stub.so"]

    def test_none(self, tmp_path: Path) -> None:
        found = hooks.find_hooks(bare_env(ASCEND_HOME_PATH=str(tmp_path / "nothing")))
        assert not found.found and found.looked_in == [tmp_path / "nothing" / hooks.TOOL_LIB_DIR]


class TestRelease:
    def test_commit_decides(self, tmp_path: Path) -> None:
        lib = cann_tree(tmp_path / "cann")
        got = hooks.identify(lib, bare_env(), frozenset({LAYOUT}))
        assert (got.layout, got.version, got.commit, got.problem) == (LAYOUT, "26.0.0", COMMIT, "")

    def test_version_alone_decides_when_it_names_one_release(self, tmp_path: Path) -> None:
        lib = cann_tree(tmp_path / "cann", commit=None)
        assert hooks.identify(lib, bare_env(), frozenset({LAYOUT})).layout == LAYOUT

    def test_unknown_commit_is_refused_by_name(self, tmp_path: Path) -> None:
        """A commit sanitizerd has no layout for is another release, whatever its version says."""
        lib = cann_tree(tmp_path / "cann", commit="0123456789abcdef0123456789abcdef01234567")
        got = hooks.identify(lib, bare_env(), frozenset({LAYOUT}))
        assert not got.layout
        assert "(26.0.0, mssanitizer 01234567) is not one sanitizerd knows" in got.problem
        assert "26.0.0 (mssanitizer 4a419f05, msopcom ed482176)" in got.problem and hooks.LAYOUT_ENV in got.problem

    def test_the_injection_library_alone_decides(self, tmp_path: Path) -> None:
        """No version file, no mssanitizer.bin: the injection library's revision (msopcom) names the release."""
        lib = cann_tree(tmp_path / "cann", commit=None, version=None, injection=hooks.RELEASES[0].injection)
        got = hooks.identify(lib, bare_env(), frozenset({LAYOUT}))
        assert (got.layout, got.commit) == (LAYOUT, COMMIT)
        assert got.sources == (str(lib / hooks.KERNEL_HOOKS[0]),)

    def test_an_injection_library_of_another_pair_is_refused(self, tmp_path: Path) -> None:
        """msSanitizer and msopcom change the structs together: a known msSanitizer with another msopcom is a
        wire sanitizerd has not measured."""
        other = "fedcba9876543210fedcba9876543210fedcba98"
        lib = cann_tree(tmp_path / "cann", injection=other)
        got = hooks.identify(lib, bare_env(), frozenset({LAYOUT}))
        assert not got.layout
        assert "(msopcom fedcba98) is not the one released with msSanitizer 26.0.0 (4a419f05: msopcom ed482176)" in (
            got.problem
        )

    def test_matching_injection_library_agrees(self, tmp_path: Path) -> None:
        lib = cann_tree(tmp_path / "cann", injection=hooks.RELEASES[0].injection)
        got = hooks.identify(lib, bare_env(), frozenset({LAYOUT}))
        assert got.layout == LAYOUT and len(got.sources) == 3

    def test_unknown_version_is_refused(self, tmp_path: Path) -> None:
        lib = cann_tree(tmp_path / "cann", commit=None, version="27.1.0")
        assert "(27.1.0) is not one sanitizerd knows" in hooks.identify(lib, bare_env(), frozenset({LAYOUT})).problem

    def test_unidentifiable_is_refused(self, tmp_path: Path) -> None:
        lib = cann_tree(tmp_path / "cann", commit=None, version=None)
        assert "cannot tell which msSanitizer release" in hooks.identify(lib, bare_env(), frozenset({LAYOUT})).problem

    def test_layout_named_outright(self, tmp_path: Path) -> None:
        lib = cann_tree(tmp_path / "cann", commit=None, version="27.1.0")
        env = bare_env(SANITIZERD_COMPAT_LAYOUT=LAYOUT)
        assert hooks.identify(lib, env, frozenset({LAYOUT})).layout == LAYOUT
        env = bare_env(SANITIZERD_COMPAT_LAYOUT="nonesuch")
        assert "nonesuch is not a layout" in hooks.identify(lib, env, frozenset({LAYOUT})).problem


class TestEnvironment:
    def test_preloaded_before_what_was_there(self, tmp_path: Path) -> None:
        lib = cann_tree(tmp_path / "cann")
        found = hooks.find_hooks(bare_env(ASCEND_HOME_PATH=str(tmp_path / "cann")))
        name = "/tmp/msop_connect.20260402120000.42.sock"
        env = hooks.hook_environment({"LD_PRELOAD": "/x/libmine.so", "LD_LIBRARY_PATH": "/y"}, found, name)
        injection, stub = (str(lib.resolve() / n) for n in hooks.KERNEL_HOOKS)
        assert env == {
            "LD_PRELOAD": f"{injection}:{stub}:/x/libmine.so",
            "LD_LIBRARY_PATH": f"{lib.resolve()}:/y",
            "MSOP_SOCKET_PATH": name,
            "MSSANITIZER_PID": name,
        }


def run_env(daemon: RunningDaemon, *options: str, env: dict[str, str]):  # type: ignore[no-untyped-def]
    """``sanitizerd run`` of ``env`` (which prints the environment it got, loading nothing) against ``daemon``."""
    return sanitizerd("run", "--socket", str(daemon.socket), *options, "--", "/usr/bin/env", env=env, timeout=60)


def printed(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line and not line.startswith("["))


class TestRun:
    """``sanitizerd run`` against a real daemon, with a fake install: the environment the program gets."""

    @pytest.mark.parametrize(
        ("option", "libs"),
        [
            ("--check-device-heap=no", hooks.KERNEL_HOOKS),
            ("--check-device-heap=yes", hooks.DEVICE_HEAP_HOOKS),
            ("--check-cann-heap=yes", hooks.CANN_HEAP_HOOKS),
        ],
    )
    def test_program_gets_the_hooks_and_the_socket(
        self, daemon: RunningDaemon, tmp_path: Path, option: str, libs: tuple[str, ...]
    ) -> None:
        lib = cann_tree(tmp_path / "cann")
        env = bare_env(ASCEND_HOME_PATH=str(tmp_path / "cann"), LD_PRELOAD="/x/libmine.so")
        result = run_env(daemon, option, env=env)
        assert result.returncode == 0, result.stderr
        got = printed(result.stdout)
        assert got["LD_PRELOAD"] == ":".join([*(str(lib.resolve() / n) for n in libs), "/x/libmine.so"])
        assert got["LD_LIBRARY_PATH"].split(":")[0] == str(lib.resolve())
        assert re.fullmatch(r"/tmp/msop_connect\.\d{14}\.\d+\.sock", got["MSOP_SOCKET_PATH"])
        assert got["MSSANITIZER_PID"] == got["MSOP_SOCKET_PATH"]
        assert "WARNING" not in result.stderr

    def test_heap_hooks_without_ascend_home_path_warn(self, daemon: RunningDaemon, tmp_path: Path) -> None:
        """The heap hooks dlopen the runtime from $ASCEND_HOME_PATH/lib64: found through $LD_PRELOAD_PATH without
        it, the run says so."""
        lib = cann_tree(tmp_path / "cann")
        result = run_env(daemon, "--check-device-heap=yes", env=bare_env(LD_PRELOAD_PATH=str(lib)))
        assert result.returncode == 0, result.stderr
        assert "libascend_hal_hook.so loads the CANN runtime from $ASCEND_HOME_PATH/lib64" in result.stderr
        assert printed(result.stdout)["LD_PRELOAD"] == str(lib.resolve() / "libascend_hal_hook.so")

    def test_none_found_on_a_cann_host_says_so(self, daemon: RunningDaemon, tmp_path: Path) -> None:
        env = bare_env(ASCEND_HOME_PATH=str(tmp_path / "empty"))
        result = run_env(daemon, env=env)
        assert result.returncode == 0, result.stderr
        assert "msSanitizer's hook libraries (libmssanitizer_injection.so, libascend_san_stub.so) were not found" in (
            result.stderr
        )
        assert str(tmp_path / "empty" / hooks.TOOL_LIB_DIR) in result.stderr
        assert "programs that use client_shim are still checked" in result.stderr
        got = printed(result.stdout)
        assert "MSOP_SOCKET_PATH" not in got and "LD_PRELOAD" not in got

    def test_heap_option_without_hooks_says_it_needs_them(self, daemon: RunningDaemon) -> None:
        result = run_env(daemon, "--check-cann-heap=yes", env=bare_env())
        assert result.returncode == 0, result.stderr
        assert "libascend_acl_hook.so) were not found; looked in nowhere" in result.stderr
        assert "--check-cann-heap needs them" in result.stderr

    def test_no_cann_no_word(self, daemon: RunningDaemon) -> None:
        """On a host with no sign of CANN a plain run says nothing of hooks."""
        result = run_env(daemon, env=bare_env())
        assert result.returncode == 0 and result.stderr == "", result.stderr

    def test_unknown_release_is_refused(self, daemon: RunningDaemon, tmp_path: Path) -> None:
        cann_tree(tmp_path / "cann", commit=None, version="27.1.0")
        result = run_env(daemon, env=bare_env(ASCEND_HOME_PATH=str(tmp_path / "cann")))
        assert result.returncode == 1
        assert result.stderr.startswith("[sanitizerd] ERROR: the msSanitizer release of the hooks in ")
        assert "(27.1.0) is not one sanitizerd knows" in result.stderr and result.stdout == ""

    def test_both_heaps_refused(self, daemon: RunningDaemon) -> None:
        result = run_env(daemon, "--check-cann-heap=yes", "--check-device-heap=yes", env=bare_env())
        assert result.returncode == 1
        assert "CANNOT enable both --check-cann-heap and --check-device-heap" in result.stderr


# What the hooks do, in Python: connect to the socket the environment names (padded abstract address, retrying as
# they do), read the Config, send one HOST_RECORD (a free of memory never allocated, from aclrtFree), and close.
_HOOKS_PROGRAM = r"""
import os, socket, struct, sys, time
name = os.environ["MSOP_SOCKET_PATH"].encode()
assert os.environ["MSSANITIZER_PID"] == os.environ["MSOP_SOCKET_PATH"]
sock = socket.socket(socket.AF_UNIX)
for _ in range(50):
    try:
        sock.connect(b"\0" + name + b"\0" * (107 - len(name)))
        break
    except OSError:
        time.sleep(0.1)
config = b""
while len(config) < int(sys.argv[1]):
    config += sock.recv(int(sys.argv[1]) - len(config))
record = struct.pack("<IBB2xQQQQQ", 1, 3, 0, 0, 0x12C0C0001000, 0, 0, 0)  # FREE, ACL, dst, size, params, root
sock.sendall(struct.pack("<I", 1000) + record)
sock.close()
print("hooks sent", len(config))
"""


def test_a_hooked_program_is_a_session_of_the_run(daemon: RunningDaemon, tmp_path: Path) -> None:
    """End to end: ``sanitizerd run`` preloads the (fake) hooks, the program speaks msSanitizer's protocol over the
    socket the run's daemon opened, and its illegal free is reported by the run like any finding."""
    from sanitizerd.compat import wire

    cann_tree(tmp_path / "cann", libs=hooks.CANN_HEAP_HOOKS)
    program = tmp_path / "hooks.py"
    program.write_text(_HOOKS_PROGRAM)
    config_size = wire.LAYOUTS[LAYOUT].config.size
    env = bare_env(ASCEND_HOME_PATH=str(tmp_path / "cann"))
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--check-cann-heap=yes", "--",
        "/usr/bin/python3", str(program), str(config_size), env=env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"hooks sent {config_size}" in result.stdout
    assert "0x12c0c0001000" in result.stdout.lower(), result.stdout
    assert "SUMMARY: job run-" in result.stdout and "1 error(s)" in result.stdout, result.stdout


def test_a_hooked_programs_session_is_saved_and_replayed(daemon: RunningDaemon, tmp_path: Path) -> None:
    """``--save`` records the compat session as native messages; ``sanitizerd replay`` finds the same error."""
    from sanitizerd.compat import wire

    cann_tree(tmp_path / "cann")
    program = tmp_path / "hooks.py"
    program.write_text(_HOOKS_PROGRAM)
    saved = tmp_path / "run.sds"
    config_size = str(wire.LAYOUTS[LAYOUT].config.size)
    env = bare_env(ASCEND_HOME_PATH=str(tmp_path / "cann"))
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--save", str(saved), "--",
        "/usr/bin/python3", str(program), config_size, env=env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0 and "1 error(s)" in result.stdout, result.stdout + result.stderr
    replayed = sanitizerd("replay", "--socket", str(daemon.socket), str(saved), env=env, timeout=60)
    assert replayed.returncode == 0, replayed.stderr
    assert "illegal free()" in replayed.stdout and "0x12c0c0001000" in replayed.stdout, replayed.stdout


def test_a_program_of_its_own_gets_the_socket_with_the_layout_named(daemon: RunningDaemon, tmp_path: Path) -> None:
    """No hooks installed, ``SANITIZERD_COMPAT_LAYOUT`` set: the program (a client of msSanitizer's protocol of its
    own, as the C test client) gets the socket's name and nothing is preloaded."""
    from sanitizerd.compat import wire

    program = tmp_path / "hooks.py"
    program.write_text(_HOOKS_PROGRAM + "import os; print('LD_PRELOAD' in os.environ)\n")
    env = bare_env(SANITIZERD_COMPAT_LAYOUT=LAYOUT)
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--", "/usr/bin/python3", str(program),
        str(wire.LAYOUTS[LAYOUT].config.size), env=env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "illegal free()" in result.stdout and "False" in result.stdout.split(), result.stdout
    assert "hook libraries" not in result.stderr, result.stderr  # (the system python cannot attach: its own line)
    refused = run_env(daemon, env=bare_env(SANITIZERD_COMPAT_LAYOUT="nonesuch"))
    assert refused.returncode == 1 and "SANITIZERD_COMPAT_LAYOUT=nonesuch is not a layout" in refused.stderr
