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
  ``--show-suppressed``, ``--allow-unchecked`` and ``--quiet`` are sanitizerd's own;
* an unknown or ambiguous option, or one missing its value, is one line naming it (with the option meant, when
  one is close), not getopt's line, "unrecognized command" and the whole help;
* the log file is not opened here, and every message is ours to print on stderr.
"""

from __future__ import annotations

import difflib
import os
import string
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from sanitizerd.findings import suppressions
from sanitizerd_protocol.messages import (
    DEFAULT_GM_PADDING,
    DEFAULT_SINGLE_PIPE_DISTANCE,
    MAX_CACHE_SIZE_MB,
    MAX_GM_PADDING,
    MIN_GM_PADDING,
    TOOLS,
    Config,
)

__all__ = ["NOT_YET_CHECKED", "PREFIX", "RunOptions", "UsageError", "parse_run_args", "run_help"]

PREFIX = "[sanitizerd]"

# --- what this version accepts but does not check -----------------------------------------------------------
# One line per feature, printed once per run. Delete an entry when its detector lands and the notice
# disappears; the keys are tool names (as in TOOLS) or option names.
_NOT_CHECKED = "is accepted but not yet checked by this version of sanitizerd"
_NO_EFFECT = "is accepted but has no effect in this version of sanitizerd"
NOT_YET_CHECKED: dict[str, str] = {
    "--max-debuglog-size": (f"{PREFIX} WARNING: --max-debuglog-size {_NO_EFFECT}; it writes no debug log file to cap."),
}

# --- limits, from msSanitizer's cli_parser.cpp and config.h -------------------------------------------------
MAX_BLOCK_ID = 200
DEFAULT_CACHE_SIZE_MB = 100
DEFAULT_DEBUGLOG_SIZE_MB = 1024
MAX_DEBUGLOG_SIZE_MB = 10240
MAX_KERNEL_NAME_LEN = 2047  # KERNEL_NAME_MAX less the C string's terminating NUL
MAX_LOG_REQUIRE_FILE_PATH_LEN = 4096  # MAX_REQUIRE_FILE_PATH_LEN
MAX_SOCKET_PATH_LEN = 108  # sizeof(sockaddr_un.sun_path) on Linux: a longer path can be neither bound nor connected
MAX_EXIT_CODE = 255
MAX_SINGLE_PIPE_DISTANCE = 1 << 20

LOG_LEVELS = ("info", "warn", "error")
REPORT_FORMATS = ("sarif", "junit", "json", "html")
# --report's format when --report-format is not given: by the file's suffix, else SARIF
_REPORT_SUFFIXES = {".sarif": "sarif", ".xml": "junit", ".json": "json", ".html": "html", ".htm": "html"}
DEMANGLE_MODES = ("full", "simple", "no")
YES_NO = ("no", "yes")
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
    look there). ``notices`` are lines to print once before the run. When help or version is asked for, the
    options parsed before it are kept and nothing after it is looked at.
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
    quiet: bool = False  # no progress line on stderr (sanitizerd/cli/progress.py)
    show_help: bool = False
    show_version: bool = False


@dataclass
class _State:
    options: RunOptions = field(default_factory=RunOptions)
    tools: set[str] = field(default_factory=set)  # as selected by -t, before msSanitizer's defaulting
    given: set[str] = field(default_factory=set)  # names of the options that appeared


# --- character whitelist ------------------------------------------------------------------------------------
# msSanitizer checks every value against these sets before parsing it, to keep control characters and shell
# metacharacters out of its logs: lowercase letters for every option but --max-debuglog-size, digits only
# where a number or a path is expected, and a path's few symbols for --log-file.
_LOWER = frozenset(string.ascii_lowercase)
_UPPER = frozenset(string.ascii_uppercase)
_DIGITS = frozenset(string.digits)


# --- the options --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Option:
    """One option of ``sanitizerd run``, declared once: the parser, the whitelist and the help all read it."""

    name: str
    section: str  # the heading the help lists it under
    take: _Take  # checks the value and sets the setting it maps to
    dest: str = ""  # that setting: a field of RunOptions, or "config.<field>" of its Config; "": none
    _: KW_ONLY
    about: tuple[str, ...]  # its lines in the help, msSanitizer's words for msSanitizer's options
    implies: tuple[str, ...] = ()  # settings that "yes" switches on too, as dest is
    allowed: frozenset[str] | None = _LOWER  # the value's whitelist; None: none (sanitizerd's paths take any)
    choices: tuple[str, ...] = ()
    bounds: tuple[int, int] = (0, 0)  # a number's range, both ends included
    invalid: str = ""  # msSanitizer's words after "--<name> param is invalid", where it says more
    metavar: str = ""  # the value's name in the help; "|"-joined choices when empty
    short: str | None = None
    # the help starts its text on the line below even where the first line would fit, as it always has
    about_below: bool = False
    # the option the help lists it ahead of: msSanitizer's help and its getopt table differ in order
    listed_before: str = ""

    @property
    def usage(self) -> str:
        """The value as the help shows it; empty for an option that takes none."""
        return self.metavar or "|".join(self.choices)

    @property
    def takes_value(self) -> bool:
        """Whether it needs a value: exactly when the help shows one, so the two cannot disagree."""
        return bool(self.usage)


_Take = Callable[[_Option, str, _State], None]


def _assign(st: _State, dest: str, value: object) -> None:
    owner, _, attr = dest.rpartition(".")
    setattr(st.options.config if owner == "config" else st.options, attr, value)


def _with_help(line: str) -> UsageError:
    # msSanitizer prints the help straight after a bad value, with no blank line in between
    return UsageError(f"{line}\n{run_help()}")


def _invalid(opt: _Option) -> UsageError:
    return _with_help(f"{PREFIX} ERROR: --{opt.name} param is invalid{opt.invalid}")


def _decimal(value: str) -> int | None:
    # Deliberately stricter than std::stol/stoul, which take "7x" as 7 (and stoul wraps into uint32): a value
    # must be all digits.
    if value and all(ch in _DIGITS for ch in value):
        return int(value)
    return None


def _yes(opt: _Option, value: str) -> bool:
    if value not in YES_NO:
        raise _invalid(opt)
    return value == "yes"


def _flag(opt: _Option, value: str, st: _State) -> None:
    _assign(st, opt.dest, True)


def _yes_no(opt: _Option, value: str, st: _State) -> None:
    _assign(st, opt.dest, _yes(opt, value))


def _switch_on(opt: _Option, value: str, st: _State) -> None:
    # "no" leaves the setting alone, as in msSanitizer (only leak-check and full-backtrace assign it), so a
    # repeated option cannot switch off what an earlier one switched on
    if _yes(opt, value):
        for dest in (opt.dest, *opt.implies):
            _assign(st, dest, True)


def _one_of(opt: _Option, value: str, st: _State) -> None:
    if value not in opt.choices:
        raise _invalid(opt)
    _assign(st, opt.dest, value)


def _trace_spr(opt: _Option, value: str, st: _State) -> None:
    if value not in opt.choices:
        raise _invalid(opt)
    _assign(st, opt.dest, True)


def _number(opt: _Option, value: str, st: _State) -> None:
    low, high = opt.bounds
    number = _decimal(value)
    if number is None or not low <= number <= high:
        raise _invalid(opt)
    if opt.dest:
        _assign(st, opt.dest, number)


def _file(opt: _Option, value: str, st: _State) -> None:
    if not value:
        raise _invalid(opt)
    _assign(st, opt.dest, value)


def _tools(opt: _Option, value: str, st: _State) -> None:
    for name in value.split("|"):
        if name not in opt.choices:
            raise _invalid(opt)
        st.tools.add(name)


def _log_file(opt: _Option, value: str, st: _State) -> None:
    if len(os.fsencode(value)) > MAX_LOG_REQUIRE_FILE_PATH_LEN:
        # not an error in msSanitizer: reports go to stdout and the run goes on
        st.options.notices.append(
            f"{PREFIX} WARNING: --log-file is invalid because it exceeds the maximum path length of "
            f"{MAX_LOG_REQUIRE_FILE_PATH_LEN}. Stdout will be used for logging instead."
        )
        _assign(st, opt.dest, None)
        return
    if not value:
        # msSanitizer says "[ERROR] Empty log file." without its tag and without help; ours carries the tag
        # because our stderr is shared with the program's
        raise UsageError(f"{PREFIX} ERROR: Empty log file.")
    _assign(st, opt.dest, value)


def _kernel_name(opt: _Option, value: str, st: _State) -> None:
    if not value:
        return  # as in msSanitizer: an empty filter keeps the previous one (by default: every kernel)
    if len(value) > MAX_KERNEL_NAME_LEN:
        raise _invalid(opt)
    _assign(st, opt.dest, value)


def _socket(opt: _Option, value: str, st: _State) -> None:
    if not value or len(os.fsencode(value)) > MAX_SOCKET_PATH_LEN:
        raise _invalid(opt)
    _assign(st, opt.dest, value)


def _suppressions(opt: _Option, value: str, st: _State) -> None:
    if not value:
        raise _invalid(opt)
    try:
        _assign(st, opt.dest, suppressions.load(Path(value)))
    except suppressions.SuppressionError as exc:
        raise UsageError(f"{PREFIX} ERROR: --suppressions: {exc}") from None


_BASIC = "basic user options, with default in [ ]:"
_FOR_MEMCHECK = "user options for Memcheck:"
_FOR_RACECHECK = "user options for Racecheck:"
_OURS = "sanitizerd options:"
_REQUIRE_FILE_PATH = ". require a file path"

# In msSanitizer's getopt_long order, which an ambiguous prefix's possibilities follow; the help lists them by
# section. Laid out by hand, a few lines an option, to read as the table it is.
# fmt: off
_OPTIONS: tuple[_Option, ...] = (
    _Option("help", _BASIC, _flag, "show_help", short="h", about=("show this message",)),
    _Option("version", _BASIC, _flag, "show_version", short="v", about=("show version",)),
    _Option("tool", _BASIC, _tools, short="t", metavar="<name>", choices=_SELECTABLE_TOOLS,
            allowed=_LOWER | {"|"},  # "|" joins names: a sanitizerd extension
            about=("use the sanitizer tool named <name> [memcheck]",
                   f"<name>: {'|'.join(_SELECTABLE_TOOLS)}; repeat -t, or join",
                   "names with '|', to run several tools")),
    _Option("log-level", _BASIC, _one_of, "config.log_level", metavar="<level>", choices=LOG_LEVELS,
            about=(f"report messages at or above <level>: {'|'.join(LOG_LEVELS)} [warn];",
                   "error also skips the multi-core stomping check")),
    _Option("log-file", _BASIC, _log_file, "log_file", metavar="<file>", listed_before="log-level",
            allowed=_LOWER | _UPPER | _DIGITS | set("-./_"), about=("write reports to <file> [stdout]",)),
    _Option("max-debuglog-size", _BASIC, _number, metavar="<size>", bounds=(1, MAX_DEBUGLOG_SIZE_MB), allowed=_DIGITS,
            invalid=f". range: 1-{MAX_DEBUGLOG_SIZE_MB} (MB), default:{DEFAULT_DEBUGLOG_SIZE_MB} (MB)",
            about=(f"set debuglog file's max size to <size> (MB), default:{DEFAULT_DEBUGLOG_SIZE_MB}, "
                   f"max: {MAX_DEBUGLOG_SIZE_MB}",)),
    _Option("leak-check", _FOR_MEMCHECK, _yes_no, "config.leak_check", choices=YES_NO,
            about=("search for memory leaks at exit [no]",)),
    _Option("check-unused-memory", _FOR_MEMCHECK, _switch_on, "config.check_unused_memory", choices=YES_NO,
            about=("search for unused memory allocations [no]",)),
    _Option("check-device-heap", _FOR_MEMCHECK, _switch_on, "config.check_device_heap", choices=YES_NO,
            implies=("config.leak_check",),  # heap mode is a leak check of that heap
            about=("enable device heap check [no]",)),
    _Option("check-cann-heap", _FOR_MEMCHECK, _switch_on, "config.check_cann_heap", choices=YES_NO,
            implies=("config.leak_check",), about=("enable cann heap check [no]",)),
    _Option("block-id", _FOR_MEMCHECK, _number, "config.block_id", metavar="<block-id>", bounds=(0, MAX_BLOCK_ID),
            allowed=_LOWER | _DIGITS, invalid=f". range: [0, {MAX_BLOCK_ID}]",
            about=(f"set check block id (0-{MAX_BLOCK_ID}), default check all block",)),
    _Option("cache-size", _FOR_MEMCHECK, _number, "config.cache_size", metavar="<size>", bounds=(1, MAX_CACHE_SIZE_MB),
            allowed=_LOWER | _DIGITS, invalid=f". range: [1, {MAX_CACHE_SIZE_MB}](MB)", about_below=True,
            about=(f"set single block records size to <size> (MB), default:{DEFAULT_CACHE_SIZE_MB}, "
                   f"max: {MAX_CACHE_SIZE_MB}",)),
    _Option("kernel-name", _BASIC, _kernel_name, "config.kernel_name", metavar="<name>",
            allowed=_LOWER | _UPPER | _DIGITS | {"_", "-"}, invalid=f". require length <= {MAX_KERNEL_NAME_LEN}",
            about=("only the kernels whose name contains <name> are checked [all kernels]",)),
    _Option("full-backtrace", _BASIC, _yes_no, "config.full_backtrace", choices=YES_NO,
            about=("print full backtraces including Ascend C internal calls [no]",)),
    _Option("demangle", _BASIC, _one_of, "config.demangle", choices=DEMANGLE_MODES,
            about=("demangle device function names in backtraces [full]",)),
    _Option("check-cross-npu-races", _FOR_RACECHECK, _switch_on, "config.check_cross_npu_races", choices=YES_NO,
            about=("check races across different NPUs [no]",)),
    _Option("padding", _BASIC, _number, "config.padding", metavar="<N>", bounds=(MIN_GM_PADDING, MAX_GM_PADDING),
            allowed=_LOWER | _DIGITS,
            invalid=f". range: {MIN_GM_PADDING}-{MAX_GM_PADDING} (bytes), default:{DEFAULT_GM_PADDING} (bytes)",
            about=(f"GM safe-zone size in bytes ({MIN_GM_PADDING}-{MAX_GM_PADDING}) [{DEFAULT_GM_PADDING}]",)),
    _Option("check-dcci", _FOR_RACECHECK, _switch_on, "config.check_dcci", choices=YES_NO,
            about=("check for missing dcci instructions on cross-core data dependencies [no]",)),
    _Option("trace-non-default-spr-reg", _FOR_MEMCHECK, _trace_spr, "config.trace_non_default_spr_reg",
            metavar="{vector}", choices=("vector",), invalid=", only vector MODE is supported now",
            about=("Trace non-default vector register values.",)),
    # a sanitizerd extension
    _Option("single-pipe-distance", _FOR_RACECHECK, _number, "config.single_pipe_distance", metavar="<n>",
            bounds=(0, MAX_SINGLE_PIPE_DISTANCE), allowed=_DIGITS, invalid=f". range: [0, {MAX_SINGLE_PIPE_DISTANCE}]",
            about=("instructions of one pipe more than <n> apart are taken as ordered",
                   f"(0 turns the in-pipe check off) [{DEFAULT_SINGLE_PIPE_DISTANCE}]")),
    # a sanitizerd extension
    _Option("race-fold", _FOR_RACECHECK, _yes_no, "config.race_fold", choices=YES_NO,
            about=("report a race once for all the blocks it is found between, not once per",
                   "pair of blocks as msSanitizer does (for kernels of many blocks) [no]")),
    _Option("socket", _OURS, _socket, "socket", metavar="<path>", allowed=None,
            invalid=f". require a path of 1 to {MAX_SOCKET_PATH_LEN} bytes",
            about=("connect to the daemon listening at <path> [the daemon's default]",)),
    _Option("error-exitcode", _OURS, _number, "error_exitcode", metavar="<n>", bounds=(0, MAX_EXIT_CODE),
            allowed=_DIGITS, invalid=f". range: [0, {MAX_EXIT_CODE}]",
            about=(f"exit with <n> (0-{MAX_EXIT_CODE}) when errors are reported [the program's status;",
                   "1 when it is 0 and silent data corruption was found]")),
    _Option("save", _OURS, _file, "save", metavar="<file>", allowed=None, invalid=_REQUIRE_FILE_PATH,
            about=("record everything the program's clients send, for `sanitizerd replay`",)),
    _Option("report", _OURS, _file, "report", metavar="<file>", allowed=None, invalid=_REQUIRE_FILE_PATH,
            about=("write the run's findings to <file> when it ends, for CI [none]",)),
    _Option("report-format", _OURS, _one_of, "report_format", choices=REPORT_FORMATS,
            invalid=f". require one of {'|'.join(REPORT_FORMATS)}",
            about=("the report's format [by <file>'s suffix: .sarif, .xml (junit), .json,",
                   ".html (a visual page, docs/report.md); else sarif]")),
    _Option("suppressions", _OURS, _suppressions, "config.suppressions", metavar="<file>", allowed=None,
            invalid=_REQUIRE_FILE_PATH,
            about=("hide the known findings its [[suppress]] rules name, each with a",
                   "reason; they are stored, marked and counted as suppressed [none]")),
    _Option("show-suppressed", _OURS, _flag, "show_suppressed",
            about=("print suppressed findings too, each under its reason",)),
    _Option("allow-unchecked", _OURS, _flag, "allow_unchecked",
            about=("run the program even where msSanitizer's hooks cannot be used (a",
                   "release not identified, a hook missing): it runs without them, and the",
                   "summary says so [refuse to run]")),
    _Option("quiet", _OURS, _flag, "quiet",
            about=("no progress on stderr (records received, kernels checked, findings so",
                   "far: a line on a terminal's last row, else a line every 5 s)",)),
)
# fmt: on
_BY_NAME = {opt.name: opt for opt in _OPTIONS}
_BY_SHORT = {opt.short: opt for opt in _OPTIONS if opt.short}


# --- help ---------------------------------------------------------------------------------------------------

_ABOUT_COLUMN = 25  # where an option's text starts in the help


def _help_order() -> list[_Option]:
    """The table's options as the help lists them: section by section, each in the table's order unless moved."""
    listed = list(_OPTIONS)
    for opt in _OPTIONS:
        if opt.listed_before:
            listed.remove(opt)
            listed.insert(listed.index(_BY_NAME[opt.listed_before]), opt)
    sections = list(dict.fromkeys(opt.section for opt in _OPTIONS))
    return sorted(listed, key=lambda opt: sections.index(opt.section))


def _help_entry(opt: _Option) -> list[str]:
    head = "    " + (f"-{opt.short} " if opt.short else "") + f"--{opt.name}" + (f"={opt.usage}" if opt.usage else "")
    about = list(opt.about)
    if len(head) < _ABOUT_COLUMN and not opt.about_below:
        head = head.ljust(_ABOUT_COLUMN) + about.pop(0)
    return [head] + [" " * _ABOUT_COLUMN + line for line in about]


def run_help() -> str:
    """The help text of ``sanitizerd run`` in msSanitizer's layout (defaults in ``[ ]``), no final newline."""
    lines = [
        "sanitizerd runs msSanitizer's functional correctness checks on Ascend NPU programs, with",
        "the checking done by a shared host daemon. The tools are memcheck, racecheck, initcheck and",
        "synccheck.",
        "",
        "Usage: sanitizerd run [<options>] [--] <user_program> [<user_options>]",
        "       (use -- when the program has options of its own)",
    ]
    section = ""
    for opt in _help_order():
        if opt.section != section:
            section = opt.section
            lines += ["", f"  {section}"]
        lines += _help_entry(opt)
    flags = [f"-{opt.short}" if opt.short else f"--{opt.name}" for opt in _OPTIONS if not opt.takes_value]
    lines += [
        "",
        f"  Every option but {', '.join(flags[:-1])} and {flags[-1]} needs a value: --<option>=<value>",
        "  or --<option> <value>.",
    ]
    return "\n".join(lines)


