"""msSanitizer's hook libraries: found, identified, chosen and preloaded as its launcher does (sanitizerd/cli/hooks.py).

A stand-in CANN install in tmp_path per wire layout: a ``version.info`` saying 26.0.0 (what every branch's says), an
``mssanitizer.bin`` holding a commit string of that layout's release, and the libraries that release preloads, real
tiny shared objects (built once with ``cc``; the injection library holds its msopcom revision) so that the program
run under them, ``/usr/bin/env``, loads them and prints the environment it got. The commits come from the measured
data (``sanitizerd.compat.packets.releases``), so every layout sanitizerd has is tried.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanitizerd.cli import hooks
from sanitizerd.compat import wire
from sanitizerd.compat.packets import releases
from tests.conftest import ROOT, RunningDaemon, sanitizerd, start_daemon, stop_daemon

pytestmark = pytest.mark.first_pass_only("the preload environment of `sanitizerd run`: not the worker shape")

LAYOUT = wire.DEFAULT_LAYOUT  # the April release's (tests/test_compat_e2e.py names it too)
# Facts of issue 24: msSanitizer's commit of the April release, and its wire.
APRIL_COMMIT = "4a419f05d170a006695877cda897f0115c935931"
APRIL = "mssanitizer-4a419f05"
UNKNOWN = "0123456789abcdef0123456789abcdef01234567"  # measured nowhere
PLACEHOLDER = b"x" * 40  # where the stand-in library's revision goes: not hex, so no commit until patched


@functools.cache
def tool_commit(layout: str) -> str | None:
    """A commit of msSanitizer whose ``mssanitizer.bin`` speaks ``layout``, from the measured data."""
    return min((c for c in releases.tool_commits() if releases.wire_of_tool(c) == layout), default=None)


@functools.cache
def injection_commit(layout: str) -> str | None:
    """An msopcom commit whose injection library speaks ``layout`` (or ``"none"``), from the measured data."""
    return min((c for c in releases.injection_commits() if releases.wire_of_injection(c) == layout), default=None)


LAYOUTS = [pytest.param(layout, id=layout.name) for layout in wire.LAYOUTS.values()]
INJECTION_LAYOUTS = [
    pytest.param(layout, id=layout.name) for layout in wire.LAYOUTS.values() if injection_commit(layout.name)
]


@pytest.fixture(scope="module")
def shared_daemon() -> Iterator[RunningDaemon]:
    """One daemon for the runs of every layout: each run is its own job and socket, and a daemon per layout would
    double the time of ~60 runs."""
    base = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))  # short: a Unix socket's path must fit in 108 bytes
    running = start_daemon(base, "--handshake-timeout", "1")
    yield running
    assert stop_daemon(running) == 0, running.log_text()
    shutil.rmtree(base, ignore_errors=True)


def needs(value: str | None, what: str) -> str:
    if value is None:
        pytest.skip(f"the measured data has no {what}")
    return value


@pytest.fixture(scope="session")
def stand_in_library(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real shared object holding a 40-byte placeholder for a revision string (patched per install)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in hook libraries")
    where = tmp_path_factory.mktemp("stand-in")
    source = where / "hook.c"
    source.write_text(f'const char sanitizerd_stand_in_revision[] = "{PLACEHOLDER.decode()}";\n')
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(where / "hook.so"), str(source)], check=True)
    data = (where / "hook.so").read_bytes()
    assert data.count(PLACEHOLDER) == 1
    return data


@pytest.fixture
def install(tmp_path: Path, stand_in_library: bytes):  # type: ignore[no-untyped-def]
    """``install(name, ...)``: a stand-in install under tmp_path/name (``cann_tree``'s arguments)."""

    def make(name: str = "cann", **kwargs) -> Path:  # type: ignore[no-untyped-def]
        return cann_tree(tmp_path / name, stand_in_library, **kwargs)

    return make


def cann_tree(  # type: ignore[no-untyped-def]
    root: Path,
    library: bytes,
    *,
    version: str | None = "26.0.0",
    tool: str | None = APRIL_COMMIT,
    injection: str | None = None,
    libs=None,
) -> Path:
    """An install as msSanitizer's package lays it out; returns its ``tools/mssanitizer/lib64``. ``libs``: the
    libraries installed (every one any layout preloads, by default); the injection library carries ``injection``
    as its revision when given."""
    lib = root / "tools" / "mssanitizer" / "lib64"
    lib.mkdir(parents=True)
    for name in sorted(hooks.hook_library_names()) if libs is None else libs:
        revision = injection if name == hooks.INJECTION and injection else None
        (lib / name).write_bytes(library.replace(PLACEHOLDER, revision.encode()) if revision else library)
    (root / "tools" / "mssanitizer" / "bin").mkdir()
    if tool is not None:
        (root / "tools" / "mssanitizer" / hooks.TOOL_BINARY).write_bytes(with_string(tool))
    if version is not None:
        info = root / hooks.VERSION_INFO
        info.parent.mkdir(parents=True)
        info.write_text(f"[PACKAGE]\nName=mindstudio-sanitizer\nVersion={version}")
    return lib


def with_string(text: str) -> bytes:
    """Bytes holding ``text`` as the compiler leaves a string literal: among other bytes, NUL-terminated."""
    return b"\x7fELF" + os.urandom(64).replace(b"\0", b"\1") + b"\0revision\0" + text.encode() + b"\0tail"


def bare_env(**extra: str) -> dict[str, str]:
    """The test's environment without any CANN variable, so the host running the tests does not leak in."""
    drop = (hooks.LIB_DIR_ENV, *hooks.HOME_ENVS, hooks.LAYOUT_ENV, "LD_PRELOAD", *hooks.socket_variables())
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"
    env.update(extra)
    return env


def home(lib: Path) -> dict[str, str]:
    """The environment of a CANN host whose toolkit is the install of ``lib``."""
    return bare_env(ASCEND_HOME_PATH=str(lib.parent.parent.parent))


class TestChoice:
    @pytest.mark.parametrize(
        ("device", "cann", "mode"),
        [(False, False, "default"), (True, False, "check_device_heap"), (False, True, "check_cann_heap")],
    )
    def test_heap_options_choose_the_set(self, device: bool, cann: bool, mode: str) -> None:
        assert hooks.preload_mode(check_device_heap=device, check_cann_heap=cann) == mode

    def test_the_april_release_preloads_the_injection_library_and_its_stub(self) -> None:
        """The facts of issue 24, as the data has them: April's launcher set both socket variables and preloaded
        the stub with the injection library."""
        april = wire.LAYOUTS[APRIL]
        assert april.socket_env == ("MSOP_SOCKET_PATH", "MSSANITIZER_PID")
        assert april.preload["default"] == ("libmssanitizer_injection.so", "libascend_san_stub.so")
        assert releases.wire_of_tool(APRIL_COMMIT) == APRIL


class TestDiscovery:
    def test_ascend_home_path(self, install) -> None:  # type: ignore[no-untyped-def]
        lib = install()
        choice = hooks.choose(home(lib))
        assert choice.directory == lib.resolve() and choice.layout is wire.LAYOUTS[APRIL]
        assert choice.libraries == [lib.resolve() / n for n in wire.LAYOUTS[APRIL].preload["default"]]

    def test_toolkit_home(self, install, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        lib = install("toolkit")
        choice = hooks.choose(bare_env(ASCEND_TOOLKIT_HOME=str(tmp_path / "toolkit")), check_cann_heap=True)
        assert choice.libraries == [lib.resolve() / n for n in wire.LAYOUTS[APRIL].preload["check_cann_heap"]]

    def test_ld_preload_path_comes_first(self, install, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        """$LD_PRELOAD_PATH (what msSanitizer's wrapper sets) wins over the toolkit."""
        install("cann")
        own = install("own")
        env = bare_env(ASCEND_HOME_PATH=str(tmp_path / "cann"), LD_PRELOAD_PATH=str(own))
        assert hooks.choose(env, check_device_heap=True).directory == own.resolve()

    def test_beside_mssanitizer_on_path(self, install) -> None:  # type: ignore[no-untyped-def]
        """No variable set: ``../lib64`` beside the ``mssanitizer`` on PATH, as its wrapper computes it; and an
        ``mssanitizer`` on PATH alone makes a CANN host."""
        lib = install()
        launcher = lib.parent / "bin" / "mssanitizer"
        launcher.write_text("#!/bin/sh\n")
        launcher.chmod(0o755)
        env = bare_env()
        env["PATH"] = f"{launcher.parent}{os.pathsep}{env['PATH']}"
        assert hooks.choose(env).directory == lib.resolve() and hooks.looks_like_cann(env)

    def test_a_directory_that_cannot_serve_is_passed_over(self, install, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        """An install missing a library of its set is passed over for one that has them all, and named."""
        partial = install("partial", libs=(hooks.INJECTION,))
        full = install("full")
        choice = hooks.choose(bare_env(LD_PRELOAD_PATH=str(partial), ASCEND_HOME_PATH=str(tmp_path / "full")))
        assert choice.directory == full.resolve() and not choice.problem
        assert any(str(partial) in note and "libascend_san_stub.so is missing" in note for note in choice.notes)

    def test_no_cann_no_hooks_no_problem(self) -> None:
        choice = hooks.choose(bare_env())
        assert (choice.layout, choice.problem, choice.looked_in) == (None, "", [])

    def test_none_on_a_cann_host_is_a_problem(self, tmp_path: Path) -> None:
        choice = hooks.choose(bare_env(ASCEND_HOME_PATH=str(tmp_path / "nothing")))
        assert choice.layout is None and "no msSanitizer hook libraries were found" in choice.problem
        assert str(tmp_path / "nothing" / hooks.TOOL_LIB_DIR) in choice.problem


class TestRelease:
    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_the_tools_commit_decides(self, install, layout: wire.WireLayout) -> None:  # type: ignore[no-untyped-def]
        """Each layout's release is identified by its msSanitizer commit, whatever version.info says, and its
        preload sets are the libraries that release installs."""
        commit = needs(tool_commit(layout.name), f"msSanitizer commit of {layout.name}")
        lib = install(tool=commit, libs=sorted({n for names in layout.preload.values() for n in names}))
        for mode, heap in (("default", {}), ("check_device_heap", {"check_device_heap": True}),
                           ("check_cann_heap", {"check_cann_heap": True})):  # fmt: skip
            choice = hooks.choose(home(lib), **heap)
            assert choice.layout is layout and not choice.problem, choice.problem
            assert choice.libraries == [lib.resolve() / n for n in layout.preload[mode]]
            assert choice.release is not None and choice.release.tool_commit == commit

    @pytest.mark.parametrize("layout", INJECTION_LAYOUTS)
    def test_the_injection_library_decides_when_the_tool_is_unknown(self, install, layout: wire.WireLayout) -> None:  # type: ignore[no-untyped-def]
        """msopcom's commits are measured up to 2026-04-23: the wires its injection library spoke until then."""
        commit = needs(injection_commit(layout.name), f"msopcom commit of {layout.name}")
        lib = install(tool=UNKNOWN, injection=commit)
        choice = hooks.choose(home(lib))
        assert choice.layout is layout and not choice.problem, choice.problem

    def test_the_april_pair_is_accepted(self, install) -> None:  # type: ignore[no-untyped-def]
        """April's msSanitizer with the injection library really released with it (msopcom of 2026-04-01..14),
        with no override."""
        injection = needs(injection_commit(APRIL), "msopcom commit of the April wire")
        choice = hooks.choose(home(install(tool=APRIL_COMMIT, injection=injection)))
        assert choice.layout is wire.LAYOUTS[APRIL] and not choice.problem, choice.problem

    def test_an_unknown_commit_is_refused(self, install) -> None:  # type: ignore[no-untyped-def]
        """A commit sanitizerd has no layout for is another release, whatever its version says."""
        lib = install(tool=UNKNOWN)
        choice = hooks.choose(home(lib))
        assert choice.layout is None
        assert f"mssanitizer {UNKNOWN}" in choice.problem and "version.info 26.0.0" in choice.problem
        assert "no commit sanitizerd has measured identifies its release" in choice.problem

    def test_version_info_alone_is_refused(self, install) -> None:  # type: ignore[no-untyped-def]
        """26.0.0 is what every branch's version.info says: it identifies no wire."""
        choice = hooks.choose(home(install(tool=None)))
        assert choice.layout is None and "version.info's 26.0.0 is every branch's" in choice.problem

    def test_tool_and_injection_that_disagree_are_refused_naming_both(self, install) -> None:  # type: ignore[no-untyped-def]
        pairs = [
            (tool, injection, a.name, b.name)
            for a in wire.LAYOUTS.values()
            for b in wire.LAYOUTS.values()
            if a is not b and (tool := tool_commit(a.name)) and (injection := injection_commit(b.name))
        ]
        if not pairs:
            pytest.skip("the measured data has no two wires with a tool and an injection commit")
        tool, injection, tool_wire, injection_wire = pairs[0]
        choice = hooks.choose(home(install(tool=tool, injection=injection)))
        assert choice.layout is None
        assert f"mssanitizer {tool[:8]}: wire {tool_wire}" in choice.problem
        assert f"msopcom {injection[:8]}: wire {injection_wire}" in choice.problem

    def test_the_commit_in_libascend_san_identifies_a_release_build(self, install) -> None:  # type: ignore[no-untyped-def]
        """A release build links mssanitizer.bin to lib64/libascend_san.so.<version>, which holds the commit (as
        the April tool built from its source does): found there when mssanitizer.bin has none."""
        lib = install(tool=None)
        (lib / "libascend_san.so").write_bytes(b"\x7fELF\0" + APRIL_COMMIT.encode() + b"\0")
        choice = hooks.choose(home(lib))
        assert choice.layout is wire.LAYOUTS[APRIL] and not choice.problem, choice.problem
        assert choice.release is not None and choice.release.tool_binary == lib.parent / "lib64" / "libascend_san.so"

    def test_a_wire_without_a_layout_is_refused(self, install) -> None:  # type: ignore[no-untyped-def]
        """A commit the data maps to a wire this sanitizerd has no layout for is refused, naming the wire."""
        lacking = (c for c in sorted(releases.tool_commits()) if not wire.layout_named(releases.wire_of_tool(c) or ""))
        commit = needs(next(lacking, None), "msSanitizer commit of a wire without a layout")
        choice = hooks.choose(home(install(tool=commit)))
        assert choice.layout is None
        assert f"speaks wire {releases.wire_of_tool(commit)}, which this sanitizerd has no layout for" in choice.problem

    def test_a_missing_hook_is_refused(self, install) -> None:  # type: ignore[no-untyped-def]
        lib = install(libs=(hooks.INJECTION,))
        choice = hooks.choose(home(lib))
        assert choice.layout is None
        assert f"wire {APRIL} preloads libmssanitizer_injection.so, libascend_san_stub.so" in choice.problem
        assert "libascend_san_stub.so is missing" in choice.problem

    def test_layout_named_outright(self, install) -> None:  # type: ignore[no-untyped-def]
        """SANITIZERD_COMPAT_LAYOUT decides for an install that cannot be identified, by name or alias."""
        lib = install(tool=UNKNOWN)
        for layout in wire.LAYOUTS.values():
            for name in (layout.name, *layout.aliases):
                env = home(lib) | {hooks.LAYOUT_ENV: name}
                choice = hooks.choose(env)
                if all((lib / n).is_file() for n in layout.preload["default"]):
                    assert choice.layout is layout and choice.forced == name and not choice.problem
        choice = hooks.choose(home(lib) | {hooks.LAYOUT_ENV: "nonesuch"})
        assert choice.problem == f"{hooks.LAYOUT_ENV}=nonesuch is not a layout"

    def test_a_named_layout_still_needs_its_libraries(self, install) -> None:  # type: ignore[no-untyped-def]
        lib = install(libs=(hooks.INJECTION,))
        choice = hooks.choose(home(lib) | {hooks.LAYOUT_ENV: APRIL})
        assert choice.layout is None and "libascend_san_stub.so is missing" in choice.problem

    def test_refusal_names_the_ways_on(self, install) -> None:  # type: ignore[no-untyped-def]
        line = hooks.choose(home(install(tool=UNKNOWN))).refusal()
        assert "\n" not in line and f"{hooks.LAYOUT_ENV}=<layout>" in line and "--allow-unchecked" in line
        assert APRIL in line  # among the names it takes


class TestEnvironment:
    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_preloaded_before_what_was_there(self, install, layout: wire.WireLayout) -> None:  # type: ignore[no-untyped-def]
        lib = install()
        choice = hooks.choose(home(lib) | {hooks.LAYOUT_ENV: layout.name})
        name = "/tmp/msop_connect.20260402120000.42.sock"
        env = hooks.hook_environment({"LD_PRELOAD": "/x/libmine.so", "LD_LIBRARY_PATH": "/y"}, choice, name)
        preload = [str(lib.resolve() / n) for n in layout.preload["default"]]
        assert env == {
            "LD_PRELOAD": ":".join([*preload, "/x/libmine.so"]),
            "LD_LIBRARY_PATH": f"{lib.resolve()}:/y",
            **dict.fromkeys(layout.socket_env, name),
        }


def run_env(daemon: RunningDaemon, *options: str, env: dict[str, str]):  # type: ignore[no-untyped-def]
    """``sanitizerd run`` of ``env`` (which prints the environment it got) against ``daemon``."""
    return sanitizerd("run", "--socket", str(daemon.socket), *options, "--", "/usr/bin/env", env=env, timeout=60)


def printed(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line and not line.startswith("["))


def refused_before_running(result: subprocess.CompletedProcess[str], *texts: str) -> None:
    """Exit 1, one line on stderr saying ``texts`` and the ways on, and the program never started."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == "", result.stdout
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("[sanitizerd] ERROR: "), result.stderr
    for text in (*texts, f"{hooks.LAYOUT_ENV}=<layout>", "--allow-unchecked"):
        assert text in result.stderr, result.stderr


class TestRun:
    """``sanitizerd run`` against a real daemon, with a stand-in install: the environment the program gets."""

    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_each_release_gets_its_own_hooks_and_socket_variables(  # type: ignore[no-untyped-def]
        self, shared_daemon: RunningDaemon, install, layout: wire.WireLayout
    ) -> None:
        """No variable names the layout: the run identifies it from the install, preloads exactly what that release
        preloads, and names the socket in exactly its launcher's variables."""
        commit = needs(tool_commit(layout.name), f"msSanitizer commit of {layout.name}")
        lib = install(tool=commit, libs=layout.preload["default"])
        result = run_env(shared_daemon, "--log-level=info", env=home(lib))
        assert result.returncode == 0, result.stderr
        assert f"wire layout {layout.name}, identified" in result.stderr, result.stderr
        got = printed(result.stdout)
        assert got["LD_PRELOAD"] == ":".join(str(lib.resolve() / n) for n in layout.preload["default"])
        assert re.fullmatch(r"/tmp/msop_connect\.\d{14}\.\d+\.sock", got[layout.socket_env[0]])
        for variable in hooks.socket_variables():
            assert (variable in got) == (variable in layout.socket_env), variable
            assert got.get(variable, got[layout.socket_env[0]]) == got[layout.socket_env[0]]
        assert "WARNING" not in result.stderr and "ld.so" not in result.stderr, result.stderr

    @pytest.mark.parametrize("mode", ["check_device_heap", "check_cann_heap"])
    def test_heap_options_get_their_hooks(self, daemon: RunningDaemon, install, mode: str) -> None:  # type: ignore[no-untyped-def]
        lib = install()
        result = run_env(daemon, f"{hooks.HEAP_MODES[mode]}=yes", env=home(lib) | {"LD_PRELOAD": "/x/libmine.so"})
        assert result.returncode == 0, result.stderr
        got = printed(result.stdout)
        names = wire.LAYOUTS[APRIL].preload[mode]
        assert got["LD_PRELOAD"] == ":".join([*(str(lib.resolve() / n) for n in names), "/x/libmine.so"])
        assert got["LD_LIBRARY_PATH"].split(":")[0] == str(lib.resolve())

    def test_heap_hooks_without_ascend_home_path_warn(self, daemon: RunningDaemon, install) -> None:  # type: ignore[no-untyped-def]
        """The heap hooks dlopen the runtime from $ASCEND_HOME_PATH/lib64: found through $LD_PRELOAD_PATH without
        it, the run says so."""
        lib = install()
        result = run_env(daemon, "--check-device-heap=yes", env=bare_env(LD_PRELOAD_PATH=str(lib)))
        assert result.returncode == 0, result.stderr
        assert "libascend_hal_hook.so loads the CANN runtime from $ASCEND_HOME_PATH/lib64" in result.stderr

    def test_a_missing_hook_refuses_unless_allowed(self, daemon: RunningDaemon, install, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        lib = install(libs=(hooks.INJECTION,))
        refused_before_running(run_env(daemon, env=home(lib)), "libascend_san_stub.so is missing", str(lib))
        report = tmp_path / "r.sarif"
        allowed = run_env(daemon, "--allow-unchecked", "--report", str(report), env=home(lib))
        assert allowed.returncode == 0, allowed.stderr
        got = printed(allowed.stdout)
        assert "PATH" in got and "LD_PRELOAD" not in got and "MSOP_SOCKET_PATH" not in got  # it ran, unhooked
        last = allowed.stdout.splitlines()[-1]
        assert "UNCHECKED: the program ran without msSanitizer's hooks (--allow-unchecked)" in last, last
        assert "libascend_san_stub.so is missing" in last
        assert "WARNING: --allow-unchecked" in allowed.stderr
        run = json.loads(report.read_text())["runs"][0]  # and the CI report, where code scanning shows it
        assert "libascend_san_stub.so is missing" in run["properties"]["unchecked"]
        (notification,) = run["invocations"][0]["toolExecutionNotifications"]
        assert notification["level"] == "warning" and "--allow-unchecked" in notification["message"]["text"]

    def test_an_unknown_commit_refuses(self, daemon: RunningDaemon, install) -> None:  # type: ignore[no-untyped-def]
        lib = install(tool=UNKNOWN)
        refused_before_running(
            run_env(daemon, env=home(lib)), f"mssanitizer {UNKNOWN}", "version.info 26.0.0", str(lib)
        )

    def test_version_info_alone_refuses(self, daemon: RunningDaemon, install) -> None:  # type: ignore[no-untyped-def]
        refused_before_running(run_env(daemon, env=home(install(tool=None))), "version.info's 26.0.0 is every")

    def test_disagreeing_tool_and_injection_refuse(self, daemon: RunningDaemon, install) -> None:  # type: ignore[no-untyped-def]
        injection = next(
            (
                c
                for c in sorted(releases.injection_commits())
                if releases.wire_of_injection(c) not in (APRIL, None)
            ),
            None,
        )
        injection = needs(injection, "msopcom commit of a wire other than April's")
        lib = install(tool=APRIL_COMMIT, injection=injection)
        refused_before_running(run_env(daemon, env=home(lib)), f"wire {APRIL}", f"msopcom {injection[:8]}")

    def test_the_april_pair_runs_checked(self, daemon: RunningDaemon, install) -> None:  # type: ignore[no-untyped-def]
        injection = needs(injection_commit(APRIL), "msopcom commit of the April wire")
        lib = install(tool=APRIL_COMMIT, injection=injection)
        result = run_env(daemon, env=home(lib))
        assert result.returncode == 0, result.stderr
        assert printed(result.stdout)["LD_PRELOAD"].startswith(str(lib.resolve() / hooks.INJECTION))

    def test_none_found_on_a_cann_host_refuses_unless_allowed(self, daemon: RunningDaemon, tmp_path: Path) -> None:
        env = bare_env(ASCEND_HOME_PATH=str(tmp_path / "empty"))
        refused_before_running(
            run_env(daemon, env=env), "no msSanitizer hook libraries were found", str(tmp_path / "empty")
        )
        allowed = run_env(daemon, "--allow-unchecked", env=env)
        assert allowed.returncode == 0 and "UNCHECKED" in allowed.stdout.splitlines()[-1], allowed.stdout

    def test_heap_option_without_hooks_refuses_anywhere(self, daemon: RunningDaemon) -> None:
        refused_before_running(
            run_env(daemon, "--check-cann-heap=yes", env=bare_env()),
            "--check-cann-heap needs them; no msSanitizer hook libraries were found; looked in nowhere",
        )

    def test_no_cann_no_word(self, daemon: RunningDaemon) -> None:
        """On a host with no sign of CANN a plain run says nothing of hooks."""
        result = run_env(daemon, env=bare_env())
        assert result.returncode == 0 and result.stderr == "", result.stderr
        assert "UNCHECKED" not in result.stdout

    def test_a_socket_the_daemon_refuses_refuses_the_run_unless_allowed(self, short_dir: Path, install) -> None:  # type: ignore[no-untyped-def]
        """A daemon at its limit of msSanitizer sockets opens none for a second run: that run would go unchecked,
        so it is refused like hooks that cannot be used, and --allow-unchecked lets it run, saying so."""
        limited = start_daemon(short_dir, "--max-compat-sockets-per-uid", "1")
        env = home(install())
        started = short_dir / "started"
        holder = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", "run", "--socket", str(limited.socket), "--", "/bin/sh", "-c",
             f"touch {started}; exec sleep 30"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while not started.exists() and holder.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert started.exists(), holder.communicate()
            refused = run_env(limited, env=env)
            assert refused.returncode == 1 and refused.stdout == "", refused.stdout + refused.stderr
            assert refused.stderr.startswith("[sanitizerd] ERROR: the daemon opened no socket for msSanitizer's")
            assert refused.stderr.count("\n") == 1 and "--allow-unchecked" in refused.stderr, refused.stderr
            allowed = run_env(limited, "--allow-unchecked", env=env)
            assert allowed.returncode == 0 and "LD_PRELOAD" not in printed(allowed.stdout), allowed.stderr
            assert "UNCHECKED" in allowed.stdout.splitlines()[-1], allowed.stdout
        finally:
            holder.terminate()
            holder.communicate()
            assert stop_daemon(limited) == 0, limited.log_text()

    def test_both_heaps_refused(self, daemon: RunningDaemon) -> None:
        result = run_env(daemon, "--check-cann-heap=yes", "--check-device-heap=yes", env=bare_env())
        assert result.returncode == 1
        assert "CANNOT enable both --check-cann-heap and --check-device-heap" in result.stderr


# What the hooks do, in Python: connect to the socket the environment names (padded abstract address, retrying as
# they do), read the Config, send one HOST_RECORD (a free of memory never allocated, from aclrtFree), and close.
# argv: the Config's size, then the variables the layout's launcher names the socket in.
# How msSanitizer's hooks reach the socket the environment names: the padded abstract address, 50 tries 100 ms apart.
_CONNECT = r"""
sock = socket.socket(socket.AF_UNIX)
for _ in range(50):
    try:
        sock.connect(b"\0" + name + b"\0" * (107 - len(name)))
        break
    except OSError:
        time.sleep(0.1)
"""
_HOOKS_PROGRAM = r"""
import os, socket, struct, sys, time
name = os.environ["MSOP_SOCKET_PATH"].encode()
assert all(os.environ[variable] == name.decode() for variable in sys.argv[2].split(","))
""" + _CONNECT + r"""
config = b""
while len(config) < int(sys.argv[1]):
    config += sock.recv(int(sys.argv[1]) - len(config))
record = struct.pack("<IBB2xQQQQQ", 1, 3, 0, 0, 0x12C0C0001000, 0, 0, 0)  # FREE, ACL, dst, size, params, root
sock.sendall(struct.pack("<I", 1000) + record)
sock.close()
sys.stdout.write(f"hooks sent {len(config)}\n")  # one write: the run's live reports share this stdout
"""


def hooks_program(tmp_path: Path, extra: str = "") -> list[str]:
    """The program above, with the April wire's Config size and socket variables (it packs April's HOST_RECORD)."""
    program = tmp_path / "hooks.py"
    program.write_text(_HOOKS_PROGRAM + extra)
    layout = wire.LAYOUTS[LAYOUT]
    return ["/usr/bin/python3", str(program), str(layout.config.size), ",".join(layout.socket_env)]


def test_a_hooked_program_is_a_session_of_the_run(daemon: RunningDaemon, install, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """End to end: ``sanitizerd run`` preloads the (stand-in) hooks, the program speaks msSanitizer's protocol over
    the socket the run's daemon opened, and its illegal free is reported by the run like any finding."""
    lib = install(libs=wire.LAYOUTS[LAYOUT].preload["check_cann_heap"])
    program = hooks_program(tmp_path)
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--check-cann-heap=yes", "--", *program, env=home(lib), timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert f"hooks sent {program[2]}" in result.stdout
    assert "0x12c0c0001000" in result.stdout.lower(), result.stdout
    assert "SUMMARY: job run-" in result.stdout and "1 error(s)" in result.stdout, result.stdout


def test_a_hooked_programs_session_is_saved_and_replayed(daemon: RunningDaemon, install, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``--save`` records the compat session as native messages; ``sanitizerd replay`` finds the same error."""
    env = home(install())
    saved = tmp_path / "run.sds"
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--save", str(saved), "--", *hooks_program(tmp_path), env=env,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0 and "1 error(s)" in result.stdout, result.stdout + result.stderr
    replayed = sanitizerd("replay", "--socket", str(daemon.socket), str(saved), env=env, timeout=60)
    assert replayed.returncode == 0, replayed.stderr
    assert "illegal free()" in replayed.stdout and "0x12c0c0001000" in replayed.stdout, replayed.stdout


def test_a_program_of_its_own_gets_the_socket_with_the_layout_named(daemon: RunningDaemon, tmp_path: Path) -> None:
    """No hooks installed, ``SANITIZERD_COMPAT_LAYOUT`` set: the program (a client of msSanitizer's protocol of its
    own, as the C test client) gets the socket's name and nothing is preloaded."""
    program = hooks_program(tmp_path, "import os; print('LD_PRELOAD' in os.environ)\n")
    env = bare_env(SANITIZERD_COMPAT_LAYOUT=LAYOUT)
    result = sanitizerd("run", "--socket", str(daemon.socket), "--", *program, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "illegal free()" in result.stdout and "False" in result.stdout.split(), result.stdout
    assert "hook libraries" not in result.stderr, result.stderr  # (the system python cannot attach: its own line)
    refused = run_env(daemon, env=bare_env(SANITIZERD_COMPAT_LAYOUT="nonesuch"))
    assert refused.returncode == 1 and "SANITIZERD_COMPAT_LAYOUT=nonesuch is not a layout" in refused.stderr


_CONFIG_READER = r"""
import os, socket, sys, time
name = os.environ["MSOP_SOCKET_PATH"].encode()
print("MSSANITIZER_PID" in os.environ, os.environ["LD_PRELOAD"])
""" + _CONNECT + r"""
config = b""
while len(config) < int(sys.argv[1]):
    chunk = sock.recv(int(sys.argv[1]) - len(config))
    if not chunk:
        break
    config += chunk
sock.close()
print("hooks read", len(config))
"""


def test_a_later_releases_hooks_get_its_config_in_its_socket_variable(
    daemon: RunningDaemon, install, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """26.1.0's install (no stub, the socket in MSOP_SOCKET_PATH alone), identified with no variable set: its hooks
    (here a Python stand-in under the preloaded stand-in libraries) connect where that release's launcher points
    them and read that release's Config, of its own size."""
    layout = wire.layout_named("26.1.0")
    assert layout is not None
    lib = install(tool=needs(tool_commit(layout.name), f"msSanitizer commit of {layout.name}"))
    program = tmp_path / "reader.py"
    program.write_text(_CONFIG_READER)
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--", "/usr/bin/python3", str(program), str(layout.config.size),
        env=home(lib), timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    preload = ":".join(str(lib.resolve() / n) for n in layout.preload["default"])
    assert result.stdout.splitlines()[:2] == [f"False {preload}", f"hooks read {layout.config.size}"], result.stdout
