"""Automatic attach: a Python process joins sanitizerd at start-up when its environment asks for it.

``sanitizerd run`` asks (it sets ``SANITIZERD_ATTACH=1`` and puts ``client_shim/_autoattach`` on
``PYTHONPATH``, whose ``sitecustomize`` calls ``attach()``), and so does ``SANITIZERD_ATTACH=1`` with the hook
installed in the environment (``python -m client_shim.attach install`` writes a ``.pth`` line that calls
``attach()`` only when the variable is set: otherwise the cost is one environment lookup).

The job identity comes from the launcher: ``SANITIZERD_JOB`` wins; then torchrun's ``TORCHELASTIC_RUN_ID``
(with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``); then Ascend's launch environment (``RANK_ID``,
``ASCEND_DEVICE_ID``, ``ASCEND_RT_VISIBLE_DEVICES``, ``RANK_TABLE_FILE``); then ``MASTER_ADDR:MASTER_PORT``. A
name derived from the launcher starts with the user's name (``alice/torchrun-<id>``): the daemon keeps such names
for that user, so no other user can take the job first or join it.

Such a name is guessable and repeats (torchrun's run id is ``none`` under c10d rendezvous without ``--rdzv-id``; a
rank-table file is reused), so two concurrent jobs would merge into one. It is only the stem of the job's name: the
ranks agree on a random suffix through the job's own rendezvous store when the session opens (``agreed_job``), the
first rank to ask setting it (``compare_set``) and every other reading it: torchrun's agent store at
``MASTER_ADDR:MASTER_PORT``, reachable before ``init_process_group``; else the default process group's store.
A process that has neither yet is a job of its own (said once on stderr), never part of a stranger's.

The session opens when the process first sends (a replay signature, a kernel launch, ``connect()``), with the
launcher's identity and whatever ``connect`` adds: one session per process. A daemon that is absent, or goes
away, never breaks the program: it warns once on stderr and the process runs unchecked, saying so. A forked
child gets a session of its own the first time it sends.
"""

from __future__ import annotations

import atexit
import os
import pwd
import secrets
import socket
import sys
import sysconfig
import threading
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from client_shim.client import Client
from client_shim.transport import JOB_ENV, SOCKET_ENV, ClientError

ATTACH_ENV = "SANITIZERD_ATTACH"
PTH_NAME = "sanitizerd-attach.pth"
# One line: a .pth line that starts with "import" is executed at every interpreter start-up.
PTH_LINE = f'import os; os.environ.get("{ATTACH_ENV}") == "1" and __import__("client_shim.attach").attach.attach()\n'

_lock = threading.Lock()
_enabled = False  # the environment asked to attach and a daemon socket was there at start-up
_client: Client | None = None
_warned = False
_agreed: dict[str, str] = {}  # stem -> agreed job name, kept for a forked child's own session
# The store key the ranks agree on, per torchrun restart (each attempt is a job of its own), and how long a rank
# waits for torchrun's agent store (already up when workers start: a long wait means it is not there).
JOB_KEY = "sanitizerd/job"
STORE_TIMEOUT = timedelta(seconds=30)


def user_name() -> str:
    """This process's user (the daemon knows it by SO_PEERCRED), by name where the host has one."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def identity(environ: Mapping[str, str], *, user: str | None = None) -> dict[str, object]:
    """The job, rank, local rank, world size and device this process speaks for, from its launcher; a job name
    derived from the launcher is ``<user>/<name>``, the stem ``agreed_job`` completes when the session opens."""

    def number(*names: str, default: int = -1) -> int:
        for name in names:
            value = environ.get(name, "")
            if value.strip().lstrip("-").isdigit():
                return int(value)
        return default

    rank = number("RANK", "RANK_ID")
    local_rank = number("LOCAL_RANK", "LOCAL_RANK_ID")
    device = number("ASCEND_DEVICE_ID", "DEVICE_ID")
    if device < 0 and local_rank >= 0:
        visible = [v for v in environ.get("ASCEND_RT_VISIBLE_DEVICES", "").split(",") if v.strip().isdigit()]
        device = int(visible[local_rank]) if local_rank < len(visible) else local_rank
    job = ""
    if environ.get("TORCHELASTIC_RUN_ID"):
        job = f"torchrun-{environ['TORCHELASTIC_RUN_ID']}"
    elif environ.get("RANK_TABLE_FILE"):
        job = f"ranktable-{Path(environ['RANK_TABLE_FILE']).stem}"
    elif environ.get("MASTER_ADDR"):
        job = f"{environ['MASTER_ADDR']}:{environ.get('MASTER_PORT', '')}"
    if job:
        # Launcher names repeat across users (torchrun's default run id is "none"): the user's name in front keeps
        # two users' jobs apart, and the daemon keeps "<user>/..." names for that user alone.
        job = f"{user if user is not None else user_name()}/{job}"
    job = environ.get(JOB_ENV, "") or job
    return {
        "job": job,
        "rank": rank,
        "local_rank": local_rank,
        "world_size": number("WORLD_SIZE", "RANK_SIZE", default=0),
        "device": device,
    }


def agreed_job(stem: str, environ: Mapping[str, str]) -> str:
    """``<stem>-<id>``, ``id`` random and the same on every rank of the job: agreed through the job's rendezvous
    store; without one, unique to this process (``<stem>-<host>-<pid>``), said once."""
    if stem in _agreed:
        return _agreed[stem]
    try:
        store, key = _rendezvous_store(environ)
    except Exception as exc:  # an agent store that does not answer must not stop the training
        store, key, why = None, "", f"its rendezvous store did not answer ({exc})"
    else:
        why = "no torch.distributed store yet"
    if store is not None:
        try:
            value = store.compare_set(key, "", secrets.token_hex(6))
            _agreed[stem] = f"{stem}-{value.decode() if isinstance(value, bytes) else value}"
            return _agreed[stem]
        except Exception as exc:  # RuntimeError, DistStoreError, OSError: same answer
            why = f"its rendezvous store did not answer ({exc})"
    print(
        f"[sanitizerd] WARNING: this process could not agree its job with the other ranks ({why}): it is checked as "
        "a job of its own (set SANITIZERD_JOB, or send only after init_process_group, to check the ranks together).",
        file=sys.stderr,
        flush=True,
    )
    _agreed[stem] = f"{stem}-{socket.gethostname()}-{os.getpid()}"
    return _agreed[stem]


def _rendezvous_store(environ: Mapping[str, str]) -> tuple[Any, str]:
    """The store every rank of this job shares, and the key to agree on: torchrun's agent store (up before its
    workers start), else the default process group's; (None, "") when there is none yet."""
    key = f"{JOB_KEY}/{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    port = environ.get("MASTER_PORT", "")
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and environ.get("MASTER_ADDR") and port.isdigit():
        from torch.distributed import TCPStore

        return TCPStore(environ["MASTER_ADDR"], int(port), is_master=False, timeout=STORE_TIMEOUT), key
    dist = sys.modules.get("torch.distributed")  # imported by the program itself, or it has no process group
    if dist is not None and dist.is_available() and dist.is_initialized():
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store(), key
    return None, ""


