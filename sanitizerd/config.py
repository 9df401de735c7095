"""The daemon's configuration: embedded defaults, then a TOML file, then the command line.

The file is ``--config PATH``, else ``/etc/sanitizerd/sanitizerd.toml`` (``$SANITIZERD_CONFIG`` moves it) when it
exists::

    log_level = "info"
    metrics_addr = "127.0.0.1:9464"

    [limits]
    max_frame_size = 67108864
    max_sessions = 1024
    max_sessions_per_uid = 256
    queue_depth = 4
    max_race_events = 10000000
    race_memory = 4294967296
    admin_groups = ["sanitizer-admins"]
    retention_days = 30
    max_store_size = 4294967296

Every value is checked by type and range, in the file and on the command line alike: an integer setting takes
an integer (``0.5`` and ``true`` are refused), a duration takes seconds (an integer or a decimal), unknown keys
are refused by name. A refused file changes nothing: at start the daemon does not start; on SIGHUP it keeps
its settings, logs why, and counts the failure in ``sanitizerd_config_reloads_total{result="failed"}``.

Top-level settings (fixed at start-up; the command line's ``--socket``, ``--state-dir``, ``--metrics-addr`` and
``--log-level`` win):

``socket``
    the Unix socket path clients connect to (at most 107 bytes).
``state_dir``
    the directory of the findings database.
``metrics_addr``
    ``HOST:PORT`` (``[IPV6]:PORT``; ``:PORT`` is 127.0.0.1) where ``/metrics``, ``/healthz`` and ``/readyz``
    are served; port 1 to 65535.
``log_level``
    ``debug``, ``info``, ``warning`` or ``error``; reloaded on SIGHUP.
``store``
    a PostgreSQL URL (``postgresql://user@host/db``): findings and sessions go there instead of the SQLite file
    under ``state_dir``, one database for many hosts' daemons (docs/fleet-store.md); fixed at
    start-up; ``--store`` wins.
``suppressions``
    a suppression file (``sanitizerd/findings/suppressions.py``): the host's known findings, hidden with a reason
    in every job, after the job's own rules (``run --suppressions``); read again on SIGHUP (sessions that start
    after take the new rules); a file that cannot be used is refused like any setting.

``[limits]``: each also a ``--flag`` of the same name with dashes, which wins over the file. All are reloaded on
SIGHUP but ``detector_threads``. The ranges are those of ``LIMITS`` below; ``sanitizerd serve --help`` prints
them with the defaults.

``max_frame_size``
    the largest frame a client may send, in bytes; a longer one ends its connection (``frame_too_large``).
    An integer from 256 to 2^30; default 64 MiB.
``max_sessions``
    live producer sessions over all users; one more is refused (``session_limit``), and ``/readyz`` says "not
    ready" while the daemon is at it. An integer from 1 to 2^20; default 1024.
``max_sessions_per_uid``
    live producer sessions of one uid. An integer from 1 to 2^20; default 256.
``handshake_timeout``
    seconds a new connection has to send its hello. More than 0, at most 3600; default 5.
``drain_timeout``
    after SIGTERM, seconds the live sessions get to finish and close. More than 0, at most 3600; default 10.
``queue_depth``
    work items buffered per detector and session before the session's reads pause. An integer from 1 to 1024;
    default 4.
``detector_threads``
    threads that run detector checks; fixed at start-up. An integer from 1 to 256; default min(4, cores).
``kernel_cpu_budget``
    seconds of thread CPU time one detector's checks of one kernel launch may take; past it the launch's remaining
    batches are not checked by that detector, its verdict is incomplete and has an ``internal_error`` that says so
    (``sanitizerd_cpu_budget_cuts_total``), and the session goes on with its next launch. More than 0, at most
    604800; default 60.
``saturated_after``
    seconds a check may wait for a detector thread, with every thread busy, before ``/readyz`` says "not ready:
    saturated". More than 0, at most 3600; default 10.
``max_race_events``
    events racecheck holds per kernel launch; later ones are not race-checked (and the verdict says so). An
    integer from 1 to 2^40; default 10 000 000.
``race_memory``
    bytes racecheck may reserve over all sessions (held events and the check's temporaries, reserved before they
    are made); a launch that would go past it is not race-checked, and its verdict says so. An integer from 2^16
    to 2^50; default a quarter of what the daemon may use (physical memory, its cgroup's ``memory.max``, its
    address-space limit: the smallest), at least 256 MiB.
``max_live_allocations``
    live allocations (malloc without its free) one session may hold; one more ends the session
    (``resource_limit``). An integer from 1 to 2^30; default 262 144.
``silent_kernel_after``
    seconds a running kernel launch may send nothing before it is reported silent (a ``kernel_silent`` error: it
    may be locked up, and what it does after is not checked until it sends again); once per launch
    (``sanitizerd_kernels_silent_total``). More than 0, at most 604800; default 300.
``job_grace``
    seconds a job whose last session closed is shown as "ending" (its ranks may restart). More than 0, at most
    604800 (a week); default 30.
``max_control_requests``
    ``wait_job``, ``watch`` and ``job_start`` requests one control connection may hold at once (unanswered waits,
    watches, registered jobs); one more ends the connection (``request_limit``). An integer from 1 to 2^20;
    default 64.
``retention_days``
    ended sessions and their findings older than this are deleted, at start and every 10 minutes. A number of
    days, more than 0 and at most 36500; default 30.
``max_store_size``
    the findings store's size in bytes; past it the oldest ended sessions are deleted (down to 90 %), and once
    none is left to delete new findings are counted as not stored. An integer from 2^20 to 2^50; default 4 GiB.
``max_connections``
    open client connections of any role, in handshake or not (each costs a file descriptor); one more is refused
    (``connection_limit``) before anything is read. Lowered at start (and on SIGHUP) to the fd limit less 64, with
    ``max_sessions`` lowered to fit under it. An integer from 1 to 2^20; default 4096.
``max_connections_per_uid``
    open client connections of one uid (``connection_limit``). An integer from 1 to 2^20; default 512.
``max_unfinished_bytes_per_uid``
    bytes of frames begun and not finished that all of one uid's connections may hold; the connection that takes
    its uid past it is refused (``buffer_limit``). An integer from 2^10 to 2^40; default 512 MiB.
``frame_timeout``
    seconds of reading a begun frame may take (``frame_timeout``). More than 0, at most 3600; default 30.
``idle_timeout``
    seconds a producer may send nothing while the daemon owes it no verdict (``idle_timeout``). More than 0, at
    most 604800; default 3600.
``worker_stall_timeout``
    with ``--workers N``: seconds a worker process may leave the listener's pings unanswered (its event loop
    stuck) before it is killed and started again, its clients resuming as after a restart. More than 0, at most
    3600; default 30.
``max_compat_sockets``
    sockets in msSanitizer's form (one per ``sanitizerd run`` on a CANN host, for its job's hook libraries) open at
    once over all users; one more is refused (``request_limit``) and that run fails before its program starts
    (``--allow-unchecked`` runs it without the hooks). An integer from 1 to 2^16; default 256.
``max_compat_sockets_per_uid``
    the same, per uid. An integer from 1 to 2^16; default 16.
``admin_groups`` (``--admin-group``, repeatable)
    groups, by name or number, whose members may read every user's sessions and findings (root always may).
    A name that is not a group is refused, as is a number above 2^32 - 2.

Adding a limit: add the field to ``Limits`` (sessions/hub.py) with its default. An ``int`` or ``float`` field is
then read from the file, checked, reloaded and given a ``--flag`` with no further code, as a positive number (a
float: seconds, at most a week); add a ``Limit`` entry to ``LIMITS`` to give it its range, its unit, its line of
help, or ``reloadable=False``, and a paragraph above (a test checks that each limit has one).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from sanitizerd.findings import suppressions
from sanitizerd.metrics_server import metrics_address
from sanitizerd.sessions.access import UnknownGroup, group_id
from sanitizerd.sessions.hub import Limits
from sanitizerd_protocol.model import Suppression

DEFAULT_CONFIG_PATH = Path("/etc/sanitizerd/sanitizerd.toml")
CONFIG_ENV = "SANITIZERD_CONFIG"  # moves the default file: a test suite, or a second service, reads not the host's
LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_FILE_BYTES = 1 << 20
MAX_SOCKET_PATH_LEN = 107  # sun_path is 108 bytes, with its terminating NUL
_MAX_INT = (1 << 63) - 1  # what SQLite and numpy indices hold
_MAX_SECONDS = 7 * 24 * 3600.0


class ConfigError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit's meaning and its range (inclusive; ``above`` is an exclusive lower bound, for durations)."""

    meaning: str
    at_least: float | None = None
    above: float | None = None
    at_most: float = _MAX_INT
    unit: str = ""
    reloadable: bool = True


