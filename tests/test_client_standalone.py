"""The client is a package of its own (issue 27): client_shim needs sanitizerd_protocol and nothing of the daemon.

A user's program imports client_shim inside their process, often from an environment where only the client and the
protocol are installed. The program below runs in a fresh interpreter in which ``sanitizerd`` cannot be imported at
all (a meta-path finder refuses it, ahead of the editable install's finder), imports every module of client_shim,
and sends a kernel with an illegal read to a daemon started separately; the daemon must find it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.conftest import ROOT, RunningDaemon

PROGRAM = textwrap.dedent(
    """
    import importlib, importlib.abc, json, pkgutil, sys

    class NoDaemon(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "sanitizerd" or name.startswith("sanitizerd."):
                raise ModuleNotFoundError(f"{name} is not installed here", name=name)
            return None

    sys.meta_path.insert(0, NoDaemon())
    try:
        import sanitizerd
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit("the blocker let sanitizerd in")

    import client_shim
    modules = sorted(
        info.name for info in pkgutil.walk_packages(client_shim.__path__, "client_shim.")
        if not info.name.startswith("client_shim._autoattach")
    )
    for name in modules:
        importlib.import_module(name)

    from client_shim import Client, EventKind, Space, accesses

    with Client(sys.argv[1], job="standalone-client", timeout=30) as client:
        client.malloc(0x1000, 256)
        kernel = client.kernel_begin("past_the_end", 1)
        client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 256, 32, block_num=1))
        client.kernel_end(kernel)
        verdict = client.wait_kernel(kernel, timeout=30)
        client.free(0x1000)
    print(json.dumps({
        "modules": modules,
        "daemon_modules": sorted(name for name in sys.modules if name.partition(".")[0] == "sanitizerd"),
        "events": verdict.events,
        "errors": verdict.errors,
    }))
    """
)


def test_client_shim_works_with_sanitizerd_unimportable(daemon: RunningDaemon) -> None:
    ran = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(daemon.socket)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout.splitlines()[-1])
    assert result["daemon_modules"] == []
    assert {"client_shim.client", "client_shim.emulator", "client_shim.attach", "client_shim.transport"} <= set(
        result["modules"]
    )
    assert (result["events"], result["errors"]) == (1, 1), result  # the read past the buffer was really checked
