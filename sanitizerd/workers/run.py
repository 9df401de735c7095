"""``sanitizerd serve``'s process: one daemon, or (``--workers N``) the listener of N worker processes."""

from __future__ import annotations

import sys

import anyio

from client_shim import discovery
from sanitizerd import allocator
from sanitizerd.daemon import Daemon, DaemonSettings, StartupError
from sanitizerd.socket_file import DaemonAlreadyRunning
from sanitizerd.workers.listener import listener_daemon


def run_daemon(settings: DaemonSettings) -> int:
    """Serve until stopped; 0 after a clean stop, 1 (after one line on stderr saying why) when it cannot start."""
    allocator.tune()
    daemon = listener_daemon(settings) if settings.workers > 1 else Daemon(settings)
    try:
        anyio.run(daemon.serve, backend="asyncio", backend_options={"use_uvloop": True})
    except (DaemonAlreadyRunning, StartupError, discovery.UnsafeDirectory) as exc:
        print(f"sanitizerd: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