def _seconds(meaning: str, at_most: float = _MAX_SECONDS) -> Limit:
    """A duration: more than 0 seconds, at most ``at_most``."""
    return Limit(meaning, above=0, at_most=at_most, unit="s")


# Each Limits field's line of help and range. A field missing here still works, as a positive number.
LIMITS: dict[str, Limit] = {
    "max_frame_size": Limit(
        "largest frame a client may send; longer ones end the connection", at_least=256, at_most=1 << 30, unit="bytes"
    ),
    "max_sessions": Limit("live producer sessions over all users", at_least=1, at_most=1 << 20),
    "max_sessions_per_uid": Limit("live producer sessions of one uid", at_least=1, at_most=1 << 20),
    "handshake_timeout": _seconds("seconds a new connection has to send its hello", at_most=3600),
    "drain_timeout": _seconds("after SIGTERM, seconds live sessions get to finish and close", at_most=3600),
    "queue_depth": Limit("work items buffered per detector before the session's reads pause", at_least=1, at_most=1024),
    "detector_threads": Limit("threads that run detector checks", at_least=1, at_most=256, reloadable=False),
    "kernel_cpu_budget": _seconds(
        "seconds of thread CPU one detector's checks of one kernel launch may take; past it the rest is not checked"
    ),
    "saturated_after": _seconds(
        "seconds a check may wait for a detector thread, all of them busy, before /readyz says saturated",
        at_most=3600,
    ),
    "max_race_events": Limit(
        "events racecheck holds per kernel launch; later ones are not race-checked",
        at_least=1,
        at_most=1 << 40,
    ),
    "silent_kernel_after": _seconds(
        "seconds a running kernel launch may send nothing before it is reported silent (kernel_silent)"
    ),
    "job_grace": _seconds("seconds a job whose last session closed is shown as ending, for ranks that restart"),
    "race_memory": Limit(
        "bytes racecheck may reserve over all sessions; a launch past it is not race-checked, and says so",
        at_least=1 << 16,
        at_most=1 << 50,
        unit="bytes",
    ),
    "max_live_allocations": Limit(
        "live allocations one session may hold; one more malloc ends it", at_least=1, at_most=1 << 30
    ),
    "max_control_requests": Limit(
        "wait_job, watch and job_start requests one control connection may hold at once", at_least=1, at_most=1 << 20
    ),
    "retention_days": Limit("days ended sessions and their findings are kept", above=0, at_most=100 * 365, unit="days"),
    "max_connections": Limit(
        "open client connections, lowered at start to what the fd limit allows", at_least=1, at_most=1 << 20
    ),
    "max_connections_per_uid": Limit("open client connections of one uid", at_least=1, at_most=1 << 20),
    "max_unfinished_bytes_per_uid": Limit(
        "bytes of unfinished frames one uid's connections may hold", at_least=1 << 10, at_most=1 << 40, unit="bytes"
    ),
    "max_compat_sockets": Limit("msSanitizer-form sockets open at once over all users", at_least=1, at_most=1 << 16),
    "max_compat_sockets_per_uid": Limit("msSanitizer-form sockets of one uid", at_least=1, at_most=1 << 16),
    "frame_timeout": _seconds("seconds of reading a begun frame may take", at_most=3600),
    "idle_timeout": _seconds("seconds a producer owed no verdict may send nothing before its session ends"),
    "worker_stall_timeout": _seconds(
        "with --workers N: seconds a worker may answer the listener nothing before it is killed and started again",
        at_most=3600,
    ),
    "max_store_size": Limit(
        "the findings store's size; past it the oldest ended sessions are deleted",
        at_least=1 << 20,
        at_most=1 << 50,
        unit="bytes",
    ),
}

