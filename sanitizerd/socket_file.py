"""The daemon's socket file: claimed from a dead daemon (never from a live one), bound and listening under a
temporary name, then published under its own name in one step, so that a client that sees the file can connect at
once; removed at the end only if it is still the file this daemon published."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

SOCKET_MODE = 0o660
LISTEN_BACKLOG = 4096  # the kernel caps it at net.core.somaxconn


class DaemonAlreadyRunning(Exception):
    pass


def claim_socket_path(path: Path) -> None:
    """Refuse a path a live daemon answers on; remove a stale socket file left by a dead one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() and not path.is_symlink():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1)
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        path.unlink(missing_ok=True)  # stale: nobody listens
        return
    except (BlockingIOError, TimeoutError):  # its backlog is full: it listens, but is flooded
        raise DaemonAlreadyRunning(f"a daemon is already serving on {path} (too busy to answer now)") from None
    except OSError as exc:
        if exc.errno in (errno.ENOTSOCK, errno.ECONNREFUSED):
            raise DaemonAlreadyRunning(f"{path} exists and is not a socket sanitizerd can replace") from exc
        raise
    finally:
        probe.close()
    raise DaemonAlreadyRunning(f"a daemon is already serving on {path}")


def bind_unpublished(path: Path, mode: int) -> tuple[socket.socket, Path]:
    """A socket listening under a temporary name beside ``path`` (``publish_socket`` puts it in place), and that
    name; ``path`` itself when a temporary name would not fit in sun_path."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    if len(os.fsencode(temporary)) >= 108:
        temporary = path
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        temporary.unlink(missing_ok=True)
        sock.bind(str(temporary))
        os.chmod(temporary, mode)
        sock.listen(LISTEN_BACKLOG)
    except BaseException:
        sock.close()
        if temporary != path:
            temporary.unlink(missing_ok=True)
        raise
    return sock, temporary


def publish_socket(temporary: Path, path: Path) -> tuple[int, int] | None:
    """Hard-link the listening socket into place, so that a client that sees the file can connect at once; the link
    fails (DaemonAlreadyRunning) if another daemon took the path meanwhile, where a rename would replace it. The
    identity of the file published, which only this daemon may remove."""
    if temporary != path:
        try:
            os.link(temporary, path)
        except FileExistsError:
            raise DaemonAlreadyRunning(f"another daemon took {path} while this one started") from None
        finally:
            temporary.unlink(missing_ok=True)
    return _file_identity(path)


def remove_socket(path: Path, owned: tuple[int, int] | None, unpublished: Path | None) -> None:
    """At the end: the file this daemon published (``owned``: a path another daemon has taken since stays), and its
    temporary name if it never got as far as publishing it."""
    if owned is not None and _file_identity(path) == owned:
        path.unlink(missing_ok=True)
    if unpublished is not None and unpublished != path:
        unpublished.unlink(missing_ok=True)


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    return st.st_dev, st.st_ino
