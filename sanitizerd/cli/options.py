"""Options of ``sanitizerd run``: msSanitizer's command line (reference §3), its validation and its messages.

The parser follows msSanitizer's ``getopt_long`` use: short ``-h``, ``-v``, ``-t X`` (clustered or attached,
as getopt allows), long options by full name or unambiguous prefix, every long option but help/version taking
a value as ``--opt=value`` or ``--opt value``. Each value passes msSanitizer's character whitelist before it
is parsed, and parsing stops at the first error, help or version. Messages are msSanitizer's with
``[sanitizerd]`` in place of ``[mssanitizer]``.

Deliberate differences from msSanitizer, each marked where it is made:

* the program starts at ``--`` or at the first non-option argument (GNU getopt would permute and keep parsing
  options after the program name, which is why msSanitizer's docs ask for ``--``);
* ``-t`` also takes ``|``-joined tool names;
* numeric values must be all digits (``std::stol`` reads ``--block-id=7x`` as 7);
* ``--socket``, ``--error-exitcode``, ``--save``, ``--report``, ``--report-format``, ``--suppressions``,
  ``--show-suppressed`` and ``--allow-unchecked`` are sanitizerd's own;
* an unknown or ambiguous option, or one missing its value, is one line naming it (with the option meant, when
  one is close), not getopt's line, "unrecognized command" and the whole help;
* the log file is not opened here, and every message is ours to print on stderr.
"""

from __future__ import annotations

import difflib
import os
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sanitizerd.findings import suppressions
from sanitizerd_protocol.messages import DEFAULT_SINGLE_PIPE_DISTANCE, MAX_CACHE_SIZE_MB, TOOLS, Config

__all__ = ["NOT_YET_CHECKED", "PREFIX", "RunOptions", "UsageError", "parse_run_args", "run_help"]

PREFIX = "[sanitizerd]"

# --- what this version accepts but does not check -----------------------------------------------------------
# One line per feature, printed once per run. Delete an entry when its detector lands and the notice
# disappears; the keys are tool names (as in TOOLS) or option names.
_NOT_CHECKED = "is accepted but not yet checked by this version of sanitizerd"
_NO_EFFECT = "is accepted but has no effect in this version of sanitizerd"
NOT_YET_CHECKED: dict[str, str] = {
    "--check-cross-npu-races": (
        f"{PREFIX} WARNING: --check-cross-npu-races {_NOT_CHECKED}; cross-NPU races will not be reported."
    ),
    "--max-debuglog-size": (f"{PREFIX} WARNING: --max-debuglog-size {_NO_EFFECT}; it writes no debug log file to cap."),
}

# --- limits, from msSanitizer's cli_parser.cpp and config.h -------------------------------------------------
MAX_BLOCK_ID = 200
DEFAULT_CACHE_SIZE_MB = 100
DEFAULT_DEBUGLOG_SIZE_MB = 1024
MAX_DEBUGLOG_SIZE_MB = 10240
MAX_KERNEL_NAME_LEN = 2047  # KERNEL_NAME_MAX less the C string's terminating NUL
MAX_LOG_FILE_PATH_LEN = 4096  # MAX_FILE_PATH_LEN
MAX_SOCKET_PATH_LEN = 108  # sizeof(sockaddr_un.sun_path) on Linux: a longer path can be neither bound nor connected
MAX_EXIT_CODE = 255
MAX_SINGLE_PIPE_DISTANCE = 1 << 20

LOG_LEVELS = ("info", "warn", "error")
REPORT_FORMATS = ("sarif", "junit", "json")
# --report's format when --report-format is not given: by the file's suffix, else SARIF
_REPORT_SUFFIXES = {".sarif": "sarif", ".xml": "junit", ".json": "json"}
DEMANGLE_MODES = ("full", "simple", "no")
_SELECTABLE_TOOLS = (
    "memcheck",
    "racecheck",
    "initcheck",
    "synccheck",
)  # registercheck comes only with memcheck