_DEFAULT_INT = Limit("(a positive integer)", at_least=1)
_DEFAULT_FLOAT = Limit("(a positive number)", above=0, at_most=_MAX_SECONDS)
_SPECIAL = {"admin_gids"}  # the file and the command line name groups; Limits holds their gids


def _field_types() -> dict[str, Any]:
    hints = typing.get_type_hints(Limits)
    return {f.name: hints[f.name] for f in dataclasses.fields(Limits) if f.name not in _SPECIAL}


def limit_of(name: str) -> Limit:
    """The range of a numeric limit: its ``LIMITS`` entry, or a positive number of its field's type."""
    default = _DEFAULT_FLOAT if _field_types()[name] is float else _DEFAULT_INT
    return LIMITS.get(name, default)


def numeric_limits() -> dict[str, type]:
    """Every int or float field of Limits, by name: those the file and the command line set."""
    return {name: kind for name, kind in _field_types().items() if kind in (int, float)}


def describe(name: str) -> str:
    """What a limit accepts, in words: "an integer from 1 to 1024", "seconds, more than 0 and at most 3600"."""
    bound = limit_of(name)
    if numeric_limits().get(name) is int:
        return f"an integer from {int(bound.at_least if bound.at_least is not None else 1)} to {int(bound.at_most)}"
    low = f"at least {bound.at_least:g}" if bound.at_least is not None else f"more than {bound.above or 0:g}"
    what = {"s": "seconds", "days": "days"}.get(bound.unit, "a number")
    return f"{what}, {low} and at most {bound.at_most:g}"


