"""Wall time of ``pytest --sanitizerd`` against the same test file without it (issue 24): the plugin's two-test file
(an emulated kernel that reads past its allocation, and a clean one; each test's client left open, as
``client_shim.connect()`` allows, for the interpreter's exit to close) run in a fresh pytest process each time,
alternating with and without the plugin. With it, each run starts and stops a private daemon (no daemon is
running: the runs get an empty ``XDG_RUNTIME_DIR``, and the run stops if the plugin reports using any other).
Prints each side's median, minimum and maximum, and the difference of the medians; exits 1 if a run's outcome
is not the expected one (with the plugin: one failure naming the illegal read on device 0, one pass, no traceback;
without it: both fail, no daemon being named).

    .venv/bin/python benchmarks/pytest_plugin_wall.py [--runs 7]

The file is installed (``pip install -e .``): pytest finds the plugin by its entry point.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

# The README's instrumenting snippet as two tests would use it (no device named: device 0, the client's default).
TESTS = """
import client_shim
from client_shim import EventKind, Space, accesses

GM = 0x12C0C0000000


def launch(name, past_the_end):
    client = client_shim.connect()  # closed at the interpreter's exit (the plugin closes it when the tests end)
    client.device_summary("Ascend910B1", block_num=8)
    client.malloc(GM, 65536)
    kernel = client.kernel_begin(name, block_dim=8)
    client.events(kernel, accesses(EventKind.READ, Space.GM, GM + (65536 if past_the_end else 0), 32, block_num=8))
    client.kernel_end(kernel)
    return client.wait_kernel(kernel, timeout=60)


def test_clean_add():
    launch("clean_add", past_the_end=False)


def test_buggy_add():
    launch("buggy_add", past_the_end=True)
"""

# What each side must print: the run is measured only if it did what the acceptance asks.
WITH_PLUGIN = ("1 failed, 1 passed", "====== ERROR: illegal read of size 256", "in block aiv(0) on device 0",
               "on a private daemon")  # fmt: skip
WITHOUT_PLUGIN = ("2 failed", "SANITIZERD_SOCKET is not set")
NEVER = ("Traceback", "lost sanitizerd")


def run(directory: Path, plugin: bool) -> float:
    runtime = directory / "runtime"
    shutil.rmtree(runtime, ignore_errors=True)
    runtime.mkdir(mode=0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime))  # no daemon of the user's to find: a private one
    for name in ("SANITIZERD_SOCKET", "SANITIZERD_JOB", "SANITIZERD_ATTACH"):
        env.pop(name, None)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_kernels.py"]
    if plugin:
        command.insert(-1, "--sanitizerd")
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=directory, env=env, timeout=300)
    elapsed = time.perf_counter() - started
    out = result.stdout + result.stderr
    wanted = WITH_PLUGIN if plugin else WITHOUT_PLUGIN
    missing = [text for text in wanted if text not in out] + [f"no {text!r}" for text in NEVER if text in out]
    if result.returncode != 1 or missing:
        sys.exit(f"{'with' if plugin else 'without'} the plugin, exit {result.returncode}, wrong: {missing}\n{out}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="runs of each side [7]")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="sd-wall-", dir="/tmp"))
    try:
        (directory / "test_kernels.py").write_text(textwrap.dedent(TESTS))
        times: dict[bool, list[float]] = {False: [], True: []}
        run(directory, plugin=False)  # warm: the first run pays for cold files and byte-compiling the test file
        for _ in range(args.runs):
            for plugin in (False, True):  # alternating: the machine's load drifts alike for both sides
                times[plugin].append(run(directory, plugin))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    for plugin, label in ((False, "pytest test_kernels.py"), (True, "pytest --sanitizerd test_kernels.py")):
        values = times[plugin]
        print(f"{label:40} median {statistics.median(values):6.2f} s  (min {min(values):.2f}, max {max(values):.2f}, "
              f"{len(values)} runs)")  # fmt: skip
    difference = statistics.median(times[True]) - statistics.median(times[False])
    print(f"{'difference of the medians':40} {difference:+6.2f} s")


if __name__ == "__main__":
    main()
