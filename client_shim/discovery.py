"""Finding the right daemon safely: where a daemon listens, and which socket a client may trust.

The host's daemon listens on ``/run/sanitizerd/sanitizerd.sock``; a user without one runs a private daemon under
``$XDG_RUNTIME_DIR`` or, without it (``runuser``, cron), in ``/tmp/sanitizerd-<uid>``. ``/tmp`` is everyone's: another
user can create that directory first and listen there, to receive the victim's sessions and findings. So a private
daemon's directory is created by its user, 0700, and refused when it is anyone else's or group/world-writable; a
client skips such a directory, and trusts a daemon only when the process that listens (SO_PEERCRED) is root, the
service user or the client's own user.

Standard library only. It lives with the client (which needs only the protocol and this); the daemon imports it
for where it listens and for its private directory.
"""

from __future__ import annotations

import os
import pwd
import socket
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SYSTEM_SOCKET = Path("/run/sanitizerd/sanitizerd.sock")
# Where the host's daemon listens when not at SYSTEM_SOCKET: a container that mounts the host's /run elsewhere, or a
# test suite that must never reach the real host's daemon. A client's environment is its own user's, so this moves
# only where that user looks; who answers is still checked (daemon_distrust).
HOST_SOCKET_ENV = "SANITIZERD_HOST_SOCKET"
SERVICE_USER = "sanitizerd"
TMP = Path("/tmp")
SOCKET_NAME = "sanitizerd.sock"


class UnsafeDirectory(Exception):
    """A private daemon's directory that another user could have made or may write."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A socket a client may try, with why it is not trusted ("" when it may be tried)."""

    path: Path
    distrust: str = ""


def host_socket_path(environ: Mapping[str, str] | None = None) -> Path:
    """The host's daemon: ``$SANITIZERD_HOST_SOCKET`` when set, else ``/run/sanitizerd/sanitizerd.sock``."""
    env = os.environ if environ is None else environ
    moved = env.get(HOST_SOCKET_ENV)
    return Path(moved) if moved else SYSTEM_SOCKET


def private_socket_path(uid: int | None = None, environ: Mapping[str, str] | None = None, *, tmp: Path = TMP) -> Path:
    """A user's private daemon: ``$XDG_RUNTIME_DIR/sanitizerd/`` (the user's own, made by logind), else a
    directory of the user's own in ``tmp``."""
    uid = os.geteuid() if uid is None else uid
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "sanitizerd" / SOCKET_NAME
    return tmp / f"sanitizerd-{uid}" / SOCKET_NAME


def default_socket_path(uid: int | None = None, environ: Mapping[str, str] | None = None, *, tmp: Path = TMP) -> Path:
    """Where a daemon started without ``--socket`` listens: root serves the host, anyone else privately."""
    uid = os.geteuid() if uid is None else uid
    return host_socket_path(environ) if uid == 0 else private_socket_path(uid, environ, tmp=tmp)


def directory_distrust(directory: Path, uid: int) -> str:
    """Why ``directory`` is not ``uid``'s private directory ("" when it is: a real directory, owned by ``uid``,
    writable by no one else)."""
    try:
        st = directory.lstat()
    except FileNotFoundError:
        return f"{directory} does not exist"
    except OSError as exc:
        return f"cannot inspect {directory}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_uid != uid:
        return f"{directory} belongs to uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return f"{directory} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def make_private_directory(directory: Path, uid: int | None = None) -> None:
    """Create ``directory`` 0700 (its parent must exist), or accept it if it is already ours alone; raise
    UnsafeDirectory otherwise. Never follows a symbolic link and never changes a directory it did not make."""
    uid = os.geteuid() if uid is None else uid
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnsafeDirectory(f"cannot create {directory}: {exc.strerror}") from exc
    distrust = directory_distrust(directory, uid)
    if distrust:
        raise UnsafeDirectory(f"refusing {directory} for a private daemon's socket: {distrust}")


def secure_private_socket_directory(
    socket_path: Path, uid: int | None = None, environ: Mapping[str, str] | None = None, *, tmp: Path = TMP
) -> None:
    """For a daemon about to listen on ``socket_path``: when that is the user's private path, make its directory
    private (or refuse it). Another path is the operator's choice, and left as it is."""
    uid = os.geteuid() if uid is None else uid
    private = private_socket_path(uid, environ, tmp=tmp)
    if socket_path == private:
        make_private_directory(private.parent, uid)


def service_uid() -> int | None:
    try:
        return pwd.getpwnam(SERVICE_USER).pw_uid
    except KeyError:
        return None


def trusted_daemon_uids(uid: int | None = None) -> frozenset[int]:
    """Whose daemon a client of ``uid`` may talk to: root's, the service user's, its own."""
    uid = os.geteuid() if uid is None else uid
    service = service_uid()
    return frozenset({0, uid} | ({service} if service is not None else set()))


def listener_uid(sock: socket.socket) -> int:
    """The uid of the process that listens on a connected Unix socket (SO_PEERCRED); -1 if unknown."""
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except (OSError, AttributeError):
        return -1
    return uid


def daemon_distrust(sock: socket.socket, uid: int | None = None) -> str:
    """Why a client of ``uid`` must not talk to the daemon it connected to ("" when it may)."""
    owner = listener_uid(sock)
    if owner in trusted_daemon_uids(uid):
        return ""
    whose = f"uid {owner}" if owner >= 0 else "an unknown user"
    return f"the daemon there runs as {whose}, not as root, {SERVICE_USER} or you: not sending it anything"


def candidates(
    uid: int | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    system: Path | None = None,
    tmp: Path = TMP,
) -> list[Candidate]:
    """The sockets a client tries without an explicit one, in order: the host's daemon, then the user's private
    one (distrusted when its directory is not the user's alone)."""
    uid = os.geteuid() if uid is None else uid
    system = host_socket_path(environ) if system is None else system
    found = [Candidate(system)]
    private = private_socket_path(uid, environ, tmp=tmp)
    if private != system:
        found.append(Candidate(private, directory_distrust(private.parent, uid) if private.parent.exists() else ""))
    return found