# --- parsing ------------------------------------------------------------------------------------------------


def _unrecognized(diagnostic: str, *, spelled: str = "") -> UsageError:
    # One line that names the culprit (glibc's getopt words), with the option meant when ``spelled`` is close to
    # one. msSanitizer prints getopt's line, its own "unrecognized command " and the whole help: three messages,
    # of which the one that says what is wrong scrolls away first.
    meant = difflib.get_close_matches(spelled, [o.name for o in _OPTIONS], n=1) if spelled else []
    hint = f"; did you mean '--{meant[0]}'?" if meant else ""
    return UsageError(f"{PREFIX} ERROR: {diagnostic}{hint} (sanitizerd run --help lists the options)")


def _report_format(options: RunOptions) -> str:
    suffix = os.path.splitext(options.report or "")[1].lower()
    return _REPORT_SUFFIXES.get(suffix, "sarif")


def _apply(opt: _Option, value: str, st: _State) -> None:
    if opt.allowed is not None and any(ch not in opt.allowed for ch in value):
        # the blank line after this one is msSanitizer's too
        raise UsageError(
            f"{PREFIX} ERROR: param '{opt.name}' contains invalid characters and is ignored.\n\n{run_help()}"
        )
    st.given.add(opt.name)
    opt.take(opt, value, st)


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
            if opt.takes_value and value is None:
                # getopt takes the next argument whatever it looks like, even "--" or another option
                if i == len(argv):
                    raise _unrecognized(f"option '--{opt.name}' requires an argument")
                value = argv[i]
                i += 1
            elif not opt.takes_value and value is not None:
                raise _unrecognized(f"option '--{opt.name}' doesn't allow an argument")
            _apply(opt, value or "", st)
            if st.options.show_help or st.options.show_version:
                return i
            continue
        # a cluster of short options: "-hv", "-tmemcheck", "-t memcheck"
        i += 1
        for pos in range(1, len(arg)):
            short = arg[pos]
            opt = _BY_SHORT.get(short)
            if opt is None:
                raise _unrecognized(f"invalid option -- '{short}'")
            if opt.takes_value:
                value = arg[pos + 1 :]
                if not value:
                    if i == len(argv):
                        raise _unrecognized(f"option requires an argument -- '{short}'")
                    value = argv[i]
                    i += 1
                _apply(opt, value, st)
                break
            _apply(opt, "", st)
            if st.options.show_help or st.options.show_version:
                return i
    return i