class UsageError(Exception):
    """The command line is not usable: print ``message`` on stderr and exit with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@dataclass
class RunOptions:
    """A parsed ``sanitizerd run`` command line.

    ``program`` is the program as given followed by its arguments, so the child sees its own ``argv[0]``;
    ``executable`` is the file to exec, which differs when a bare name was found in ``.`` (execvp would not
    look there). ``notices`` are lines to print once before the run.
    """

    socket: str | None = None
    error_exitcode: int | None = None
    log_file: str | None = None
    save: str | None = None  # record the job's frames here, for `sanitizerd replay`
    report: str | None = None  # write the run's findings here when it ends, in report_format
    report_format: str = "sarif"
    config: Config = field(default_factory=Config)
    program: list[str] = field(default_factory=list)
    executable: str | None = None
    notices: list[str] = field(default_factory=list)
    show_suppressed: bool = False
    # run the program even where msSanitizer's hooks cannot be used (sanitizerd/cli/hooks.py): never by default
    allow_unchecked: bool = False
    show_help: bool = False
    show_version: bool = False


# --- character whitelist ------------------------------------------------------------------------------------
# msSanitizer checks every value against these sets before parsing it, to keep control characters and shell
# metacharacters out of its logs: lowercase letters for every option but --max-debuglog-size, digits only
# where a number or a path is expected, and a path's few symbols for --log-file.
_LOWER = frozenset(string.ascii_lowercase)
_UPPER = frozenset(string.ascii_uppercase)
_DIGITS = frozenset(string.digits)


@dataclass(frozen=True)
class _Option:
    name: str
    short: str | None
    has_value: bool
    allowed: frozenset[str] | None  # None: no whitelist (sanitizerd's --socket takes any path)


_OPTIONS: tuple[_Option, ...] = (
    _Option("help", "h", False, frozenset()),
    _Option("version", "v", False, frozenset()),
    _Option("tool", "t", True, _LOWER | {"|"}),  # "|" joins names: a sanitizerd extension
    _Option("log-level", None, True, _LOWER),
    _Option("log-file", None, True, _LOWER | _UPPER | _DIGITS | set("-./_")),
    _Option("max-debuglog-size", None, True, _DIGITS),
    _Option("leak-check", None, True, _LOWER),
    _Option("check-unused-memory", None, True, _LOWER),
    _Option("check-device-heap", None, True, _LOWER),
    _Option("check-cann-heap", None, True, _LOWER),
    _Option("block-id", None, True, _LOWER | _DIGITS),
    _Option("cache-size", None, True, _LOWER | _DIGITS),
    _Option("kernel-name", None, True, _LOWER | _UPPER | _DIGITS | {"_", "-"}),
    _Option("full-backtrace", None, True, _LOWER),
    _Option("demangle", None, True, _LOWER),
    _Option("check-cross-npu-races", None, True, _LOWER),
    _Option("single-pipe-distance", None, True, _DIGITS),  # a sanitizerd extension
    _Option("race-fold", None, True, _LOWER),  # a sanitizerd extension
    _Option("socket", None, True, None),
    _Option("error-exitcode", None, True, _DIGITS),
    _Option("save", None, True, None),
    _Option("report", None, True, None),
    _Option("report-format", None, True, _LOWER),
    _Option("suppressions", None, True, None),
    _Option("show-suppressed", None, False, frozenset()),
    _Option("allow-unchecked", None, False, frozenset()),
)
_BY_NAME = {opt.name: opt for opt in _OPTIONS}
_BY_SHORT = {opt.short: opt for opt in _OPTIONS if opt.short}


# --- help ---------------------------------------------------------------------------------------------------


def run_help() -> str:
    """The help text of ``sanitizerd run`` in msSanitizer's layout (defaults in ``[ ]``), no final newline."""
    return "\n".join(
        [
            "sanitizerd runs msSanitizer's functional correctness checks on Ascend NPU programs, with",
            "the checking done by a shared host daemon. The tools are memcheck, racecheck, initcheck and",
            "synccheck.",
            "",
            "Usage: sanitizerd run [<options>] [--] <user_program> [<user_options>]",
            "       (use -- when the program has options of its own)",
            "",
            "  basic user options, with default in [ ]:",
            "    -h --help            show this message",
            "    -v --version         show version",
            "    -t --tool=<name>     use the sanitizer tool named <name> [memcheck]",
            "                         <name>: memcheck|racecheck|initcheck|synccheck; repeat -t, or join",
            "                         names with '|', to run several tools",
            "    --log-file=<file>    write reports to <file> [stdout]",
            f"    --log-level=<level>  report messages at or above <level>: {'|'.join(LOG_LEVELS)} [warn]",
            "    --max-debuglog-size=<size>",
            f"                         set debuglog file's max size to <size> (MB), "
            f"default:{DEFAULT_DEBUGLOG_SIZE_MB}, max: {MAX_DEBUGLOG_SIZE_MB}",
            "    --kernel-name=<name> only the kernels whose name contains <name> are checked [all kernels]",
            "    --full-backtrace=no|yes",
            "                         print full backtraces including Ascend C internal calls [no]",
            f"    --demangle={'|'.join(DEMANGLE_MODES)}",
            "                         demangle device function names in backtraces [full]",
            "",
            "  user options for Memcheck:",
            "    --leak-check=no|yes  search for memory leaks at exit [no]",
            "    --check-unused-memory=no|yes",
            "                         search for unused memory allocations [no]",
            "    --check-device-heap=no|yes",
            "                         enable device heap check [no]",
            "    --check-cann-heap=no|yes",
            "                         enable cann heap check [no]",
            "    --block-id=<block-id>",
            f"                         set check block id (0-{MAX_BLOCK_ID}), default check all block",
            "    --cache-size=<size>",
            f"                         set single block records size to <size> (MB), "
            f"default:{DEFAULT_CACHE_SIZE_MB}, max: {MAX_CACHE_SIZE_MB}",
            "",
            "  user options for Racecheck:",
            "    --check-cross-npu-races=no|yes",
            "                         check races across different NPUs [no]",
            "    --single-pipe-distance=<n>",
            "                         instructions of one pipe more than <n> apart are taken as ordered",
            f"                         (0 turns the in-pipe check off) [{DEFAULT_SINGLE_PIPE_DISTANCE}]",
            "    --race-fold=no|yes   report a race once for all the blocks it is found between, not once per",
            "                         pair of blocks as msSanitizer does (for kernels of many blocks) [no]",
            "",
            "  sanitizerd options:",
            "    --socket=<path>      connect to the daemon listening at <path> [the daemon's default]",
            "    --error-exitcode=<n> exit with <n> (0-255) when errors are reported [the program's status;",
            "                         1 when it is 0 and silent data corruption was found]",
            "    --save=<file>        record everything the program's clients send, for `sanitizerd replay`",
            "    --report=<file>      write the run's findings to <file> when it ends, for CI [none]",
            f"    --report-format={'|'.join(REPORT_FORMATS)}",
            "                         the report's format [by <file>'s suffix: .sarif, .xml (junit), .json;",
            "                         else sarif]",
            "    --suppressions=<file>",
            "                         hide the known findings its [[suppress]] rules name, each with a",
            "                         reason; they are stored, marked and counted as suppressed [none]",
            "    --show-suppressed    print suppressed findings too, each under its reason",
            "    --allow-unchecked    run the program even where msSanitizer's hooks cannot be used (a",
            "                         release not identified, a hook missing): it runs without them, and the",
            "                         summary says so [refuse to run]",
            "",
            "  Every option but -h, -v, --show-suppressed and --allow-unchecked needs a value: --<option>=<value>",
            "  or --<option> <value>.",
        ]
    )


