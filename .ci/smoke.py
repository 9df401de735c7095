"""The installed sanitizerd, as a user gets it from the wheel: a clean venv with the wheel (and its postgresql extra,
and pytest) installed, its commands run from a temporary directory outside the checkout, so nothing the checkout holds
can stand in for a file the wheel lacks (issue 24: the migrations and client_shim/native once did, for editable
installs only).

    python3 .ci/smoke.py [--compiled all|none] dist/sanitizerd-*.whl

Checks, each bounded by a timeout and named when it fails: (a) the README's demo under `sanitizerd run`; (b) `serve
--store postgresql://…` against a throwaway PostgreSQL cluster (Debian's initdb/pg_ctl, as tests/postgres_server.py
starts one): the daemon applies the packaged migrations, a run stores the demo's findings and `findings --store`
lists them; (c) the C client built against the installed header, checked through the compat socket; (d) `pytest
--sanitizerd` on a clean and a buggy test; (e) a SARIF report. With ``--compiled all|none``, first (f): all or none
of the compiled hot loops (sanitizerd.native) are built, so that CI runs the whole smoke a second time on a wheel
built where no C compiler was. Only the standard library here: the smoke venv holds the wheel, its dependencies and
pytest, nothing of the test extra.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
DEMO = CHECKOUT / "examples" / "add_custom.py"
STEP_TIMEOUT = 60  # seconds for one command; the whole smoke takes well under a minute on CI's machine
INSTALL_TIMEOUT = 300  # pip may have to download the dependencies its cache lacks
# The msSanitizer release whose wire the C client speaks by default (April's: client_shim/native); named here as a user
# names it, since no hooks are installed on a machine without CANN.
LAYOUT = "mssanitizer-4a419f05"
# The demo's four planted bugs, as msSanitizer reports them, and the summary's count of them.
DEMO_BUGS = ("illegal read of size 224", "misaligned access of size 1", "illegal free()", "Direct leak of 4096")
DEMO_SUMMARY = "4 error(s), 0 warning(s)"
JOB = re.compile(r"SUMMARY: job (\S+):")
# What would make a command find something other than the installed package: another daemon, CANN's hooks, a path.
HOST_VARIABLES = (
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "LD_PRELOAD", "LD_PRELOAD_PATH", "ASCEND_HOME_PATH",
    "ASCEND_TOOLKIT_HOME", "SANITIZERD_SOCKET", "SANITIZERD_JOB", "SANITIZERD_ATTACH", "SANITIZERD_COMPAT_LAYOUT",
    "MSOP_SOCKET_PATH", "MSSANITIZER_PID", "SANITIZERD_NATIVE",
)  # fmt: skip

# The clean and the buggy test of tests/test_pytest_plugin.py, copied: the smoke imports nothing from the checkout.
KERNEL_TESTS = """
import client_shim
from client_shim import EventKind, Space, accesses


def launch(name, *, past_the_end):
    c = client_shim.connect(device=0)
    c.malloc(0x1000, 512)
    k = c.kernel_begin(name, 1)
    address = 0x1000 + (512 if past_the_end else 0)
    c.events(k, accesses(EventKind.READ, Space.GM, address, 32, block_num=1))
    c.kernel_end(k)
    verdict = c.wait_kernel(k, timeout=30)
    c.free(0x1000)
    c.close()
    return verdict


def test_clean_kernel():
    launch("clean_add", past_the_end=False)


def test_buggy_kernel():
    launch("buggy_add", past_the_end=True)  # asserts nothing: only sanitizerd can fail it
"""


class SmokeFailure(Exception):
    """A check that did not hold: its message says what ran and what came out."""


def shown(result: subprocess.CompletedProcess[str]) -> str:
    """A command's outcome for a failure message: its status and the end of what it printed."""
    return (
        f"exit status {result.returncode}\n--- stdout (end) ---\n{result.stdout[-4000:]}"
        f"\n--- stderr (end) ---\n{result.stderr[-4000:]}"
    )