def _resolve_tools(st: _State) -> list[str]:
    """msSanitizer's tool flags, named, in ``TOOLS`` order."""
    enabled = set(st.tools)
    # memcheck and initcheck both set msSanitizer's defaultCheck (the memcheck engine); racecheck and
    # synccheck do not. Memcheck is added when a memcheck-only feature is on, or when nothing else would run.
    default_check = bool(enabled & {"memcheck", "initcheck"})
    cfg = st.options.config
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
    cfg = st.options.config
    in_use = set(tools)
    flags = {
        "--check-cross-npu-races": cfg.check_cross_npu_races,
        "--cache-size": "cache-size" in st.given,
        "--full-backtrace": cfg.full_backtrace,
        "--demangle": cfg.demangle != "full",
        "--max-debuglog-size": "max-debuglog-size" in st.given,
    }
    in_use.update(key for key, on in flags.items() if on)
    notices = [text for key, text in NOT_YET_CHECKED.items() if key in in_use]
    if cfg.check_dcci and "racecheck" not in tools:  # msSanitizer's words (cli_parser.cpp)
        notices.append(
            f"{PREFIX} --check-dcci is a sub-option for racecheck, you must enable both racecheck and this, "
            "otherwise this option will not work."
        )
    if cfg.trace_non_default_spr_reg and "memcheck" not in tools:
        notices.append(
            f"{PREFIX} --trace-non-default-spr-reg is a sub-option for memcheck, you must enable both memcheck and "
            "this, otherwise this option will not work."
        )
    return notices


