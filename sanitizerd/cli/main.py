"""The ``sanitizerd`` command: serve, run, findings, sessions."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from sanitizerd import __version__, api, config, native
from sanitizerd.config import default_config_path
from sanitizerd.daemon import DaemonSettings, default_socket_path, default_state_dir
from sanitizerd.metrics_server import metrics_address
from sanitizerd.sessions.access import group_id
from sanitizerd.sessions.hub import Limits

T = TypeVar("T")
MAX_WORKERS = 64
# serve's default: a worker per usable core, up to this many (each is a Python process with its own imports, its
# share of the race-check memory and its detector threads; past eight cores, jobs rarely outnumber workers).
DEFAULT_WORKERS_MAX = 8


def _limit_arguments(args: argparse.Namespace) -> dict[str, object]:
    """The limits the command line gave (None where it gave none)."""
    given: dict[str, object] = {name: getattr(args, name) for name in config.numeric_limits()}
    given["admin_gids"] = frozenset(args.admin_group) if args.admin_group else None
    return given


def _argument_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse ``type`` from a parser that raises ValueError: argparse then prints its words, not its own."""

    def checked(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return checked


def _socket_path(text: str) -> Path:
    if not text or len(os.fsencode(text)) > config.MAX_SOCKET_PATH_LEN:
        raise ValueError(f"a socket path is 1 to {config.MAX_SOCKET_PATH_LEN} bytes; got {len(os.fsencode(text))}")
    return Path(text)


def default_workers() -> int:
    """A worker per core this process may run on, at most DEFAULT_WORKERS_MAX; one core: the single process."""
    return max(1, min(len(os.sched_getaffinity(0)), DEFAULT_WORKERS_MAX))


def _workers(text: str) -> int:
    count = int(text)
    if not 1 <= count <= MAX_WORKERS:
        raise ValueError(f"--workers is 1 to {MAX_WORKERS}; got {count}")
    return count


def _store_url(text: str) -> str:
    if not text.startswith(("postgresql://", "postgres://")):
        raise ValueError(f"a store is a PostgreSQL URL (postgresql://user@host/db); got {text!r}")
    return text


def _store_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """--store: the PostgreSQL findings store that serve writes and findings reads."""
    parser.add_argument("--store", type=_argument_type(_store_url), default=None, metavar="URL", help=help_text)


def _metrics_address(text: str) -> str:
    metrics_address(text)
    return text


def _serve_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--config", type=Path, default=None, help=f"TOML settings [{default_config_path()}, if it exists]"
    )
    serve.add_argument(
        "--socket", type=_argument_type(_socket_path), default=None, help=f"Unix socket path [{default_socket_path()}]"
    )
    serve.add_argument("--state-dir", type=Path, default=None, help=f"findings database [{default_state_dir()}]")
    _store_option(
        serve,
        "keep findings in this PostgreSQL database (postgresql://user@host/db), shared by many hosts' daemons, "
        "instead of the SQLite file under --state-dir",
    )
    serve.add_argument(
        "--metrics-addr", type=_argument_type(_metrics_address), metavar="HOST:PORT",
        help="serve Prometheus /metrics, /healthz and /readyz here ([::1]:PORT for IPv6)",
    )  # fmt: skip
    serve.add_argument(
        "--log-level", default=None, choices=config.LOG_LEVELS, help="the least severe log lines written [info]"
    )
    # Limits, one flag per numeric field of Limits, checked as the file's values are. None means "not given",
    # so that the config file's value (or the default) applies.
    limits = Limits()
    for name in config.numeric_limits():
        bound = config.limit_of(name)
        fixed = "" if bound.reloadable else "; fixed at start-up"
        serve.add_argument(
            "--" + name.replace("_", "-"),
            type=config.command_line_value(name),
            metavar="S" if bound.unit == "s" else ("BYTES" if bound.unit == "bytes" else "N"),
            help=f"{bound.meaning}: {config.describe(name)}{fixed} [{getattr(limits, name)}]".replace("%", "%%"),
        )
    serve.add_argument(
        "--workers", type=_argument_type(_workers), default=None, metavar="N",
        help=f"processes that serve sessions, 1 to {MAX_WORKERS}: 1 is a single process; N > 1 a listener that hands "
        f"each job's connections to one of N workers [the usable cores, at most {DEFAULT_WORKERS_MAX}: "
        f"{default_workers()} here]",
    )  # fmt: skip
    serve.add_argument(
        "--admin-group", type=_argument_type(group_id), action="append", default=None, metavar="GROUP",
        help="members may read every user's sessions and findings (root always may); by name or number; repeatable",
    )  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sanitizerd", description="Ascend NPU memory and race checking service")
    parser.add_argument("--version", action="version", version=f"sanitizerd {__version__} ({native.describe()})")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    _serve_options(commands.add_parser("serve", help="run the daemon"))

    commands.add_parser("run", help="run a program under sanitizerd (msSanitizer's options; see run --help)")

    replay = commands.add_parser("replay", help="feed a job saved with `run --save FILE` to a daemon again")
    replay.add_argument("file", help="the file `sanitizerd run --save FILE` wrote")
    replay.add_argument("--socket", type=Path, default=None, help=_SOCKET_HELP)
    replay.add_argument("--format", choices=["text", "json"], default="text", help="how findings print [text]")
    replay.add_argument(
        "--error-exitcode", type=_argument_type(_exit_code), default=0, metavar="N",
        help="exit with N when the replay reports an error, as `run --error-exitcode` [0: off]",
    )  # fmt: skip
    _quiet_option(replay, "the file's bytes and messages sent")

    report = commands.add_parser("report", help="write a job's findings as a visual HTML page (docs/report.md)")
    report.add_argument("job", help="the job's full name, as `jobs` lists it and `run` prints in its summary")
    report.add_argument("--html", required=True, metavar="OUT.html", help="write the page here")
    report.add_argument(
        "--save", default=None, metavar="FILE",
        help="the job's stream saved by `run --save FILE`: adds each race's pipe timeline and the memory map",
    )  # fmt: skip
    report.add_argument("--socket", type=Path, default=None, help=_SOCKET_HELP)
    _store_option(report, "read the job's findings from this PostgreSQL store instead of asking a daemon")

    for name, help_text in (
        ("findings", "print findings from a running daemon"),
        ("sessions", "list sessions"),
        ("jobs", "list jobs: sessions grouped by job, with ranks, devices and sdccheck signatures"),
    ):
        query = commands.add_parser(name, help=help_text, description=help_text)
        query.add_argument("--socket", type=Path, default=None, help=_SOCKET_HELP)
        formats = ["text", "json", "sarif", "junit", "html"] if name == "findings" else ["text", "json"]
        query.add_argument("--format", choices=formats, default="text", help="output format [text]")
        if name == "findings":
            _finding_filters(query)
    return parser


