"""The acceptance of msSanitizer compatibility: the demo add kernel sent as msSanitizer packets by the C client
(client_shim/native/msop_add_client.c, built here with ``cc`` for each wire mssanitizer_wire.h declares) through the
compat socket of a ``sanitizerd run`` gives the same findings, in text and in JSON, as the client_shim demo
examples/add_custom.py; and a client of one wire sent to a socket told another is refused by name, with none of the
demo's findings (nothing it sent was misread into a report).

No hooks are installed here: ``SANITIZERD_COMPAT_LAYOUT`` names the wire, so the daemon opens the job's compat
socket and the run exports MSOP_SOCKET_PATH, for a program that speaks msSanitizer's protocol itself. The C client
sends the kernel ELF built from add_custom_kernel.cpp (``c++ -g``), whose DWARF gives the stacks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sanitizerd.compat import wire
from tests.conftest import DEMO, RunningDaemon, program_env, sanitizerd
from tests.native_build import WIRES, build_client, build_kernel
from tests.test_hooks import bare_env

OPTIONS = ("-t", "memcheck", "--leak-check", "yes")
JOB = re.compile(r"SUMMARY: job (\S+):")
ERRORS = re.compile(r"SUMMARY: job \S+: .*?(\d+) error\(s\)")
# Identities of the run, not of the findings.
VOLATILE = {"job", "session", "pid", "id", "time"}
APRIL, V26_1_0, MASTER = "mssanitizer-4a419f05", "mssanitizer-74a1ad94", "mssanitizer-1e040de1"
BUGS = ("illegal read of size 224", "misaligned access of size 1\n", "illegal free()", "Direct leak of 4096")
# What a user reads when the daemon refuses a client of another wire (findings/render.py's wire_mismatch).
REFUSAL = "ERROR: msSanitizer's hooks speak another wire"


def reports(stdout: str) -> str:
    """The report text: every line but the run's summary, which names the job and counts events as each client
    batches them (the C client's path adds msSanitizer's BLOCK_FINISH and FINISH end frames)."""
    return "\n".join(line for line in stdout.splitlines() if "SUMMARY: job " not in line)


def numbered_from(first: int, stdout: str) -> str:
    """The demo's report as a client of a release whose tool numbers records from ``first`` prints it: the demo's
    serial numbers are the April tool's, from 0 (docs/mssanitizer-later.md, "Serial numbers")."""
    return re.sub(r"\(serialNo:(\d+)\)", lambda n: f"(serialNo:{int(n.group(1)) + first})", stdout)


def serials_from(first: int, found: object) -> object:
    """The demo's findings (JSON) with every serial number moved as ``numbered_from`` moves the report's."""
    if isinstance(found, dict):
        return {k: v + first if k == "serial" else serials_from(first, v) for k, v in found.items()}
    if isinstance(found, list):
        return [serials_from(first, item) for item in found]
    return found


def findings(daemon: RunningDaemon, job: str) -> list[dict[str, object]]:
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    assert query.returncode == 0, query.stderr
    found = json.loads(query.stdout)
    return sorted(({k: v for k, v in f.items() if k not in VOLATILE} for f in found), key=json.dumps)


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The kernel ELF ("kernel") and the client built for each wire, by layout name."""
    directory = tmp_path_factory.mktemp("native")
    return {"kernel": build_kernel(directory)} | {layout: build_client(directory, layout) for layout in WIRES}


def run_client(
    daemon: RunningDaemon, native: dict[str, Path], client: str, told: str
) -> subprocess.CompletedProcess[str]:
    """``sanitizerd run`` of the client built for ``client``'s wire, its socket opened for the layout ``told``."""
    env = bare_env(SANITIZERD_COMPAT_LAYOUT=told)
    return sanitizerd("run", "--socket", str(daemon.socket), *OPTIONS, "--", str(native[client]),
                      str(native["kernel"]), env=env)  # fmt: skip