@dataclass
class Smoke:
    work: Path  # the temporary directory every command runs in: not the checkout, so it is not importable
    venv: Path
    env: dict[str, str]

    def run(
        self, *command: str | Path, timeout: float = STEP_TIMEOUT, extra: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        words = [str(word) for word in command]
        env = dict(self.env, **(extra or {}))
        try:
            return subprocess.run(
                words, capture_output=True, text=True, timeout=timeout, cwd=cwd or self.work, env=env,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise SmokeFailure(f"`{' '.join(words)}` still ran after {timeout:.0f} s") from exc
        except OSError as exc:
            raise SmokeFailure(f"`{' '.join(words)}` did not start: {exc}") from exc

    def expect(self, result: subprocess.CompletedProcess[str], status: int, *needles: str, what: str) -> None:
        if result.returncode != status:
            raise SmokeFailure(f"{what}: expected exit status {status}\n{shown(result)}")
        for needle in needles:
            if needle not in result.stdout + result.stderr:
                raise SmokeFailure(f"{what}: {needle!r} not in its output\n{shown(result)}")

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def demo(self, *options: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`sanitizerd run [options] -t memcheck --leak-check yes -- python add_custom.py` with the venv's Python."""
        return self.run(self.bin / "sanitizerd", "run", *options, "-t", "memcheck", "--leak-check", "yes", "--",
                        self.bin / "python", self.work / "add_custom.py", extra=extra)  # fmt: skip


def install(wheel: Path, work: Path) -> Smoke:
    """A clean venv, the wheel with its postgresql extra and pytest installed in it (pip's cache serves what it
    has), and the proof that its Python imports sanitizerd from the venv, not from the checkout."""
    venv = work / "venv"
    env = {k: v for k, v in os.environ.items() if k not in HOST_VARIABLES}
    # The venv's commands first, then the system's (runuser is in sbin); not the caller's PATH, where an mssanitizer
    # or another sanitizerd may lie.
    env["PATH"] = os.pathsep.join((str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"))
    # Private daemons (run's embedded one, the pytest plugin's) keep their sockets and state under the work directory.
    env["TMPDIR"] = str(work / "tmp")
    env["XDG_RUNTIME_DIR"] = str(work / "runtime")
    # Nor the host's daemon or its configuration (its store, its metrics port), where CI's machine has them: the
    # smoke checks what a wheel does on its own.
    env["SANITIZERD_HOST_SOCKET"] = str(work / "runtime" / "host.sock")
    env["SANITIZERD_CONFIG"] = str(work / "runtime" / "host.toml")
    for directory in ("tmp", "runtime"):
        (work / directory).mkdir(mode=0o700)
    smoke = Smoke(work, venv, env)
    made = smoke.run(sys.executable, "-m", "venv", venv)
    smoke.expect(made, 0, what="python3 -m venv")
    pip = smoke.run(venv / "bin" / "python", "-m", "pip", "install", "-q", f"{wheel}[postgresql]", "pytest",
                    timeout=INSTALL_TIMEOUT)  # fmt: skip
    smoke.expect(pip, 0, what=f"pip install {wheel.name}[postgresql] pytest")
    where = smoke.run(venv / "bin" / "python", "-c", "import sanitizerd, client_shim; print(sanitizerd.__file__); "
                      "print(client_shim.__file__)")  # fmt: skip
    smoke.expect(where, 0, what="import sanitizerd, client_shim")
    for module in where.stdout.split():
        if not Path(module).resolve().is_relative_to(venv.resolve()):
            raise SmokeFailure(f"the venv's Python imports {module}, not the installed package")
    shutil.copy(DEMO, work / "add_custom.py")  # examples/ is not part of the package: the user's program
    return smoke


def check_demo(smoke: Smoke) -> None:
    """(a) The README's quick start with the installed command: the four bugs and the summary."""
    smoke.expect(smoke.demo(), 0, *DEMO_BUGS, DEMO_SUMMARY, what="sanitizerd run of the demo")


def check_sarif(smoke: Smoke) -> None:
    """(e) `run --report FILE --report-format sarif`: a SARIF log with a run whose results hold the illegal read."""
    report = smoke.work / "out.sarif"
    smoke.expect(smoke.demo("--report", str(report), "--report-format", "sarif"), 0, DEMO_SUMMARY,
                 what="sanitizerd run --report out.sarif")  # fmt: skip
    try:
        log = json.loads(report.read_text())
    except (OSError, ValueError) as exc:
        raise SmokeFailure(f"out.sarif is not a JSON file: {exc}") from exc
    runs = log.get("runs") if isinstance(log, dict) else None
    if not runs or not isinstance(runs, list):
        raise SmokeFailure(f"out.sarif has no runs: {json.dumps(log)[:2000]}")
    results = [result for run in runs for result in run.get("results", [])]
    if len(results) != len(DEMO_BUGS):
        raise SmokeFailure(f"out.sarif has {len(results)} results, not the demo's {len(DEMO_BUGS)}: {results}")
    if not any("illegal read of size 224" in json.dumps(result) for result in results):
        raise SmokeFailure(f"out.sarif's results do not hold the illegal read: {results}")


def check_c_client(smoke: Smoke) -> None:
    """(c) The C client compiled against the header the wheel installed (not the checkout's), its kernel ELF from the
    installed source, checked through the compat socket as a program speaking msSanitizer's protocol."""
    where = smoke.run(smoke.bin / "python", "-c", "import client_shim; print(client_shim.__file__)")
    smoke.expect(where, 0, what="import client_shim")
    native = Path(where.stdout.strip()).parent / "native"
    for tool in ("cc", "c++"):
        if shutil.which(tool) is None:
            raise SmokeFailure(f"no {tool} on this machine: the C client cannot be built (Debian: gcc, g++)")
    client, kernel = smoke.work / "msop_add_client", smoke.work / "add_custom_kernel.o"
    built = smoke.run("cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I", native, "-o", client,
                      native / "msop_add_client.c")  # fmt: skip
    smoke.expect(built, 0, what=f"cc -I {native} msop_add_client.c")
    built = smoke.run("c++", "-g", "-O0", "-c", "-o", kernel, native / "add_custom_kernel.cpp")
    smoke.expect(built, 0, what="c++ -g -O0 -c add_custom_kernel.cpp")
    checked = smoke.run(smoke.bin / "sanitizerd", "run", "-t", "memcheck", "--leak-check", "yes", "--", client, kernel,
                        extra={"SANITIZERD_COMPAT_LAYOUT": LAYOUT})  # fmt: skip
    what = f"SANITIZERD_COMPAT_LAYOUT={LAYOUT} sanitizerd run -- ./msop_add_client add_custom_kernel.o"
    smoke.expect(checked, 0, "add_custom_kernel: 24 slots sent and checked", *DEMO_BUGS, DEMO_SUMMARY, what=what)


def check_pytest_plugin(smoke: Smoke) -> None:
    """(d) `pytest --sanitizerd` (its pytest11 entry point): the clean test passes, the buggy one fails on its read."""
    directory = smoke.work / "pytest"
    directory.mkdir()
    (directory / "test_kernels.py").write_text(textwrap.dedent(KERNEL_TESTS))
    result = smoke.run(smoke.bin / "python", "-m", "pytest", "-p", "no:cacheprovider", "-q", "--sanitizerd",
                       "test_kernels.py", cwd=directory)  # fmt: skip
    smoke.expect(result, 1, "1 failed, 1 passed", "FAILED test_kernels.py::test_buggy_kernel",
                 "ERROR: illegal read of size 32", what="python -m pytest --sanitizerd")  # fmt: skip


def postgres_binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = found[-1] if found else shutil.which("initdb")
    if not initdb:
        raise SmokeFailure("no PostgreSQL server installed (Debian: postgresql; .ci/run installs it)")
    return Path(initdb).parent


def as_postgres(command: list[str]) -> list[str]:
    """initdb and the server refuse to run as root: as root, they run as Debian's postgres user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_socket(path: Path, daemon: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise SmokeFailure(f"sanitizerd serve --store exited with {daemon.returncode}:\n{log.read_text()[-4000:]}")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(path))
                return
            except OSError:
                time.sleep(0.1)
    raise SmokeFailure(f"sanitizerd serve --store did not listen within {STEP_TIMEOUT} s:\n{log.read_text()[-4000:]}")


def check_postgres_store(smoke: Smoke) -> None:
    """(b) `serve --store postgresql://…`: a fresh database, so the daemon applies every packaged migration; a run of
    the demo through it; `findings --store` as the user's own role (the readers' policy of the second migration)."""
    binaries = postgres_binaries()
    # Its own directory under /tmp, not the work directory: the postgres user must reach it.
    directory = Path(tempfile.mkdtemp(prefix="sd-smoke-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    data, port = directory / "data", free_port()
    daemon: subprocess.Popen[bytes] | None = None
    try:
        # In the cluster's directory: the postgres user cannot enter the work directory (0700, ours).
        initdb = smoke.run(*as_postgres([str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
                           cwd=directory)  # fmt: skip
        smoke.expect(initdb, 0, what="initdb")
        options = f"-k {directory} -p {port} -c listen_addresses='' -c fsync=off"
        started = smoke.run(*as_postgres([str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                                          str(directory / "log"), "-w", "start"]), cwd=directory)  # fmt: skip
        smoke.expect(started, 0, what="pg_ctl start")
        me = pwd.getpwuid(os.getuid()).pw_name

        def sql(statement: str, database: str = "postgres") -> None:
            done = smoke.run(binaries / "psql", "-h", directory, "-p", str(port), "-U", "postgres", "-d", database,
                             "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", statement)  # fmt: skip
            smoke.expect(done, 0, what=f"psql -c {statement!r}")

        sql("CREATE ROLE sanitizerd LOGIN")
        if me not in ("postgres", "sanitizerd"):
            sql(f'CREATE ROLE "{me}" LOGIN')
        sql("CREATE DATABASE findings OWNER sanitizerd")

        def url(role: str) -> str:
            return f"postgresql://{role}@/findings?host={directory}&port={port}"

        sock, log = smoke.work / "store" / "s.sock", smoke.work / "store" / "daemon.log"
        sock.parent.mkdir()
        with open(log, "wb") as out:
            daemon = subprocess.Popen(
                [smoke.bin / "sanitizerd", "serve", "--socket", sock, "--state-dir", smoke.work / "store" / "state",
                 "--store", url("sanitizerd"), "--workers", "1"],
                stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=smoke.work, env=smoke.env,
            )  # fmt: skip
        wait_for_socket(sock, daemon, log)
        run = smoke.demo("--socket", str(sock))
        smoke.expect(run, 0, *DEMO_BUGS, DEMO_SUMMARY, what="sanitizerd run --socket (a daemon with --store)")
        job = JOB.search(run.stdout)
        if job is None:
            raise SmokeFailure(f"no job named in the run's summary:\n{shown(run)}")
        sql(f'GRANT SELECT ON sessions, findings, readers TO "{me}"', "findings")
        listed = smoke.run(smoke.bin / "sanitizerd", "findings", "--store", url(me), "--job", job.group(1), "--format",
                           "json")  # fmt: skip
        smoke.expect(listed, 0, what=f"sanitizerd findings --store {url(me)}")
        try:
            found = json.loads(listed.stdout)
        except ValueError as exc:
            raise SmokeFailure(f"findings --store --format json printed no JSON: {exc}\n{shown(listed)}") from exc
        kinds = sorted(str(finding.get("kind")) for finding in found)
        if len(found) != len(DEMO_BUGS) or "illegal_read" not in kinds:
            raise SmokeFailure(f"findings --store listed {kinds} for job {job.group(1)}, not the demo's four bugs")
        daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(STEP_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise SmokeFailure(f"sanitizerd serve --store did not drain within {STEP_TIMEOUT} s") from exc
        if code != 0:
            raise SmokeFailure(f"sanitizerd serve --store exited with {code}:\n{log.read_text()[-4000:]}")
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        subprocess.run(as_postgres([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=STEP_TIMEOUT, cwd=directory)  # fmt: skip
        shutil.rmtree(directory, ignore_errors=True)


CHECKS: tuple[tuple[str, Callable[[Smoke], None]], ...] = (
    ("(a) the demo under sanitizerd run", check_demo),
    ("(b) serve --store postgresql:// and findings --store", check_postgres_store),
    ("(c) the C client built against the installed header", check_c_client),
    ("(d) pytest --sanitizerd", check_pytest_plugin),
    ("(e) run --report out.sarif", check_sarif),
)


def check_compiled_loops(smoke: Smoke, expected: str) -> None:
    """The wheel's compiled loops are what its build promised: all of them from a machine with a C compiler, none
    from one without (whose wheel must then pass every other check on numpy's paths alone)."""
    listed = smoke.run(smoke.venv / "bin" / "python", "-c",
                       "import json, importlib.util; from sanitizerd import native; built = native.built(); "
                       "count = 'client_shim._record_buffer'; built[count] = bool(importlib.util.find_spec(count)); "
                       "print(json.dumps(built))")  # fmt: skip
    smoke.expect(listed, 0, what="sanitizerd.native.built()")
    built = json.loads(listed.stdout)
    wanted = expected == "all"
    wrong = sorted(name for name, present in built.items() if present != wanted)
    if wrong:
        raise SmokeFailure(f"expected {expected} of the compiled loops, but {wrong} {'are not' if wanted else 'are'} "
                           f"built: {built}")  # fmt: skip


def main(argv: list[str]) -> int:
    compiled = None
    if len(argv) == 4 and argv[1] == "--compiled" and argv[2] in ("all", "none"):
        compiled, argv = argv[2], [argv[0], argv[3]]
    if len(argv) != 2 or not argv[1].endswith(".whl") or not Path(argv[1]).is_file():
        print("usage: python3 .ci/smoke.py [--compiled all|none] dist/sanitizerd-*.whl", file=sys.stderr)
        return 2
    wheel = Path(argv[1]).resolve()
    checks = CHECKS
    if compiled is not None:
        checks = ((f"(f) {compiled} of the compiled loops built", lambda smoke: check_compiled_loops(smoke, compiled)),
                  *CHECKS)  # fmt: skip
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="sd-smoke-", dir="/tmp"))  # short: Unix socket paths must fit in 108 bytes
    try:
        try:
            smoke = install(wheel, work)
        except SmokeFailure as failure:
            print(f"smoke: FAILED to install {wheel.name}: {failure}", flush=True)
            return 1
        print(f"smoke: {wheel.name} installed in a clean venv ({time.monotonic() - began:.1f} s)", flush=True)
        failed = 0
        for name, check in checks:
            started = time.monotonic()
            try:
                check(smoke)
            except SmokeFailure as failure:
                failed += 1
                print(f"smoke: FAILED {name}: {failure}", flush=True)
            else:
                print(f"smoke: ok {name} ({time.monotonic() - started:.1f} s)", flush=True)
        print(f"smoke: took {time.monotonic() - began:.1f} s in all")
        # Alone on its line, the plain count CI's log reader takes as a test run's closing line.
        print(f"smoke: {len(checks) - failed} passed, {failed} failed")
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