_SOCKET_HELP = "the daemon's control socket [the host's daemon if one runs, else your own]"


def _quiet_option(parser: argparse.ArgumentParser, shown: str) -> None:
    parser.add_argument(
        "--quiet", "-q", action="store_true",
        help=f"no progress on stderr ({shown}: a live line on a terminal, else a line every 5 s)",
    )  # fmt: skip


def _exit_code(text: str) -> int:
    code = int(text)
    if not 0 <= code <= 255:
        raise ValueError(f"an exit code is 0 to 255; got {code}")
    return code


def _finding_filters(query: argparse.ArgumentParser) -> None:
    from sanitizerd.cli.query import parse_since

    query.add_argument("--job", default="", help="only this job's findings (its full name, as `jobs` lists it)")
    query.add_argument(
        "--session", type=_argument_type(_session_id), default=0, metavar="ID", help="only this session's findings"
    )
    query.add_argument(
        "--kind", action="append", default=[], metavar="KIND",
        help="only findings of this kind (illegal_read, race_raw, memory_leak, ...; repeatable or comma-separated)",
    )  # fmt: skip
    query.add_argument(
        "--severity", choices=["error", "warning"], default="",
        help="only findings of at least this severity (error: errors only) [any]",
    )  # fmt: skip
    query.add_argument(
        "--since", type=_argument_type(parse_since), default=0.0, metavar="WHEN",
        help="only findings stored since WHEN: an age (90s, 10m, 2h, 1d), an ISO 8601 time or epoch seconds",
    )  # fmt: skip
    _store_option(
        query,
        "read a PostgreSQL store (postgresql://you@host/db) instead of asking a daemon: every host's daemons "
        "that write there, what the database lets your role read",
    )
    query.add_argument(
        "--show-suppressed", action="store_true",
        help="text and JUnit: also the findings a suppression rule hid, each under its reason (JSON, SARIF and HTML "
        "always carry them, marked)",
    )  # fmt: skip
    query.add_argument(
        "--follow", "-f", action="store_true",
        help="print new findings as they are stored, until interrupted (text, or JSON lines with --format json)",
    )  # fmt: skip
    _quiet_option(query, "with --follow: the findings followed so far")