def parse_run_args(argv: list[str]) -> RunOptions:
    """Parse the arguments after ``run``.

    Raises:
        UsageError: a bad option or value (the message ends with the help where msSanitizer prints it),
            or a program that cannot be run.
    """
    st = _State()
    options = st.options
    start = _parse_options(argv, st)
    if options.show_help or options.show_version:
        return options
    options.program = list(argv[start:])
    options.executable = _resolve_program(options.program)
    config = options.config
    # msSanitizer checks this only after the program, so its message comes with the program errors' footer
    if config.check_cann_heap and config.check_device_heap:
        raise _program_error("CANNOT enable both --check-cann-heap and --check-device-heap")
    config.tools = _resolve_tools(st)
    if "report-format" not in st.given:
        options.report_format = _report_format(options)
    elif options.report is None:
        options.notices.append(f"{PREFIX} WARNING: --report-format has no effect without --report=<file>.")
    options.notices += _notices(st, config.tools)
    if config.trace_non_default_spr_reg and "memcheck" in config.tools and config.log_level != "info":
        # the traces are INFO lines: msSanitizer raises the level rather than trace unseen (cli_parser.cpp's words)
        config.log_level = "info"
        options.notices.append(
            f"{PREFIX} --trace-non-default-spr-reg has been enabled, --log-level automatically sets to INFO."
        )
    return options