def test_c_client_of_each_wire_equals_the_demo(daemon: RunningDaemon, native: dict[str, Path]) -> None:
    demo = sanitizerd("run", "--socket", str(daemon.socket), *OPTIONS, "--", sys.executable, str(DEMO),
                      env=program_env())  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    assert "4 error(s), 0 warning(s)" in demo.stdout
    theirs = findings(daemon, JOB.search(demo.stdout).group(1))  # type: ignore[union-attr]

    for layout in WIRES:
        first = wire.LAYOUTS[layout].first_serial
        client = run_client(daemon, native, layout, layout)
        said = f"{layout}:\n{client.stdout}{client.stderr}"
        assert client.returncode == 0, said
        assert "add_custom_kernel: 24 slots sent and checked" in client.stderr, said
        assert reports(client.stdout) == numbered_from(first, reports(demo.stdout)), said
        for bug in BUGS:
            assert bug in client.stdout, said
        assert "4 error(s), 0 warning(s)" in client.stdout, said

        ours = findings(daemon, JOB.search(client.stdout).group(1))  # type: ignore[union-attr]
        assert ours == serials_from(first, theirs), layout
        [read] = [f for f in ours if f["kind"] == "illegal_read"]
        assert [(s["file"], s["line"], s["column"]) for s in read["stack"]] == [  # type: ignore[union-attr]
            ("/opt/samples/add_custom/add_custom.cpp", 18, 5),
            ("/opt/samples/add_custom/add_custom.cpp", 54, 5),
        ]


# The daemon ends these as a bad_packet today: the first SANITIZER_RECORD's number is another packet (or none) on
# the other wire, and an unknown packet number is not yet named a wire mismatch, so the run says only "no records
# received". Nothing is misread either way (asserted before the refusal is looked for).
UNNAMED_TODAY = {(V26_1_0, APRIL), (APRIL, V26_1_0)}


@pytest.mark.parametrize(
    ("client", "told"),
    [
        (V26_1_0, APRIL),  # SANITIZER_RECORD 1004, which April does not define; a Config 4 bytes short
        (APRIL, V26_1_0),  # SANITIZER_RECORD 1003, 26.1.0's MEM_REGION_PERMISSION
        (MASTER, V26_1_0),  # the same packets; a Config 4 bytes short and the heads at master's offsets
    ],
)
def test_a_client_of_another_wire_is_refused_by_name(
    daemon: RunningDaemon, native: dict[str, Path], client: str, told: str
) -> None:
    run = run_client(daemon, native, client, told)
    said = f"{client} told {told}:\n{run.stdout}{run.stderr}"
    # Never a misread report: none of the demo's findings, no kernel checked, and the client saw no verdict.
    for bug in ("illegal read", "misaligned access", "illegal free()", "LeakCheck", "Direct leak"):
        assert bug not in run.stdout, said
    assert "24 slots sent and checked" not in run.stderr, said
    assert run.returncode != 0, said
    if (client, told) in UNNAMED_TODAY and REFUSAL not in run.stdout:
        pytest.xfail("the daemon refuses an unknown packet number as bad_packet, not as a wire_mismatch finding")
    # The named refusal, and a run that is not clean.
    assert REFUSAL in run.stdout, said
    assert f"is not {told}'s" in run.stdout or f"({told} defines" in run.stdout, said
    errors = ERRORS.search(run.stdout)
    assert errors is not None and int(errors.group(1)) > 0, said
    found = findings(daemon, JOB.search(run.stdout).group(1))  # type: ignore[union-attr]
    assert [f["kind"] for f in found] == ["wire_mismatch"], said
    if client == MASTER:
        # The Config the 26.1.0 socket wrote is 4 bytes short of master's: the client polled for it, said so, and
        # sent the launch anyway, whose heads the daemon refused.
        assert "no whole Config from the server within 1 s (2588 of the 2592 bytes" in run.stderr, said
        assert "ProtocolOffsetInfo.blockHeadSize is 0" in run.stdout, said
