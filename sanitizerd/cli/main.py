"""The ``sanitizerd`` command: serve, run, findings, sessions."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sanitizerd import __version__
from sanitizerd.config import DEFAULT_CONFIG_PATH, LOG_LEVELS
from sanitizerd.daemon import DaemonSettings, default_socket_path, default_state_dir
from sanitizerd.protocol import DEFAULT_MAX_FRAME_SIZE
from sanitizerd.sessions.access import group_id
from sanitizerd.sessions.hub import Limits


def _positive(kind: type) -> object:
    def parse(text: str) -> object:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def _limit_arguments(args: argparse.Namespace) -> dict[str, object]:
    """The limits the command line gave (None where it gave none)."""
    names = ("max_frame_size", "max_sessions", "max_sessions_per_uid", "handshake_timeout", "drain_timeout",
             "queue_depth", "detector_threads", "max_race_events", "race_memory", "job_grace")  # fmt: skip
    given: dict[str, object] = {name: getattr(args, name) for name in names}
    given["admin_gids"] = frozenset(group_id(g) for g in args.admin_group) if args.admin_group else None
    return given


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sanitizerd", description="Ascend NPU memory and race checking service")
    parser.add_argument("--version", action="version", version=f"sanitizerd {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    limits = Limits()
    serve = commands.add_parser("serve", help="run the daemon")
    serve.add_argument("--config", type=Path, default=None, help=f"TOML settings [{DEFAULT_CONFIG_PATH}, if it exists]")
    serve.add_argument("--socket", type=Path, default=None, help=f"Unix socket path [{default_socket_path()}]")
    serve.add_argument("--state-dir", type=Path, default=None, help=f"findings database [{default_state_dir()}]")
    serve.add_argument("--metrics-addr", metavar="HOST:PORT", help="serve Prometheus /metrics here")
    serve.add_argument("--log-level", default=None, choices=LOG_LEVELS, help="[info]")
    # Limits: None means "not given", so that the config file's value (or the default) applies.
    serve.add_argument("--max-frame-size", type=_positive(int), metavar="BYTES", help=f"[{DEFAULT_MAX_FRAME_SIZE}]")
    serve.add_argument("--max-sessions", type=_positive(int), metavar="N", help=f"[{limits.max_sessions}]")
    serve.add_argument(
        "--max-sessions-per-uid", type=_positive(int), metavar="N", help=f"[{limits.max_sessions_per_uid}]"
    )
    serve.add_argument("--handshake-timeout", type=_positive(float), metavar="S", help=f"[{limits.handshake_timeout}]")
    serve.add_argument(
        "--drain-timeout", type=_positive(float), metavar="S",
        help=f"after SIGTERM, seconds live sessions get to finish and close [{limits.drain_timeout}]",
    )  # fmt: skip
    serve.add_argument(
        "--queue-depth", type=_positive(int), metavar="N",
        help=f"work items buffered per detector before the session's reads pause [{limits.queue_depth}]",
    )  # fmt: skip
    serve.add_argument("--detector-threads", type=_positive(int), metavar="N", help=f"[{limits.detector_threads}]")
    serve.add_argument(
        "--max-race-events", type=_positive(int), metavar="N",
        help=f"events racecheck holds per kernel launch; later ones are not race-checked "
        f"[{limits.max_race_events}]",
    )  # fmt: skip
    serve.add_argument(
        "--race-memory", type=_positive(int), metavar="BYTES",
        help=f"bytes racecheck may hold over all sessions (held events and their check); a launch that would go "
        f"past it is not race-checked, and says so [a quarter of the memory the daemon may use: {limits.race_memory}]",
    )  # fmt: skip
    serve.add_argument(
        "--admin-group", action="append", default=None, metavar="GROUP",
        help="members may read every user's sessions and findings (root always may); repeatable",
    )  # fmt: skip
    serve.add_argument(
        "--job-grace", type=_positive(float), metavar="S",
        help=f"seconds a job whose last session closed is shown as ending, for ranks that restart [{limits.job_grace}]",
    )  # fmt: skip

    commands.add_parser("run", help="run a program under sanitizerd (msSanitizer's options; see run --help)")

    replay = commands.add_parser("replay", help="feed a job saved with `run --save FILE` to a daemon again")
    replay.add_argument("file")
    replay.add_argument("--socket", type=Path, default=None)
    replay.add_argument("--format", choices=["text", "json"], default="text")

    for name, help_text in (
        ("findings", "print findings from a running daemon"),
        ("sessions", "list sessions"),
        ("jobs", "list jobs: sessions grouped by job, with ranks, devices and sdccheck signatures"),
    ):
        query = commands.add_parser(name, help=help_text)
        query.add_argument("--socket", type=Path, default=None)
        query.add_argument("--format", choices=["text", "json"], default="text")
        if name == "findings":
            query.add_argument("--job", default="")
            query.add_argument("--session", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":
        from sanitizerd.cli.run import run  # msSanitizer's own parsing rules, not argparse's

        return run(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "serve":
        from sanitizerd import config, logs
        from sanitizerd.daemon import run_daemon

        try:
            file = config.read(args.config)
        except config.ConfigError as exc:
            print(f"sanitizerd: {exc}", file=sys.stderr)
            return 2
        command_line = _limit_arguments(args)
        log_level = args.log_level or str(file.top.get("log_level", "info"))
        logs.configure(log_level)
        settings = DaemonSettings(
            socket_path=args.socket or Path(str(file.top.get("socket", default_socket_path()))),
            state_dir=args.state_dir or Path(str(file.top.get("state_dir", default_state_dir()))),
            metrics_addr=args.metrics_addr or file.top.get("metrics_addr"),  # type: ignore[arg-type]
            limits=config.limits(file, command_line),
            config_path=file.path,
            command_line=command_line,
            log_level_given=args.log_level,
        )
        return run_daemon(settings)
    if args.command == "replay":
        from sanitizerd.cli.replay import replay

        return replay(args.file, socket=str(args.socket) if args.socket else None, fmt=args.format)
    if args.command in ("findings", "sessions", "jobs"):
        from sanitizerd.cli import query

        socket = str(args.socket or default_socket_path())
        if args.command == "findings":
            return query.findings(socket, job=args.job, session=args.session, fmt=args.format)
        if args.command == "jobs":
            return query.jobs(socket, fmt=args.format)
        return query.sessions(socket, fmt=args.format)
    _parser().print_help()
    return 2
