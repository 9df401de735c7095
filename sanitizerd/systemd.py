"""systemd integration without libsystemd: socket activation and the notify protocol (sd_listen_fds(3),
sd_notify(3)). Outside systemd every function here is a no-op, so the daemon also runs standalone.

- Socket activation: systemd passes listening sockets as file descriptors 3, 4, ... with ``LISTEN_FDS`` (and
  ``LISTEN_PID``, which must be this process).
- Notify: ``READY=1`` once serving, ``STATUS=...`` lines, ``STOPPING=1`` when draining, and ``WATCHDOG=1`` pings
  at half of ``WATCHDOG_USEC``; each a datagram to ``NOTIFY_SOCKET`` (a path, or ``@`` for the abstract
  namespace).
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping

SD_LISTEN_FDS_START = 3


def listen_sockets(environ: MutableMapping[str, str] | None = None) -> list[socket.socket]:
    """The sockets systemd passed to this process (none when not socket-activated). The variables are unset
    so that child processes do not take the sockets for theirs."""
    env = os.environ if environ is None else environ
    try:
        if int(env.get("LISTEN_PID", "0")) != os.getpid():
            return []
        count = int(env.get("LISTEN_FDS", "0"))
    except ValueError:
        return []
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        env.pop(name, None)
    sockets = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count):
        os.set_inheritable(fd, False)
        sockets.append(socket.socket(fileno=fd))
    return sockets


class Notifier:
    """Messages to the service manager; does nothing when ``NOTIFY_SOCKET`` is not set."""

    def __init__(self, environ: MutableMapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.pop("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]
        self.address = address
        watchdog_pid = env.pop("WATCHDOG_PID", "")
        usec = env.pop("WATCHDOG_USEC", "")
        mine = not watchdog_pid or watchdog_pid == str(os.getpid())
        self.watchdog_usec = int(usec) if usec.isdigit() and mine else 0

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between pings (half the manager's timeout, as sd_watchdog_enabled(3) advises), or None."""
        return self.watchdog_usec / 2e6 if self.watchdog_usec and self.enabled else None

    def notify(self, *fields: str) -> None:
        if not self.address:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto("\n".join(fields).encode(), self.address)
        except OSError:
            pass  # the manager went away, or no fd is left now (a flood): nothing to tell, nothing to end

    def ready(self, status: str) -> None:
        self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, status: str) -> None:
        self.notify(f"STATUS={status}")

    def stopping(self, status: str) -> None:
        self.notify("STOPPING=1", f"STATUS={status}")

    def watchdog(self) -> None:
        self.notify("WATCHDOG=1")