# --- parsing ------------------------------------------------------------------------------------------------


@dataclass
class _State:
    config: Config = field(default_factory=Config)
    tools: set[str] = field(default_factory=set)  # as selected by -t, before msSanitizer's defaulting
    given: set[str] = field(default_factory=set)  # names of the options that appeared
    log_file: str | None = None
    socket: str | None = None
    error_exitcode: int | None = None
    save: str | None = None
    report: str | None = None
    report_format: str | None = None
    notices: list[str] = field(default_factory=list)
    show_suppressed: bool = False
    # run the program even where msSanitizer's hooks cannot be used (sanitizerd/cli/hooks.py): never by default
    allow_unchecked: bool = False
    show_help: bool = False
    show_version: bool = False


def _with_help(line: str) -> UsageError:
    # msSanitizer prints the help straight after a bad value, with no blank line in between
    return UsageError(f"{line}\n{run_help()}")


def _invalid(name: str, detail: str = "") -> UsageError:
    return _with_help(f"{PREFIX} ERROR: --{name} param is invalid{detail}")


def _unrecognized(diagnostic: str, *, spelled: str = "") -> UsageError:
    # One line that names the culprit (glibc's getopt words), with the option meant when ``spelled`` is close to
    # one. msSanitizer prints getopt's line, its own "unrecognized command " and the whole help: three messages,
    # of which the one that says what is wrong scrolls away first.
    meant = difflib.get_close_matches(spelled, [o.name for o in _OPTIONS], n=1) if spelled else []
    hint = f"; did you mean '--{meant[0]}'?" if meant else ""
    return UsageError(f"{PREFIX} ERROR: {diagnostic}{hint} (sanitizerd run --help lists the options)")


