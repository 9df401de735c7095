"""The acceptance of msSanitizer compatibility: the demo add kernel sent as msSanitizer packets by the C client
(client_shim/native/msop_add_client.c, built here with ``cc``) through the compat socket of a ``sanitizerd run``
gives the same findings, in text and in JSON, as the client_shim demo examples/add_custom.py.

No hooks are installed here: ``SANITIZERD_COMPAT_LAYOUT`` names the wire, so the daemon opens the job's compat
socket and the run exports MSOP_SOCKET_PATH, for a program that speaks msSanitizer's protocol itself. The C client
sends the kernel ELF built from add_custom_kernel.cpp (``c++ -g``), whose DWARF gives the stacks.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.conftest import DEMO, RunningDaemon, program_env, sanitizerd
from tests.native_build import build_client, build_kernel
from tests.test_hooks import LAYOUT, bare_env

OPTIONS = ("-t", "memcheck", "--leak-check", "yes")
JOB = re.compile(r"SUMMARY: job (\S+):")
# Identities of the run, not of the findings.
VOLATILE = {"job", "session", "pid", "id", "time"}


def reports(stdout: str) -> str:
    """The report text: every line but the run's summary, which names the job and counts events as each client
    batches them (the C client's path adds msSanitizer's BLOCK_FINISH and FINISH end frames)."""
    return "\n".join(line for line in stdout.splitlines() if "SUMMARY: job " not in line)


def findings(daemon: RunningDaemon, job: str) -> list[dict[str, object]]:
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    assert query.returncode == 0, query.stderr
    found = json.loads(query.stdout)
    return sorted(({k: v for k, v in f.items() if k not in VOLATILE} for f in found), key=json.dumps)


def test_c_client_through_the_compat_socket_equals_the_demo(daemon: RunningDaemon, tmp_path: Path) -> None:
    client, kernel = build_client(tmp_path), build_kernel(tmp_path)
    env = bare_env(SANITIZERD_COMPAT_LAYOUT=LAYOUT)
    native = sanitizerd("run", "--socket", str(daemon.socket), *OPTIONS, "--", str(client), str(kernel), env=env)
    assert native.returncode == 0, native.stdout + native.stderr
    assert "add_custom_kernel: 24 slots sent and checked" in native.stderr

    demo = sanitizerd("run", "--socket", str(daemon.socket), *OPTIONS, "--", sys.executable, str(DEMO),
                      env=program_env())  # fmt: skip
    assert demo.returncode == 0, demo.stderr

    assert reports(native.stdout) == reports(demo.stdout)
    for bug in ("illegal read of size 224", "misaligned access of size 1\n", "illegal free()", "Direct leak of 4096"):
        assert bug in native.stdout
    assert "4 error(s), 0 warning(s)" in native.stdout and "4 error(s), 0 warning(s)" in demo.stdout

    ours, theirs = (findings(daemon, JOB.search(run.stdout).group(1)) for run in (native, demo))
    assert ours == theirs
    [read] = [f for f in ours if f["kind"] == "illegal_read"]
    assert [(s["file"], s["line"], s["column"]) for s in read["stack"]] == [  # type: ignore[union-attr]
        ("/opt/samples/add_custom/add_custom.cpp", 18, 5),
        ("/opt/samples/add_custom/add_custom.cpp", 54, 5),
    ]