def _annotated(name: str, kind: type) -> object:
    bound = limit_of(name)
    if kind is int:
        low = int(bound.at_least) if bound.at_least is not None else 1
        return Annotated[int, msgspec.Meta(ge=low, le=int(bound.at_most))]
    if bound.at_least is not None:
        return Annotated[float, msgspec.Meta(ge=bound.at_least, le=bound.at_most)]
    return Annotated[float, msgspec.Meta(gt=bound.above or 0.0, le=bound.at_most)]


def _struct(name: str, fields: list[tuple[str, object]]) -> type[msgspec.Struct]:
    return msgspec.defstruct(
        name,
        [(field, typing.Union[kind, msgspec.UnsetType], msgspec.UNSET) for field, kind in fields],  # noqa: UP007
        kw_only=True,
        forbid_unknown_fields=True,
    )


def _file_struct() -> type[msgspec.Struct]:
    """The file's schema, derived from Limits: every numeric limit with its range, and the top-level keys."""
    limit_fields: list[tuple[str, object]] = [(n, _annotated(n, k)) for n, k in numeric_limits().items()]
    limit_fields.append(("admin_groups", list[str | int]))
    top: list[tuple[str, object]] = [
        ("socket", Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SOCKET_PATH_LEN)]),
        ("state_dir", Annotated[str, msgspec.Meta(min_length=1)]),
        ("metrics_addr", str),
        ("log_level", Literal[LOG_LEVELS]),  # type: ignore[valid-type]
        ("suppressions", Annotated[str, msgspec.Meta(min_length=1)]),
        ("store", Annotated[str, msgspec.Meta(pattern=r"^postgres(ql)?://")]),
        ("limits", _struct("LimitsFile", limit_fields)),
    ]
    return _struct("ConfigFile", top)


@dataclass(frozen=True, slots=True)
class FileConfig:
    path: Path | None
    top: dict[str, object]
    limits: dict[str, object]
    suppressions: tuple[Suppression, ...] = ()  # the rules of the file ``suppressions`` names, each checked