def attach(environ: Mapping[str, str] | None = None) -> bool:
    """At start-up: whether this process will report to sanitizerd. The session opens with the first thing the
    process sends (``client()``), so that it carries the identity the program gives ``connect``, and a process
    that never sends anything (a launcher) neither connects nor warns."""
    global _enabled
    env = os.environ if environ is None else environ
    _enabled = env.get(ATTACH_ENV) == "1"
    return _enabled


def client(**overrides: object) -> Client | None:
    """This process's client, connecting on first call (the launcher's identity, ``overrides`` on top); None,
    after one warning, when the daemon cannot be reached."""
    global _client
    with _lock:
        if _client is not None or not _enabled:
            return _client
        # A training job waits for a restarting daemon a few seconds, not the client's default half minute.
        fields = {"resume_timeout": 5.0, **identity(os.environ), **overrides}
        if not os.environ.get(JOB_ENV) and "job" not in overrides and fields["job"]:
            fields["job"] = agreed_job(str(fields["job"]), os.environ)
        try:
            _client = Client(**fields)  # type: ignore[arg-type]
        except (ClientError, OSError) as exc:
            _disable(f"cannot attach to sanitizerd ({exc})")
            return None
        atexit.register(_close)
        return _client


def connect(**kwargs: object) -> Client:
    """Connect with the environment ``sanitizerd run`` sets (socket, job), closing at interpreter exit. A process
    that attached at start-up gets that client: one session per process. It lives here, above ``Client``, because it
    asks attach first (issue 27: client.py imports nothing of attach)."""
    if enabled() and "socket_path" not in kwargs:
        attached = client(**kwargs)  # in a forked child it opens a session of its own when it first sends
        if attached is not None:
            return attached
    if SOCKET_ENV not in os.environ and "socket_path" not in kwargs:
        raise ClientError(f"{SOCKET_ENV} is not set: run the program under `sanitizerd run`, or pass socket_path")
    new = Client(**kwargs)  # type: ignore[arg-type]
    atexit.register(new.close)
    return new


def attached() -> Client | None:
    """The client ``client()`` made, if any (without connecting)."""
    return _client


def enabled() -> bool:
    return _enabled


def warn(reason: str) -> None:
    """Say once that this process runs unchecked, and why; later calls are silent."""
    global _warned
    if not _warned:
        _warned = True
        print(f"[sanitizerd] WARNING: {reason}; this process runs unchecked.", file=sys.stderr, flush=True)


def detach(reason: str) -> None:
    """The daemon went away: stop sending, say so once."""
    _disable(f"lost sanitizerd ({reason})")


def _disable(reason: str) -> None:
    global _client, _enabled
    _client, _enabled = None, False
    warn(reason)


def _close() -> None:
    client = _client
    if client is not None:
        try:
            client.close(timeout=10)
        except (ClientError, OSError, TimeoutError) as exc:
            warn(f"sanitizerd did not confirm the end of the session ({exc})")


def install(site_packages: str | None = None) -> Path:
    """Write the start-up hook into this environment's site-packages (or ``site_packages``)."""
    target = Path(site_packages or sysconfig.get_paths()["purelib"]) / PTH_NAME
    target.write_text(PTH_LINE)
    return target


def hook_dir() -> Path:
    """The directory ``sanitizerd run`` puts on ``PYTHONPATH``: its ``sitecustomize`` attaches."""
    return Path(__file__).resolve().parent / "_autoattach"


if __name__ == "__main__":
    if sys.argv[1:] == ["install"]:
        print(f"installed {install()}: processes attach when {ATTACH_ENV}=1")
    else:
        raise SystemExit("usage: python -m client_shim.attach install")