def _session_id(text: str) -> int:
    ident = int(text)
    if not 0 <= ident < 2**63:
        raise ValueError(f"a session id is 0 to 2**63-1; got {ident}")
    return ident


def main(argv: list[str] | None = None) -> int:
    """The command; its output piped into a reader that stops early (``| head``) ends it quietly, as a pipe's
    writer ends (what it was doing goes on only as far as it needs no stdout)."""
    try:
        try:
            status = _main(sys.argv[1:] if argv is None else argv)
        except SystemExit:
            # argparse ends --help, --version and a refused command line so, its text still in stdout's buffer
            # (unless PYTHONUNBUFFERED). argparse ignores a write that fails and exits as it meant to: the flush too.
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                _stdout_to_devnull()
            raise
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _stdout_to_devnull()
        return 1


def _stdout_to_devnull() -> None:
    """Python's own advice for a reader that left: stdout at /dev/null, so the flush at exit does not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "run":
        from sanitizerd.cli.run import run  # msSanitizer's own parsing rules, not argparse's

        return run(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "serve":
        from sanitizerd import logs
        from sanitizerd.daemon import hold_sighup
        from sanitizerd.workers.run import run_daemon

        hold_sighup()
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
            log_level=log_level,
            workers=args.workers or default_workers(),
            suppressions=file.suppressions,
            store=args.store or str(file.top.get("store", "")),
        )
        return run_daemon(settings)
    if args.command == "replay":
        from sanitizerd.cli.replay import replay

        return replay(
            args.file, socket=str(args.socket) if args.socket else None, fmt=args.format,
            error_exitcode=args.error_exitcode, quiet=args.quiet,
        )  # fmt: skip
    if args.command == "report":
        from sanitizerd.cli.report import report

        return report(args.job, out=args.html, socket=str(args.socket) if args.socket else None, save=args.save,
                      store=args.store or "")  # fmt: skip
    if args.command in ("findings", "sessions", "jobs"):
        from sanitizerd.cli import query

        socket = str(args.socket) if args.socket else None  # None: the host's daemon, else the user's own
        if args.command == "findings":
            return _findings(query, args, socket)
        if args.command == "jobs":
            return query.jobs(socket, fmt=args.format)
        return query.sessions(socket, fmt=args.format)
    _parser().print_help()
    return 2


def _findings(query: ModuleType, args: argparse.Namespace, socket: str | None) -> int:
    try:
        kinds = query.parse_kinds(args.kind)
    except ValueError as exc:
        print(f"sanitizerd findings: error: {exc}", file=sys.stderr)
        return 2
    selected = api.FindingFilter(
        job=args.job, session=args.session, kinds=kinds, severity=args.severity, since=args.since
    )
    if args.follow:
        if args.format not in ("text", "json"):
            print("sanitizerd findings: error: --follow prints text or JSON lines (--format text|json)",
                  file=sys.stderr)  # fmt: skip
            return 2
        return int(query.follow(socket, selected=selected, fmt=args.format, show_suppressed=args.show_suppressed,
                                store=args.store or "", quiet=args.quiet))  # fmt: skip
    return int(query.findings(socket, selected=selected, fmt=args.format, show_suppressed=args.show_suppressed,
                              store=args.store or ""))  # fmt: skip