_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$\.(?P<path>[\w.]+)`)?$")


def _refusal(error: msgspec.ValidationError, data: Mapping[str, Any]) -> str:
    """msgspec's complaint, said with the setting's name, what it accepts and what it got."""
    found = _AT.match(str(error))
    assert found is not None
    path, what = found["path"], found["what"]
    if path is None:  # an unknown key at the top: msgspec names it without a path
        unknown = re.search(r"unknown field `(\w+)`", what)
        return f"unknown setting {unknown[1]}" if unknown else what
    value: Any = data
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if "unknown field" in what:
        unknown = re.search(r"unknown field `(\w+)`", what)
        return f"unknown setting {path}.{unknown[1] if unknown else '?'}"
    section, _, name = path.partition(".")
    if section == "limits" and name in numeric_limits():
        return f"limits.{name} must be {describe(name)}; got {value!r}"
    if path == "log_level":
        return f"log_level must be one of {', '.join(LOG_LEVELS)}; got {value!r}"
    return f"{path}: {what}; got {value!r}"


def default_config_path() -> Path:
    """The file read when ``--config`` is not given, if it exists."""
    moved = os.environ.get(CONFIG_ENV)
    return Path(moved) if moved else DEFAULT_CONFIG_PATH


def read(path: Path | None) -> FileConfig:
    """The file's settings (none when no file is given and the default one does not exist), each one checked."""
    default = default_config_path()
    chosen = path if path is not None else (default if default.exists() else None)
    if chosen is None:
        return FileConfig(None, {}, {})
    try:
        data = tomllib.loads(_text(chosen))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{chosen}: {exc}") from None
    try:
        typed = msgspec.convert(data, _file_struct())
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{chosen}: {_refusal(exc, data)}") from None
    top: dict[str, Any] = msgspec.to_builtins(typed)  # the settings the file gave (unset ones are left out)
    limits: dict[str, Any] = top.pop("limits", {})
    try:
        if "metrics_addr" in top:
            metrics_address(top["metrics_addr"])
        if "admin_groups" in limits:
            limits["admin_gids"] = frozenset(group_id(str(g)) for g in limits.pop("admin_groups"))
    except ValueError as exc:
        setting = "limits.admin_groups" if isinstance(exc, UnknownGroup) else "metrics_addr"
        raise ConfigError(f"{chosen}: {setting}: {exc}") from None
    try:
        rules = tuple(suppressions.load(Path(top["suppressions"]))) if "suppressions" in top else ()
    except suppressions.SuppressionError as exc:
        raise ConfigError(f"{chosen}: suppressions: {exc}") from None
    return FileConfig(chosen, top, limits, rules)


def _text(path: Path) -> str:
    """The file's text; a FIFO or a device (which would block the reload, or never end) and a file past
    ``MAX_FILE_BYTES`` are refused."""
    if not path.is_file():
        raise OSError("not a regular file" if path.exists() else "no such file")
    with path.open("rb") as file:
        raw = file.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise OSError(f"larger than {MAX_FILE_BYTES} bytes: not a sanitizerd configuration")
    return raw.decode()


def command_line_value(name: str) -> typing.Callable[[str], int | float]:
    """An argparse ``type`` for a limit: its field's type, in its range, refused by the same words as the file."""
    kind = numeric_limits()[name]
    bound = limit_of(name)

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            value = None
        low_ok = value is not None and (
            value >= bound.at_least if bound.at_least is not None else value > (bound.above or 0)
        )
        if value is None or not low_ok or not value <= bound.at_most or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be {describe(name)}; got {text!r}")
        return value

    return parse


def limits(file: FileConfig, command_line: Mapping[str, object]) -> Limits:
    """Defaults, then the file, then whatever the command line gave (None: not given)."""
    given = {k: v for k, v in command_line.items() if v is not None}
    return dataclasses.replace(Limits(), **{**file.limits, **given})


def reloaded(current: Limits, file: FileConfig, command_line: Mapping[str, object]) -> Limits:
    """The limits after SIGHUP: the file's reloadable ones, the command line still winning."""
    fresh = limits(file, command_line)
    fixed = {name for name in numeric_limits() if not limit_of(name).reloadable}
    changes = {f.name: getattr(fresh, f.name) for f in dataclasses.fields(Limits) if f.name not in fixed}
    return dataclasses.replace(current, **changes)