def _decimal(value: str) -> int | None:
    # Deliberately stricter than std::stol/stoul, which take "7x" as 7 (and stoul wraps into uint32): a value
    # must be all digits.
    if value and all(ch in _DIGITS for ch in value):
        return int(value)
    return None


def _yes(name: str, value: str) -> bool:
    if value == "yes":
        return True
    if value == "no":
        return False
    raise _invalid(name)


def _set_tool(value: str, st: _State) -> None:
    for name in value.split("|"):
        if name not in _SELECTABLE_TOOLS:
            raise _invalid("tool")
        st.tools.add(name)


def _set_log_level(value: str, st: _State) -> None:
    if value not in LOG_LEVELS:
        raise _invalid("log-level")
    st.config.log_level = value


def _set_log_file(value: str, st: _State) -> None:
    if len(os.fsencode(value)) > MAX_LOG_FILE_PATH_LEN:
        # not an error in msSanitizer: reports go to stdout and the run goes on
        st.notices.append(
            f"{PREFIX} WARNING: --log-file is invalid because it exceeds the maximum path length of "
            f"{MAX_LOG_FILE_PATH_LEN}. Stdout will be used for logging instead."
        )
        st.log_file = None
        return
    if not value:
        # msSanitizer says "[ERROR] Empty log file." without its tag and without help; ours carries the tag
        # because our stderr is shared with the program's
        raise UsageError(f"{PREFIX} ERROR: Empty log file.")
    st.log_file = value


def _set_max_debuglog_size(value: str, st: _State) -> None:
    size = _decimal(value)
    if size is None or not 1 <= size <= MAX_DEBUGLOG_SIZE_MB:
        raise _invalid(
            "max-debuglog-size",
            f". range: 1-{MAX_DEBUGLOG_SIZE_MB} (MB), default:{DEFAULT_DEBUGLOG_SIZE_MB} (MB)",
        )


def _set_leak_check(value: str, st: _State) -> None:
    st.config.leak_check = _yes("leak-check", value)


# For the next four, "no" leaves the setting alone as in msSanitizer (only leak-check and full-backtrace
# assign it), so a repeated option cannot switch off what an earlier one switched on.
def _set_check_unused_memory(value: str, st: _State) -> None:
    if _yes("check-unused-memory", value):
        st.config.check_unused_memory = True


def _set_check_device_heap(value: str, st: _State) -> None:
    if _yes("check-device-heap", value):
        st.config.check_device_heap = True
        st.config.leak_check = True  # heap mode is a leak check of that heap


def _set_check_cann_heap(value: str, st: _State) -> None:
    if _yes("check-cann-heap", value):
        st.config.check_cann_heap = True
        st.config.leak_check = True


