"""``sanitizerd run`` options: msSanitizer's CLI unit tests (reference §3) with our prefix, and ours."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sanitizerd.cli.options import (
    NOT_YET_CHECKED,
    RunOptions,
    UsageError,
    parse_run_args,
    run_help,
)

HINT = " (sanitizerd run --help lists the options)"


def one_line(message: str) -> bool:
    """An unrecognized option is one line naming it, with no help after it (msSanitizer prints three)."""
    return "\n" not in message and message.startswith("[sanitizerd] ERROR: ") and message.endswith(HINT)


USE_HELP = "[sanitizerd] Use --help for more information"
YES_NO_OPTIONS = (
    "leak-check",
    "check-unused-memory",
    "check-device-heap",
    "check-cann-heap",
    "full-backtrace",
    "check-cross-npu-races",
)
# Config attribute each yes/no option sets
YES_NO_FIELDS = {
    "leak-check": "leak_check",
    "check-unused-memory": "check_unused_memory",
    "check-device-heap": "check_device_heap",
    "check-cann-heap": "check_cann_heap",
    "full-backtrace": "full_backtrace",
    "check-cross-npu-races": "check_cross_npu_races",
}


@pytest.fixture
def app(tmp_path: Path) -> str:
    """An executable user program."""
    path = tmp_path / "app"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def parse(app: str, *options: str) -> RunOptions:
    return parse_run_args([*options, app])


def usage_error(argv: list[str]) -> UsageError:
    with pytest.raises(UsageError) as info:
        parse_run_args(argv)
    assert info.value.exit_code == 1
    return info.value


class TestHelpAndVersion:
    @pytest.mark.parametrize("flag", ["-h", "--help", "--he"])
    def test_help_flag(self, flag: str) -> None:
        """-h, --help and a unique prefix of it request the help and nothing else."""
        opts = parse_run_args([flag])
        assert opts.show_help and not opts.show_version
        assert opts.program == []

    @pytest.mark.parametrize("flag", ["-v", "--version"])
    def test_version_flag(self, flag: str) -> None:
        """-v and --version request the version."""
        opts = parse_run_args([flag])
        assert opts.show_version and not opts.show_help

    def test_help_stops_parsing(self) -> None:
        """Options after --help are not parsed, so a bad value there is no error."""
        opts = parse_run_args(["--help", "--leak-check=maybe"])
        assert opts.show_help

    def test_error_before_help_wins(self) -> None:
        """A bad value before --help is reported: parsing stops at the first problem."""
        err = usage_error(["--leak-check=maybe", "--help"])
        assert err.message.startswith("[sanitizerd] ERROR: --leak-check param is invalid")

    def test_help_needs_no_program(self) -> None:
        """-h alone raises no 'no program specified' error."""
        assert parse_run_args(["-h"]).executable is None

    def test_clustered_short_flags(self) -> None:
        """-vh is -v then -h; -v is seen first and stops parsing."""
        opts = parse_run_args(["-vh"])
        assert opts.show_version and not opts.show_help

    def test_help_with_value_is_unrecognized(self) -> None:
        """--help takes no value, so --help=x is an unrecognized option."""
        err = usage_error(["--help=x"])
        assert one_line(err.message)
        assert "option '--help' doesn't allow an argument" in err.message


class TestYesNoOptions:
    @pytest.mark.parametrize("name", YES_NO_OPTIONS)
    def test_yes(self, name: str, app: str) -> None:
        """--<option>=yes switches its Config field on."""
        config = parse(app, f"--{name}=yes").config
        assert getattr(config, YES_NO_FIELDS[name]) is True

    @pytest.mark.parametrize("name", YES_NO_OPTIONS)
    def test_no(self, name: str, app: str) -> None:
        """--<option>=no leaves its Config field off."""
        config = parse(app, f"--{name}=no").config
        assert getattr(config, YES_NO_FIELDS[name]) is False

    @pytest.mark.parametrize("name", YES_NO_OPTIONS)
    def test_invalid_value(self, name: str, app: str) -> None:
        """A lowercase value other than yes/no is '--<option> param is invalid' followed by the help."""
        err = usage_error([f"--{name}=maybe", app])
        assert err.message == f"[sanitizerd] ERROR: --{name} param is invalid\n{run_help()}"

    @pytest.mark.parametrize("name", YES_NO_OPTIONS)
    def test_uppercase_value_fails_whitelist(self, name: str, app: str) -> None:
        """YES is not lowercase, so the whitelist rejects it before the value is looked at."""
        err = usage_error([f"--{name}=YES", app])
        assert err.message.startswith(f"[sanitizerd] ERROR: param '{name}' contains invalid characters")

    @pytest.mark.parametrize("form", [["--leak-check", "yes"], ["--leak-check=yes"]])
    def test_value_as_next_argument_or_after_equals(self, form: list[str], app: str) -> None:
        """--leak-check yes and --leak-check=yes are the same."""
        opts = parse_run_args([*form, app])
        assert opts.config.leak_check is True
        assert opts.program == [app]

    def test_missing_value_is_unrecognized(self) -> None:
        """A long option at the very end without its value is refused, in one line."""
        err = usage_error(["--leak-check"])
        assert one_line(err.message)
        assert "option '--leak-check' requires an argument" in err.message

    @pytest.mark.parametrize("name", ["check-device-heap", "check-cann-heap"])
    def test_heap_mode_sets_leak_check(self, name: str, app: str) -> None:
        """A heap mode is a leak check of that heap, as in msSanitizer."""
        assert parse(app, f"--{name}=yes").config.leak_check is True

    def test_leak_check_last_value_wins(self, app: str) -> None:
        """--leak-check=no after --leak-check=yes switches it off again."""
        assert parse(app, "--leak-check=yes", "--leak-check=no").config.leak_check is False

    def test_both_heaps_rejected(self, app: str) -> None:
        """--check-cann-heap and --check-device-heap together are refused after the program check."""
        err = usage_error(["--check-cann-heap=yes", "--check-device-heap=yes", app])
        assert err.message == (
            f"[sanitizerd] ERROR: CANNOT enable both --check-cann-heap and --check-device-heap\n{USE_HELP}"
        )

    @pytest.mark.parametrize("value", ["yes", "no"])
    def test_cross_npu_races_stored(self, value: str, app: str) -> None:
        """--check-cross-npu-races=yes|no is stored in Config."""
        config = parse(app, f"--check-cross-npu-races={value}").config
        assert config.check_cross_npu_races is (value == "yes")


class TestTools:
    def test_default_is_memcheck(self, app: str) -> None:
        """No -t runs memcheck, which brings registercheck."""
        assert parse(app).config.tools == ["memcheck", "registercheck"]

    @pytest.mark.parametrize(
        ("options", "tools"),
        [
            (["-t", "memcheck"], ["memcheck", "registercheck"]),
            (["-t", "racecheck"], ["racecheck"]),
            (["-t", "synccheck"], ["synccheck"]),
            (["-t", "initcheck"], ["initcheck"]),
            (["--tool=racecheck", "-t", "memcheck"], ["memcheck", "racecheck", "registercheck"]),
            (["-t", "racecheck", "-t", "synccheck"], ["racecheck", "synccheck"]),
            (["-t", "initcheck", "-t", "racecheck"], ["racecheck", "initcheck"]),
            (
                ["-t", "memcheck", "-t", "racecheck", "-t", "synccheck"],
                ["memcheck", "racecheck", "synccheck", "registercheck"],
            ),
            (
                ["-t", "racecheck", "-t", "initcheck", "-t", "synccheck"],
                ["racecheck", "initcheck", "synccheck"],
            ),
        ],
    )
    def test_combinations(self, options: list[str], tools: list[str], app: str) -> None:
        """Two or three tools enable exactly those, plus registercheck with memcheck, in TOOLS order."""
        assert parse(app, *options).config.tools == tools

    def test_initcheck_alone_has_no_memcheck(self, app: str) -> None:
        """initcheck alone runs neither memcheck nor registercheck."""
        tools = parse(app, "-t", "initcheck").config.tools
        assert "memcheck" not in tools and "registercheck" not in tools

    @pytest.mark.parametrize("option", ["--leak-check=yes", "--check-unused-memory=yes"])
    def test_memcheck_feature_adds_memcheck(self, option: str, app: str) -> None:
        """-t racecheck with a memcheck-only feature also runs memcheck (msSanitizer's defaulting)."""
        assert parse(app, "-t", "racecheck", option).config.tools == [
            "memcheck",
            "racecheck",
            "registercheck",
        ]

    def test_leak_check_with_initcheck_adds_memcheck(self, app: str) -> None:
        """initcheck with --leak-check=yes runs memcheck too."""
        assert parse(app, "-t", "initcheck", "--leak-check=yes").config.tools == [
            "memcheck",
            "initcheck",
            "registercheck",
        ]

    @pytest.mark.parametrize("form", [["-t", "memcheck|racecheck"], ["--tool=memcheck|racecheck"]])
    def test_pipe_joined(self, form: list[str], app: str) -> None:
        """memcheck|racecheck selects both tools."""
        assert parse(app, *form).config.tools == ["memcheck", "racecheck", "registercheck"]

    @pytest.mark.parametrize("short", [["-tracecheck"], ["-t", "racecheck"]])
    def test_short_value_attached_or_separate(self, short: list[str], app: str) -> None:
        """-tracecheck and -t racecheck are the same."""
        assert parse(app, *short).config.tools == ["racecheck"]

    @pytest.mark.parametrize("value", ["bogus", "registercheck", "memcheck|", "memcheck|bogus"])
    def test_invalid_tool(self, value: str, app: str) -> None:
        """An unknown name (registercheck is not selectable) is '--tool param is invalid' plus help."""
        err = usage_error(["-t", value, app])
        assert err.message == f"[sanitizerd] ERROR: --tool param is invalid\n{run_help()}"

    def test_uppercase_tool_fails_whitelist(self, app: str) -> None:
        """-t MEMCHECK fails the whitelist under the long name 'tool'."""
        err = usage_error(["-t", "MEMCHECK", app])
        assert err.message.startswith("[sanitizerd] ERROR: param 'tool' contains invalid characters")

    def test_short_tool_without_value(self) -> None:
        """-t at the end is refused, in one line."""
        err = usage_error(["-t"])
        assert one_line(err.message)
        assert "option requires an argument -- 't'" in err.message


class TestWhitelist:
    @pytest.mark.parametrize(
        ("option", "name"),
        [
            ("--block-id=-1", "block-id"),
            ("--max-debuglog-size=10MB", "max-debuglog-size"),
            ("--max-debuglog-size=10mb", "max-debuglog-size"),
            ("--max-debuglog-size=\t", "max-debuglog-size"),
            ("--cache-size=1.5", "cache-size"),
            ("--log-level=WARN", "log-level"),
            ("--log-file=a b", "log-file"),
            ("--kernel-name=add.cpp", "kernel-name"),
            ("--error-exitcode=-1", "error-exitcode"),
            ("--demangle=no!", "demangle"),
        ],
    )
    def test_invalid_characters(self, option: str, name: str, app: str) -> None:
        """A value with a character outside its whitelist is reported with a blank line before the help."""
        err = usage_error([option, app])
        assert err.message == (
            f"[sanitizerd] ERROR: param '{name}' contains invalid characters and is ignored.\n\n{run_help()}"
        )

    def test_whitelist_stops_parsing(self, app: str) -> None:
        """Nothing after the rejected option is parsed: a later unknown option is not reported."""
        err = usage_error(["--block-id=-1", "--bogus", app])
        assert "bogus" not in err.message

    def test_log_file_allows_path_characters(self, app: str) -> None:
        """Upper and lower case, digits and - . / _ pass the log-file whitelist."""
        assert parse(app, "--log-file=out/Run-1_a.log").log_file == "out/Run-1_a.log"

    def test_kernel_name_allows_identifier_characters(self, app: str) -> None:
        """Letters, digits, _ and - pass the kernel-name whitelist."""
        assert parse(app, "--kernel-name=Add_Custom-2").config.kernel_name == "Add_Custom-2"


class TestRanges:
    @pytest.mark.parametrize("value", ["0", "200"])
    def test_block_id_bounds_accepted(self, value: str, app: str) -> None:
        """--block-id accepts 0 and 200."""
        assert parse(app, f"--block-id={value}").config.block_id == int(value)

    @pytest.mark.parametrize("value", ["201", "abc", "7x", "99999999999999999999"])
    def test_block_id_out_of_range(self, value: str, app: str) -> None:
        """Above 200, or not a number, is the block-id range error plus help."""
        err = usage_error([f"--block-id={value}", app])
        assert err.message == f"[sanitizerd] ERROR: --block-id param is invalid. range: [0, 200]\n{run_help()}"

    def test_block_id_default_is_all(self, app: str) -> None:
        """Without --block-id every block is checked (-1)."""
        assert parse(app).config.block_id == -1

    @pytest.mark.parametrize("value", ["1", "8192"])
    def test_cache_size_bounds_accepted(self, value: str, app: str) -> None:
        """--cache-size accepts 1 and 8192."""
        assert parse(app, f"--cache-size={value}").config.cache_size == int(value)

    @pytest.mark.parametrize("value", ["0", "8193", ""])
    def test_cache_size_out_of_range(self, value: str, app: str) -> None:
        """0, 8193 and an empty value are the cache-size range error."""
        err = usage_error([f"--cache-size={value}", app])
        assert err.message.startswith("[sanitizerd] ERROR: --cache-size param is invalid. range: [1, 8192](MB)\n")

    @pytest.mark.parametrize("value", ["1", "10240"])
    def test_max_debuglog_size_bounds_accepted(self, value: str, app: str) -> None:
        """--max-debuglog-size accepts 1 and 10240."""
        assert parse(app, f"--max-debuglog-size={value}").program == [app]

    @pytest.mark.parametrize("value", ["0", "10241"])
    def test_max_debuglog_size_out_of_range(self, value: str, app: str) -> None:
        """0 and 10241 are the max-debuglog-size range error plus help."""
        err = usage_error([f"--max-debuglog-size={value}", app])
        assert err.message == (
            "[sanitizerd] ERROR: --max-debuglog-size param is invalid. "
            f"range: 1-10240 (MB), default:1024 (MB)\n{run_help()}"
        )

    def test_kernel_name_2047_accepted(self, app: str) -> None:
        """A 2047-character kernel name fits."""
        assert parse(app, "--kernel-name=" + "k" * 2047).config.kernel_name == "k" * 2047

    def test_kernel_name_2048_rejected(self, app: str) -> None:
        """A 2048-character kernel name is the length error."""
        err = usage_error(["--kernel-name=" + "k" * 2048, app])
        assert err.message.startswith("[sanitizerd] ERROR: --kernel-name param is invalid. require length <= 2047\n")

    def test_empty_kernel_name_means_every_kernel(self, app: str) -> None:
        """--kernel-name= keeps the default empty filter."""
        assert parse(app, "--kernel-name=").config.kernel_name == ""


class TestValueOptions:
    @pytest.mark.parametrize("level", ["info", "warn", "error"])
    def test_log_level(self, level: str, app: str) -> None:
        """--log-level takes info, warn and error."""
        assert parse(app, "--log-level", level).config.log_level == level

    def test_log_level_invalid(self, app: str) -> None:
        """--log-level=debug is '--log-level param is invalid' plus help."""
        err = usage_error(["--log-level=debug", app])
        assert err.message == f"[sanitizerd] ERROR: --log-level param is invalid\n{run_help()}"

    @pytest.mark.parametrize("mode", ["full", "simple", "no"])
    def test_demangle(self, mode: str, app: str) -> None:
        """--demangle takes full, simple and no."""
        assert parse(app, f"--demangle={mode}").config.demangle == mode

    def test_demangle_invalid(self, app: str) -> None:
        """--demangle=yes is '--demangle param is invalid' plus help."""
        err = usage_error(["--demangle=yes", app])
        assert err.message == f"[sanitizerd] ERROR: --demangle param is invalid\n{run_help()}"

    def test_defaults(self, app: str) -> None:
        """Without options the Config holds msSanitizer's defaults."""
        config = parse(app).config
        assert (config.log_level, config.demangle, config.cache_size, config.kernel_name) == (
            "warn",
            "full",
            100,
            "",
        )
        assert not (config.leak_check or config.full_backtrace or config.check_cross_npu_races)


class TestLogFile:
    def test_stored_unopened(self, app: str, tmp_path: Path) -> None:
        """--log-file is stored as given and the parser does not create the file."""
        log = tmp_path / "reports.log"
        assert parse(app, f"--log-file={log}").log_file == str(log)
        assert not log.exists()

    def test_too_long_falls_back_to_stdout(self, app: str) -> None:
        """A path over 4096 characters is a warning notice, and reports go to stdout."""
        opts = parse(app, "--log-file=" + "a" * 4097)
        assert opts.log_file is None
        assert opts.notices[0] == (
            "[sanitizerd] WARNING: --log-file is invalid because it exceeds the maximum path length of 4096. "
            "Stdout will be used for logging instead."
        )

    def test_too_long_overrides_an_earlier_log_file(self, app: str) -> None:
        """A too-long path after a good one still sends reports to stdout, as its warning says."""
        assert parse(app, "--log-file=first.log", "--log-file=" + "a" * 4097).log_file is None

    def test_4096_is_still_accepted(self, app: str) -> None:
        """A 4096-character path is kept."""
        assert parse(app, "--log-file=" + "a" * 4096).log_file == "a" * 4096

    def test_empty_is_an_error_without_help(self, app: str) -> None:
        """--log-file= is an error, and msSanitizer prints no help for it."""
        err = usage_error(["--log-file=", app])
        assert err.message == "[sanitizerd] ERROR: Empty log file."

    def test_default_is_stdout(self, app: str) -> None:
        """Without --log-file there is no log file."""
        assert parse(app).log_file is None


class TestUnrecognized:
    def test_single_dash_long_option(self) -> None:
        """-log-file=log.txt is read as short options; -l is unknown and reported exactly once."""
        err = usage_error(["-log-file=log.txt"])
        assert err.message == f"[sanitizerd] ERROR: invalid option -- 'l'{HINT}"

    def test_unknown_long_option(self, app: str) -> None:
        """--bogus is one clear line (msSanitizer: getopt's line, "unrecognized command" and the whole help)."""
        err = usage_error(["--bogus=1", app])
        assert err.message == f"[sanitizerd] ERROR: unrecognized option '--bogus=1'{HINT}"

    def test_misspelled_option_names_the_one_meant(self, app: str) -> None:
        err = usage_error(["--leak-chek=yes", app])
        meant = "unrecognized option '--leak-chek=yes'; did you mean '--leak-check'?"
        assert err.message == f"[sanitizerd] ERROR: {meant}{HINT}"

    def test_ambiguous_prefix(self, app: str) -> None:
        """--check=yes matches several options and is refused, naming them."""
        err = usage_error(["--check=yes", app])
        assert one_line(err.message)
        assert "'--check-cann-heap'" in err.message and "'--check-device-heap'" in err.message

    def test_unique_prefix_accepted(self, app: str) -> None:
        """--leak=yes is --leak-check=yes, as getopt_long allows."""
        assert parse(app, "--leak=yes").config.leak_check is True


class TestProgram:
    def test_program_args_kept_verbatim(self, app: str) -> None:
        """Everything after -- belongs to the program, including option-like arguments."""
        argv = ["--leak-check=yes", "--", app, "--leak-check=no", "-h", "--", "-t", "bogus"]
        opts = parse_run_args(argv)
        assert opts.program == [app, "--leak-check=no", "-h", "--", "-t", "bogus"]
        assert opts.config.leak_check is True and not opts.show_help

    def test_first_non_option_starts_program(self, app: str) -> None:
        """Without --, options after the program name are the program's."""
        opts = parse_run_args([app, "--leak-check=yes", "-v"])
        assert opts.program == [app, "--leak-check=yes", "-v"]
        assert opts.config.leak_check is False and not opts.show_version

    def test_value_may_look_like_an_option(self, app: str) -> None:
        """As in getopt, the argument after a long option is its value whatever it looks like."""
        opts = parse_run_args(["--log-file", "--leak-check", app])
        assert opts.log_file == "--leak-check" and opts.config.leak_check is False

    def test_executable_is_absolute(self, app: str) -> None:
        """program[0] stays as given; executable is the absolute path to run."""
        opts = parse_run_args([app])
        assert opts.program[0] == app and opts.executable == os.path.abspath(app)

    def test_no_program(self) -> None:
        """Options alone are 'no program specified'."""
        err = usage_error(["--leak-check=yes"])
        assert err.message == f"[sanitizerd] ERROR: no program specified\n{USE_HELP}"

    def test_no_program_after_double_dash(self) -> None:
        """A bare -- leaves no program either."""
        assert usage_error(["--"]).message.startswith("[sanitizerd] ERROR: no program specified")

    def test_path_not_found(self, tmp_path: Path) -> None:
        """A path with / that does not exist is 'program path NOT found'."""
        err = usage_error([str(tmp_path / "missing")])
        assert err.message == f"[sanitizerd] ERROR: program path NOT found\n{USE_HELP}"

    def test_dangling_symlink_not_found(self, tmp_path: Path) -> None:
        """A symlink to nothing is 'program path NOT found'."""
        link = tmp_path / "dangling"
        link.symlink_to(tmp_path / "missing")
        assert usage_error([str(link)]).message.startswith("[sanitizerd] ERROR: program path NOT found")

    def test_no_execute_permission(self, tmp_path: Path) -> None:
        """A file without an x bit is refused, naming its resolved path."""
        prog = tmp_path / "noexec"
        prog.write_text("data")
        prog.chmod(0o644)
        err = usage_error([str(prog)])
        assert err.message == (
            f"[sanitizerd] ERROR: User program ({os.path.realpath(prog)}) has no execute permission\n" + USE_HELP
        )

    def test_control_characters_not_echoed(self, tmp_path: Path) -> None:
        """A control character in the program's name is printed as ? so it cannot rewrite the terminal."""
        prog = tmp_path / "bad\x1bname"
        prog.write_text("data")
        prog.chmod(0o644)
        err = usage_error([str(prog)])
        assert "bad?name" in err.message and "\x1b" not in err.message

    def test_directory_is_not_executable(self, tmp_path: Path) -> None:
        """A directory is refused although it has x bits."""
        err = usage_error([str(tmp_path) + "/"])
        assert "has no execute permission" in err.message

    def test_symlink_accepted(self, app: str, tmp_path: Path) -> None:
        """A symlink to an executable is accepted and kept as given."""
        link = tmp_path / "link"
        link.symlink_to(app)
        opts = parse_run_args([str(link), "arg"])
        assert opts.program == [str(link), "arg"]
        assert opts.executable == str(link)

    def test_bare_name_found_in_cwd_first(self, app: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A name without / is looked up in . before $PATH."""
        other = tmp_path / "bin"
        other.mkdir()
        (other / "app").write_text("#!/bin/sh\n")
        (other / "app").chmod(0o755)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("PATH", str(other))
        opts = parse_run_args(["app"])
        assert opts.program == ["app"]
        assert opts.executable == app

    def test_bare_name_found_on_path(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A name without / that is not in . is found on $PATH, skipping non-executable files."""
        first, second = tmp_path / "a", tmp_path / "b"
        first.mkdir()
        second.mkdir()
        (first / "tool").write_text("not executable")
        (first / "tool").chmod(0o644)
        (second / "tool").write_text("#!/bin/sh\n")
        (second / "tool").chmod(0o755)
        monkeypatch.chdir(first)
        monkeypatch.setenv("PATH", f"{first}{os.pathsep}{second}")
        assert parse_run_args(["tool"]).executable == str(second / "tool")

    def test_bare_name_not_found(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A name found nowhere is the PATH error."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("PATH", str(tmp_path))
        err = usage_error(["no-such-program-here"])
        assert err.message == f"[sanitizerd] ERROR: find executable from PATH environment FAILED\n{USE_HELP}"


class TestSanitizerdOptions:
    def test_socket(self, app: str, tmp_path: Path) -> None:
        """--socket PATH is stored."""
        sock = str(tmp_path / "d.sock")
        assert parse(app, "--socket", sock).socket == sock

    def test_socket_default(self, app: str) -> None:
        """Without --socket the caller picks the default."""
        assert parse(app).socket is None

    @pytest.mark.parametrize("value", ["", "/" + "s" * 108])
    def test_socket_invalid(self, value: str, app: str) -> None:
        """An empty path or one longer than sun_path is refused with the help."""
        err = usage_error([f"--socket={value}", app])
        assert err.message.startswith("[sanitizerd] ERROR: --socket param is invalid.")
        assert err.message.endswith(run_help())

    @pytest.mark.parametrize("value", ["0", "42", "255"])
    def test_error_exitcode(self, value: str, app: str) -> None:
        """--error-exitcode takes 0 to 255."""
        assert parse(app, "--error-exitcode", value).error_exitcode == int(value)

    @pytest.mark.parametrize("value", ["256", ""])
    def test_error_exitcode_out_of_range(self, value: str, app: str) -> None:
        """256 or nothing is the range error plus help."""
        err = usage_error([f"--error-exitcode={value}", app])
        assert err.message == f"[sanitizerd] ERROR: --error-exitcode param is invalid. range: [0, 255]\n{run_help()}"

    def test_error_exitcode_default(self, app: str) -> None:
        """Without --error-exitcode the program's status is used."""
        assert parse(app).error_exitcode is None


class TestNotices:
    def test_plain_memcheck_has_no_notice(self, app: str) -> None:
        """Default memcheck and its implied registercheck are implemented: no notice."""
        assert parse(app).notices == []

    @pytest.mark.parametrize(
        ("options", "key"),
        [
            (["--max-debuglog-size=10"], "--max-debuglog-size"),
        ],
    )
    def test_unbacked_feature(self, options: list[str], key: str, app: str) -> None:
        """Each accepted but unchecked feature adds its notice."""
        assert NOT_YET_CHECKED[key] in parse(app, *options).notices

    @pytest.mark.parametrize(
        "options",
        [
            ["--full-backtrace=no"],
            ["--demangle=full"],
            ["--check-cross-npu-races=no"],
            ["--check-cross-npu-races=yes"],  # checked: cross-NPU racecheck (tests/test_cross_npu.py)
            ["--leak-check=yes"],
            ["--check-device-heap=yes"],  # real: it chooses msSanitizer's HAL hooks (sanitizerd/cli/hooks.py)
            ["--check-cann-heap=yes"],
        ],
    )
    def test_no_notice_for_defaults_and_implemented(self, options: list[str], app: str) -> None:
        """Defaults and implemented features add no notice."""
        assert parse(app, *options).notices == []

    def test_each_notice_once_in_table_order(self, app: str) -> None:
        """Repeated options give one notice each, ordered as the table."""
        notices = parse(app, "--max-debuglog-size=5", "--check-cross-npu-races=yes", "--max-debuglog-size=6").notices
        assert notices == [NOT_YET_CHECKED["--max-debuglog-size"]]

    @pytest.mark.parametrize("tool", ["synccheck", "initcheck", "racecheck"])
    def test_no_notice_for_implemented_tools(self, tool: str, app: str) -> None:
        """A tool this version checks adds no notice."""
        assert parse(app, "-t", tool).notices == []

    def test_notices_are_single_tagged_lines(self) -> None:
        """Every notice is one line that starts with the sanitizerd warning tag."""
        for text in NOT_YET_CHECKED.values():
            assert "\n" not in text
            assert text.startswith("[sanitizerd] WARNING: ")


class TestSinglePipeDistance:
    def test_default_is_mssanitizers(self, app: str) -> None:
        """Without the option the distance is msSanitizer's 16."""
        assert parse(app, "-t", "racecheck").config.single_pipe_distance == 16

    @pytest.mark.parametrize(("value", "distance"), [("0", 0), ("4", 4), ("1048576", 1 << 20)])
    def test_values(self, value: str, distance: int, app: str) -> None:
        """--single-pipe-distance takes 0 (check off) up to 2**20."""
        assert parse(app, f"--single-pipe-distance={value}").config.single_pipe_distance == distance

    @pytest.mark.parametrize("value", ["1048577", "x", "-1"])
    def test_out_of_range(self, value: str, app: str) -> None:
        """Anything else is refused by name."""
        with pytest.raises(UsageError) as raised:
            parse(app, f"--single-pipe-distance={value}")
        assert "single-pipe-distance" in str(raised.value)


class TestRaceFold:
    def test_off_by_default(self, app: str) -> None:
        """Without the option a race is one report per pair of blocks, as msSanitizer prints them."""
        assert parse(app, "-t", "racecheck").config.race_fold is False

    @pytest.mark.parametrize(("value", "fold"), [("yes", True), ("no", False)])
    def test_values(self, value: str, fold: bool, app: str) -> None:
        """--race-fold yes|no, in both of msSanitizer's option spellings."""
        assert parse(app, f"--race-fold={value}").config.race_fold is fold
        assert parse(app, "--race-fold", value).config.race_fold is fold

    @pytest.mark.parametrize("value", ["maybe", "YES", "1", ""])
    def test_anything_else_is_refused_by_name(self, value: str, app: str) -> None:
        """Any other value (upper case fails the character check) is refused, naming the option."""
        with pytest.raises(UsageError) as raised:
            parse(app, f"--race-fold={value}")
        assert "race-fold" in str(raised.value)


class TestRunHelp:
    def test_usage_line(self) -> None:
        """The usage line names run, the optional -- and the user program."""
        assert "Usage: sanitizerd run [<options>] [--] <user_program> [<user_options>]" in run_help()

    @pytest.mark.parametrize(
        "text",
        [
            "--log-level=<level>",
            "[warn]",
            "--leak-check=no|yes",
            "--check-unused-memory=no|yes",
            "--check-device-heap=no|yes",
            "--check-cann-heap=no|yes",
            "--check-cross-npu-races=no|yes",
            "--full-backtrace=no|yes",
            "--demangle=full|simple|no",
            "--block-id=<block-id>",
            "--kernel-name=<name>",
            "--log-file=<file>",
            "--max-debuglog-size=<size>",
            "default:1024",
            "default:100, max: 8192",
            "--socket=<path>",
            "--error-exitcode=<n>",
            "-t --tool=<name>",
            "-h --help",
            "-v --version",
            "--allow-unchecked",
        ],
    )
    def test_lists_option(self, text: str) -> None:
        """Every option and msSanitizer's default notation appear in the help."""
        assert text in run_help()

    def test_every_option_has_help(self) -> None:
        """No option the parser takes is missing from the help."""
        from sanitizerd.cli.options import _OPTIONS

        for option in _OPTIONS:
            assert f"--{option.name}" in run_help(), option.name

    def test_yes_no_defaults_shown(self) -> None:
        """Each yes/no option's description ends with its default [no]."""
        lines = run_help().splitlines()
        for name in YES_NO_OPTIONS:
            index = next(i for i, line in enumerate(lines) if f"--{name}=no|yes" in line)
            described = lines[index] if lines[index].rstrip().endswith("]") else lines[index + 1]
            assert described.rstrip().endswith("[no]"), name

    def test_fits_a_terminal(self) -> None:
        """No help line is wider than 110 columns."""
        assert max(len(line) for line in run_help().splitlines()) <= 110


class TestSave:
    def test_save_path_is_kept(self, app: str) -> None:
        """--save FILE is sanitizerd's own option and keeps the path as given."""
        assert parse(app, "--save", "run.save").save == "run.save"

    def test_save_needs_a_path(self, app: str) -> None:
        """An empty --save is refused with a clear message."""
        with pytest.raises(UsageError, match="--save param is invalid"):
            parse(app, "--save=")


class TestReport:
    """--report FILE [--report-format]: sanitizerd's own, for CI."""

    @pytest.mark.parametrize(
        ("name", "fmt"),
        [("r.sarif", "sarif"), ("r.xml", "junit"), ("R.XML", "junit"), ("r.json", "json"), ("report", "sarif"),
         ("r.txt", "sarif"), ("r.html", "html"), ("r.htm", "html")],
    )  # fmt: skip
    def test_format_from_the_suffix(self, app: str, tmp_path: Path, name: str, fmt: str) -> None:
        opts = parse(app, f"--report={tmp_path / name}")
        assert (opts.report, opts.report_format) == (str(tmp_path / name), fmt)
        assert not (tmp_path / name).exists()  # opened by the run, not the parser

    def test_format_given_wins_over_the_suffix(self, app: str) -> None:
        opts = parse(app, "--report", "r.sarif", "--report-format", "junit")
        assert (opts.report, opts.report_format) == ("r.sarif", "junit")

    def test_no_report_by_default(self, app: str) -> None:
        assert parse(app).report is None

    @pytest.mark.parametrize("value", ["xml", "text", "junitxml"])
    def test_unknown_format(self, app: str, value: str) -> None:
        err = usage_error(["--report=r", f"--report-format={value}", app])
        assert err.message.startswith("[sanitizerd] ERROR: --report-format param is invalid. require one of "
                                      "sarif|junit|json|html\n")  # fmt: skip

    def test_empty_path(self, app: str) -> None:
        err = usage_error(["--report=", app])
        assert err.message == f"[sanitizerd] ERROR: --report param is invalid. require a file path\n{run_help()}"

    def test_format_without_report_is_a_notice(self, app: str) -> None:
        opts = parse(app, "--report-format=junit")
        assert opts.report is None
        assert "[sanitizerd] WARNING: --report-format has no effect without --report=<file>." in opts.notices

    def test_prefix_of_both_is_ambiguous(self, app: str) -> None:
        err = usage_error(["--rep=r", app])
        assert "option '--rep' is ambiguous; possibilities: '--report' '--report-format'" in err.message

    def test_in_help(self) -> None:
        assert "--report=<file>" in run_help() and "--report-format=sarif|junit|json" in run_help()


class TestAllowUnchecked:
    """--allow-unchecked: the only way to run a program where msSanitizer's hooks cannot be used (test_hooks.py)."""

    def test_off_by_default(self, app: str) -> None:
        assert parse(app).allow_unchecked is False

    def test_a_flag(self, app: str) -> None:
        assert parse(app, "--allow-unchecked").allow_unchecked is True
        assert parse(app, "--allow").allow_unchecked is True  # a unique prefix, as getopt_long takes it

    def test_takes_no_value(self, app: str) -> None:
        err = usage_error(["--allow-unchecked=yes", app])
        assert "option '--allow-unchecked' doesn't allow an argument" in err.message

    def test_no_notice(self, app: str) -> None:
        assert parse(app, "--allow-unchecked").notices == []
