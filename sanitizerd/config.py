"""The daemon's configuration: embedded defaults, then a TOML file, then the command line.

The file is ``/etc/sanitizerd/sanitizerd.toml`` when it exists, or ``--config PATH``::

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

SIGHUP reads the file again and applies its log level and limits (the command line still wins); the socket,
the state directory, the metrics address and the detector threads are fixed at start-up.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sanitizerd.sessions.access import group_id
from sanitizerd.sessions.hub import Limits

DEFAULT_CONFIG_PATH = Path("/etc/sanitizerd/sanitizerd.toml")
LOG_LEVELS = ("debug", "info", "warning", "error")
TOP_LEVEL = {"socket": str, "state_dir": str, "metrics_addr": str, "log_level": str}
RELOADABLE_LIMITS = frozenset(
    {"max_frame_size", "max_sessions", "max_sessions_per_uid", "handshake_timeout", "drain_timeout", "queue_depth",
     "max_race_events", "race_memory", "job_grace", "admin_gids"}
)  # fmt: skip


class ConfigError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class FileConfig:
    path: Path | None
    top: dict[str, object]
    limits: dict[str, object]


def read(path: Path | None) -> FileConfig:
    """The file's settings (none when no file is given and the default one does not exist)."""
    chosen = path if path is not None else (DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.exists() else None)
    if chosen is None:
        return FileConfig(None, {}, {})
    try:
        data = tomllib.loads(chosen.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{chosen}: {exc}") from None
    limits = data.pop("limits", {})
    # The file names admin groups (by name or number); Limits holds their gids.
    known_limits = {f.name for f in dataclasses.fields(Limits)} - {"admin_gids"} | {"admin_groups"}
    unknown = (set(data) - set(TOP_LEVEL)) | {f"limits.{k}" for k in set(limits) - known_limits}
    if unknown:
        raise ConfigError(f"{chosen}: unknown setting(s) {', '.join(sorted(unknown))}")
    if "log_level" in data and data["log_level"] not in LOG_LEVELS:
        raise ConfigError(f"{chosen}: log_level must be one of {', '.join(LOG_LEVELS)}")
    if "admin_groups" in limits:
        limits["admin_gids"] = frozenset(group_id(str(g)) for g in limits.pop("admin_groups"))
    for name, value in limits.items():
        if name != "admin_gids" and (not isinstance(value, int | float) or isinstance(value, bool) or value <= 0):
            raise ConfigError(f"{chosen}: limits.{name} must be a positive number, got {value!r}")
    return FileConfig(chosen, data, limits)


def limits(file: FileConfig, command_line: Mapping[str, object]) -> Limits:
    """Defaults, then the file, then whatever the command line gave (None: not given)."""
    given = {k: v for k, v in command_line.items() if v is not None}
    return dataclasses.replace(Limits(), **{**file.limits, **given})


def reloaded(current: Limits, file: FileConfig, command_line: Mapping[str, object]) -> Limits:
    """The limits after SIGHUP: the file's reloadable ones, the command line still winning."""
    fresh = limits(file, command_line)
    return dataclasses.replace(current, **{name: getattr(fresh, name) for name in RELOADABLE_LIMITS})