def _set_check_cross_npu_races(value: str, st: _State) -> None:
    if _yes("check-cross-npu-races", value):
        st.config.check_cross_npu_races = True


def _set_block_id(value: str, st: _State) -> None:
    block = _decimal(value)
    if block is None or block > MAX_BLOCK_ID:
        raise _invalid("block-id", f". range: [0, {MAX_BLOCK_ID}]")
    st.config.block_id = block


def _set_cache_size(value: str, st: _State) -> None:
    size = _decimal(value)
    if size is None or not 1 <= size <= MAX_CACHE_SIZE_MB:
        raise _invalid("cache-size", f". range: [1, {MAX_CACHE_SIZE_MB}](MB)")
    st.config.cache_size = size


def _set_single_pipe_distance(value: str, st: _State) -> None:
    distance = _decimal(value)
    if distance is None or not 0 <= distance <= MAX_SINGLE_PIPE_DISTANCE:
        raise _invalid("single-pipe-distance", f". range: [0, {MAX_SINGLE_PIPE_DISTANCE}]")
    st.config.single_pipe_distance = distance


def _set_race_fold(value: str, st: _State) -> None:
    st.config.race_fold = _yes("race-fold", value)


def _set_kernel_name(value: str, st: _State) -> None:
    if not value:
        return  # as in msSanitizer: an empty filter keeps the previous one (by default: every kernel)
    if len(value) > MAX_KERNEL_NAME_LEN:
        raise _invalid("kernel-name", f". require length <= {MAX_KERNEL_NAME_LEN}")
    st.config.kernel_name = value


def _set_full_backtrace(value: str, st: _State) -> None:
    st.config.full_backtrace = _yes("full-backtrace", value)


def _set_demangle(value: str, st: _State) -> None:
    if value not in DEMANGLE_MODES:
        raise _invalid("demangle")
    st.config.demangle = value


def _set_socket(value: str, st: _State) -> None:
    if not value or len(os.fsencode(value)) > MAX_SOCKET_PATH_LEN:
        raise _invalid("socket", f". require a path of 1 to {MAX_SOCKET_PATH_LEN} bytes")
    st.socket = value


def _set_save(value: str, st: _State) -> None:
    if not value:
        raise _invalid("save", ". require a file path")
    st.save = value


def _set_report(value: str, st: _State) -> None:
    if not value:
        raise _invalid("report", ". require a file path")
    st.report = value


def _set_report_format(value: str, st: _State) -> None:
    if value not in REPORT_FORMATS:
        raise _invalid("report-format", f". require one of {'|'.join(REPORT_FORMATS)}")
    st.report_format = value


def _report_format(st: _State) -> str:
    if st.report_format is not None:
        return st.report_format
    suffix = os.path.splitext(st.report or "")[1].lower()
    return _REPORT_SUFFIXES.get(suffix, "sarif")


def _set_error_exitcode(value: str, st: _State) -> None:
    code = _decimal(value)
    if code is None or code > MAX_EXIT_CODE:
        raise _invalid("error-exitcode", f". range: [0, {MAX_EXIT_CODE}]")
    st.error_exitcode = code


def _set_suppressions(value: str, st: _State) -> None:
    if not value:
        raise _invalid("suppressions", ". require a file path")
    try:
        st.config.suppressions = suppressions.load(Path(value))
    except suppressions.SuppressionError as exc:
        raise UsageError(f"{PREFIX} ERROR: --suppressions: {exc}") from None


def _set_show_suppressed(value: str, st: _State) -> None:
    st.show_suppressed = True


def _set_allow_unchecked(value: str, st: _State) -> None:
    st.allow_unchecked = True


def _set_help(value: str, st: _State) -> None:
    st.show_help = True


def _set_version(value: str, st: _State) -> None:
    st.show_version = True


_HANDLERS: dict[str, Callable[[str, _State], None]] = {
    "help": _set_help,
    "version": _set_version,
    "tool": _set_tool,
    "log-level": _set_log_level,
    "log-file": _set_log_file,
    "max-debuglog-size": _set_max_debuglog_size,
    "leak-check": _set_leak_check,
    "check-unused-memory": _set_check_unused_memory,
    "check-device-heap": _set_check_device_heap,
    "check-cann-heap": _set_check_cann_heap,
    "block-id": _set_block_id,
    "cache-size": _set_cache_size,
    "kernel-name": _set_kernel_name,
    "full-backtrace": _set_full_backtrace,
    "demangle": _set_demangle,
    "check-cross-npu-races": _set_check_cross_npu_races,
    "single-pipe-distance": _set_single_pipe_distance,
    "race-fold": _set_race_fold,
    "socket": _set_socket,
    "error-exitcode": _set_error_exitcode,
    "save": _set_save,
    "report": _set_report,
    "report-format": _set_report_format,
    "suppressions": _set_suppressions,
    "show-suppressed": _set_show_suppressed,
    "allow-unchecked": _set_allow_unchecked,
}
assert set(_HANDLERS) == set(_BY_NAME), "every option needs exactly one handler"


def _apply(opt: _Option, value: str, st: _State) -> None:
    if opt.allowed is not None and any(ch not in opt.allowed for ch in value):
        # the blank line after this one is msSanitizer's too
        raise UsageError(
            f"{PREFIX} ERROR: param '{opt.name}' contains invalid characters and is ignored.\n\n{run_help()}"
        )
    st.given.add(opt.name)
    _HANDLERS[opt.name](value, st)


def _long_option(body: str) -> tuple[_Option, str | None]:
    """Match ``--body`` as getopt_long does (exact name, else a unique prefix); the value after ``=``."""
    name, eq, value = body.partition("=")
    opt = _BY_NAME.get(name)
    if opt is None:
        candidates = [o for o in _OPTIONS if o.name.startswith(name)]
        if not candidates:
            raise _unrecognized(f"unrecognized option '--{body}'", spelled=name)
        if len(candidates) > 1:
            names = " ".join(f"'--{o.name}'" for o in candidates)
            raise _unrecognized(f"option '--{name}' is ambiguous; possibilities: {names}")
        opt = candidates[0]
    return opt, (value if eq else None)


def _parse_options(argv: list[str], st: _State) -> int:
    """Apply the options at the front of ``argv``; return the index where the program starts.

    Stops early, like msSanitizer, as soon as help or version is requested.
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return i + 1
        if arg == "-" or not arg.startswith("-"):
            return i  # the program: no permuting, so its own options stay its own
        if arg.startswith("--"):
            opt, value = _long_option(arg[2:])
            i += 1
            if opt.has_value and value is None:
                # getopt takes the next argument whatever it looks like, even "--" or another option
                if i == len(argv):
                    raise _unrecognized(f"option '--{opt.name}' requires an argument")
                value = argv[i]
                i += 1
            elif not opt.has_value and value is not None:
                raise _unrecognized(f"option '--{opt.name}' doesn't allow an argument")
            _apply(opt, value or "", st)
            if st.show_help or st.show_version:
                return i
            continue
        # a cluster of short options: "-hv", "-tmemcheck", "-t memcheck"
        i += 1
        for pos in range(1, len(arg)):
            short = arg[pos]
            opt = _BY_SHORT.get(short)
            if opt is None:
                raise _unrecognized(f"invalid option -- '{short}'")
            if opt.has_value:
                value = arg[pos + 1 :]
                if not value:
                    if i == len(argv):
                        raise _unrecognized(f"option requires an argument -- '{short}'")
                    value = argv[i]
                    i += 1
                _apply(opt, value, st)
                break
            _apply(opt, "", st)
            if st.show_help or st.show_version:
                return i
    return i


def _resolve_tools(st: _State) -> list[str]:
    """msSanitizer's tool flags, named, in ``TOOLS`` order."""
    enabled = set(st.tools)
    # memcheck and initcheck both set msSanitizer's defaultCheck (the memcheck engine); racecheck and
    # synccheck do not. Memcheck is added when a memcheck-only feature is on, or when nothing else would run.
    default_check = bool(enabled & {"memcheck", "initcheck"})
    cfg = st.config
    if cfg.leak_check or cfg.check_unused_memory or not (default_check or enabled & {"racecheck", "synccheck"}):
        enabled.add("memcheck")
    if "memcheck" in enabled:
        enabled.add("registercheck")  # msSanitizer's memcheck always runs registercheck too (reference §6.1)
    return [tool for tool in TOOLS if tool in enabled]


def _printable(path: str) -> str:
    # msSanitizer's ReplaceInvalidChar: a file name must not smuggle control characters into our output
    return "".join(ch if ch.isprintable() else "?" for ch in path)


def _program_error(detail: str) -> UsageError:
    return UsageError(f"{PREFIX} ERROR: {detail}\n{PREFIX} Use --help for more information")


def _is_executable(path: str) -> bool:
    # a directory has x bits too, but exec would fail on it: require a regular file (msSanitizer does not)
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _find_executable(name: str) -> str | None:
    """msSanitizer's FindExe: ``.`` first, then each ``$PATH`` entry; the first executable of that name."""
    if not name:
        return None
    dirs = ["."] + [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    for directory in dirs:
        candidate = os.path.join(directory, name)
        if _is_executable(candidate):
            return candidate
    return None


def _resolve_program(program: list[str]) -> str:
    """Check the program as msSanitizer does and return the absolute path to exec."""
    if not program:
        raise _program_error("no program specified")
    name = program[0]
    if "/" not in name:
        found = _find_executable(name)
        if found is None:
            raise _program_error("find executable from PATH environment FAILED")
        path = found
    else:
        if not os.path.exists(name):  # follows symlinks: a dangling one is "not found"
            raise _program_error("program path NOT found")
        path = name
    shown = _printable(os.path.realpath(path))
    try:
        os.stat(path)
    except OSError:
        raise _program_error(f"FAILED to get user program ({shown}) stat") from None
    if not _is_executable(path):
        raise _program_error(f"User program ({shown}) has no execute permission")
    return os.path.abspath(path)


def _notices(st: _State, tools: list[str]) -> list[str]:
    cfg = st.config
    in_use = set(tools)
    flags = {
        "--check-cross-npu-races": cfg.check_cross_npu_races,
        "--cache-size": "cache-size" in st.given,
        "--full-backtrace": cfg.full_backtrace,
        "--demangle": cfg.demangle != "full",
        "--max-debuglog-size": "max-debuglog-size" in st.given,
    }
    in_use.update(key for key, on in flags.items() if on)
    return [text for key, text in NOT_YET_CHECKED.items() if key in in_use]


def parse_run_args(argv: list[str]) -> RunOptions:
    """Parse the arguments after ``run``.

    Raises:
        UsageError: a bad option or value (the message ends with the help where msSanitizer prints it),
            or a program that cannot be run.
    """
    st = _State()
    start = _parse_options(argv, st)
    if st.show_help or st.show_version:
        return RunOptions(
            socket=st.socket,
            error_exitcode=st.error_exitcode,
            log_file=st.log_file,
            config=st.config,
            notices=st.notices,
            show_help=st.show_help,
            show_version=st.show_version,
        )
    program = list(argv[start:])
    executable = _resolve_program(program)
    # msSanitizer checks this only after the program, so its message comes with the program errors' footer
    if st.config.check_cann_heap and st.config.check_device_heap:
        raise _program_error("CANNOT enable both --check-cann-heap and --check-device-heap")
    tools = _resolve_tools(st)
    st.config.tools = tools
    if st.report_format is not None and st.report is None:
        st.notices.append(f"{PREFIX} WARNING: --report-format has no effect without --report=<file>.")
    return RunOptions(
        socket=st.socket,
        error_exitcode=st.error_exitcode,
        log_file=st.log_file,
        save=st.save,
        report=st.report,
        report_format=_report_format(st),
        config=st.config,
        program=program,
        executable=executable,
        notices=st.notices + _notices(st, tools),
        show_suppressed=st.show_suppressed,
        allow_unchecked=st.allow_unchecked,
    )
