"""Progress of long work, on stderr: a live line (``rich``) on a terminal, a plain line every few seconds where
stderr is not one (a CI log), nothing with ``--quiet``.

Progress never goes to stdout, which carries what a program reads (findings as JSON, SARIF or JUnit, JSON lines
of ``findings --follow``), so a reader of those gets the same bytes with or without it. A command's own writes
to a terminal that the live line shares go through ``Progress.above``, which prints them above the line instead
of through it. The counts come from a ``sample`` function, called on the display's own thread; a sample that
fails leaves the last line standing: progress never ends the work it shows.

``run`` shares its terminal with the program it runs, whose writes no redraw can know of: a line redrawn in
place would leave pieces of itself inside the program's output. There the line is kept on the terminal's last
row, outside a scrolling region set to the rows above it (as apt and dpkg show their progress while maintainer
scripts write), each redraw one write(2) that saves the cursor, draws and restores it; the program's output and
the findings scroll above, untouched.
"""

from __future__ import annotations

import io
import math
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import IO, TYPE_CHECKING

from sanitizerd.cli.options import PREFIX

if TYPE_CHECKING:
    from rich.progress import Progress as Live
    from rich.progress import TaskID

# Seconds between two plain lines where stderr is not a terminal (a line a second would bury a CI log).
INTERVAL_ENV = "SANITIZERD_PROGRESS_INTERVAL"
PLAIN_INTERVAL = 5.0
INTERVAL_BOUNDS = (0.01, 3600.0)
# Seconds between two samples on a terminal: rich redraws the line (and turns its spinner) on its own between.
TERMINAL_INTERVAL = 0.25


@dataclass(frozen=True)
class Sample:
    """What the work has done so far: a line's words, and, for work of a known size, how far it is (a bar)."""

    text: str
    done: int | None = None
    total: int | None = None


def plain_interval(env: Mapping[str, str]) -> float:
    """The seconds between plain lines: SANITIZERD_PROGRESS_INTERVAL where it is a number in INTERVAL_BOUNDS, else
    PLAIN_INTERVAL (a progress setting is not worth failing a run for)."""
    try:
        seconds = float(env.get(INTERVAL_ENV, ""))
    except ValueError:
        return PLAIN_INTERVAL
    low, high = INTERVAL_BOUNDS
    return seconds if math.isfinite(seconds) and low <= seconds <= high else PLAIN_INTERVAL


def is_terminal(stream: IO[str], env: Mapping[str, str]) -> bool:
    """A terminal that can redraw a line: not a pipe or file, and not TERM=dumb (an editor's shell buffer)."""
    try:
        return stream.isatty() and env.get("TERM", "") != "dumb"
    except (ValueError, OSError):  # closed, or no file under it
        return False


# A terminal this short keeps every row for the program: the line goes plain.
MIN_ROWS = 5
_SAVE, _RESTORE = "\x1b7", "\x1b8"  # DECSC / DECRC: the cursor (and its attributes) kept across a redraw


def _size(stream: IO[str]) -> os.terminal_size:
    """The terminal's columns and rows; no rows where ``stream`` is no terminal."""
    try:
        return os.get_terminal_size(stream.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return os.terminal_size((80, 0))


def _same_terminal(a: IO[str], b: IO[str]) -> bool:
    """Whether two streams write to one terminal device (stdout and stderr of a command typed at a shell)."""
    try:
        one, two = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (ValueError, OSError, io.UnsupportedOperation):
        return False
    return stat.S_ISCHR(one.st_mode) and stat.S_ISCHR(two.st_mode) and one.st_rdev == two.st_rdev


class Progress:
    """The progress of one command's work, from ``start`` (or ``with``) to ``stop``; ``what`` names the work
    (``run``, ``replay``) at the start of a plain line."""

    def __init__(
        self,
        what: str,
        sample: Callable[[], Sample],
        *,
        quiet: bool = False,
        shared: bool = False,
        stream: IO[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``shared``: another process writes to the terminal meanwhile (the program ``run`` runs)."""
        env = os.environ if env is None else env
        self.what = what
        self.stream = sys.stderr if stream is None else stream
        self.mode = "off" if quiet else ("terminal" if is_terminal(self.stream, env) else "plain")
        if self.mode == "terminal" and shared:
            self.mode = "last row" if _size(self.stream).lines >= MIN_ROWS else "plain"
        self.interval = plain_interval(env) if self.mode == "plain" else TERMINAL_INTERVAL
        self._sample = sample
        self._last = Sample("starting")
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"sanitizerd-progress-{what}", daemon=True)
        self._started = 0.0
        self._live: Live | None = None  # rich's, on a terminal
        self._task: TaskID | None = None
        # the terminal's rows when the last row was set apart (0: it is not); drawn on one thread at a time (the
        # first draw before the display's thread starts, the rest on it)
        self._rows = 0

    def __enter__(self) -> Progress:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        if self.mode == "off" or self._thread.is_alive():
            return
        self._started = time.monotonic()
        if self.mode != "plain":
            self._start_live()
        self._thread.start()

    def stop(self) -> None:
        """Ends the display: a terminal's line is erased (what the command prints next takes its place)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._live is not None:
            live, self._live = self._live, None
            if self.mode == "terminal":
                live.stop()
        self.give_back_last_row()

    def give_back_last_row(self) -> None:
        """The whole terminal scrolls again and its last row is blank: at the end, and from a signal handler that
        is about to end the process (one write, no lock that the interrupted thread could hold)."""
        rows, self._rows = self._rows, 0
        if rows:
            self._write_terminal(f"{_SAVE}\x1b[{rows};1H\x1b[2K\x1b[r{_RESTORE}")

    def above(self, out: IO[str]) -> IO[str]:
        """``out``, or where ``out`` shares the live line's terminal, a stream whose writes are printed above it."""
        if self.mode != "terminal" or not _same_terminal(out, self.stream):
            return out
        return _Above(self)

    def _print_above(self, text: str) -> None:
        live = self._live
        if live is None:  # stopped meanwhile: nothing left to print around
            self.stream.write(text)
            self.stream.flush()
            return
        live.console.print(text, end="", markup=False, highlight=False, emoji=False, soft_wrap=True)

    def _take_sample(self) -> Sample:
        try:
            self._last = self._sample()
        except Exception:  # a count that could not be had this time: the last one stands
            pass
        return self._last

    def _start_live(self) -> None:
        # Imported here: rich's import costs ~50 ms, which a command without a terminal need not pay.
        from rich.console import Console
        from rich.progress import BarColumn, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Live

        terminal = Console(file=self.stream)
        first = self._take_sample()
        sized = first.total is not None
        columns = [SpinnerColumn(), TextColumn(f"{self.what}:"), TextColumn("{task.description}", markup=False)]
        if sized:
            columns += [BarColumn(), TaskProgressColumn()]
        if self.mode == "last row":
            # rendered into a string for the last row (rich's own redraw would cut through the program's output)
            terminal = Console(
                file=io.StringIO(), force_terminal=True, color_system=terminal.color_system, width=terminal.width
            )
        live = Live(
            *columns, TimeElapsedColumn(),
            console=terminal, transient=True, redirect_stdout=False, redirect_stderr=False,
            auto_refresh=self.mode == "terminal",
        )  # fmt: skip
        self._task = live.add_task(first.text, total=first.total, completed=first.done or 0)
        if self.mode == "terminal":
            live.start()
        self._live = live
        if self.mode == "last row":
            self._draw_last_row()

    def _draw_last_row(self) -> None:
        """The line on the terminal's last row, set apart from the scrolling region first (again when the terminal
        was resized); one write, so that the program's writes cannot fall between its cursor moves."""
        live = self._live
        if live is None:
            return
        columns, rows = _size(self.stream)
        if rows < MIN_ROWS:
            return
        console = live.console
        console.width = max(20, columns - 1)  # one column spare: a full row would wrap on some terminals
        with console.capture() as captured:
            console.print(live.get_renderable(), end="", no_wrap=True, overflow="ellipsis", soft_wrap=False)
        line = captured.get().split("\n", 1)[0]
        setup = ""
        if rows != self._rows:
            # a newline first (rows to spare if the cursor is on the last row), then the region above it
            setup = f"\n\x1b[1A{_SAVE}\x1b[1;{rows - 1}r{_RESTORE}"
            self._rows = rows
        self._write_terminal(f"{setup}{_SAVE}\x1b[{rows};1H\x1b[2K{line}\x1b[0m{_RESTORE}")

    def _write_terminal(self, text: str) -> None:
        try:
            os.write(self.stream.fileno(), text.encode())
        except (OSError, ValueError, io.UnsupportedOperation):
            self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval):
            sample = self._take_sample()
            if self.mode == "plain":
                self._plain(sample)
                continue
            live = self._live
            if live is not None and self._task is not None:
                live.update(self._task, description=sample.text, completed=sample.done or 0, total=sample.total)
            if self.mode == "last row":
                self._draw_last_row()

    def _plain(self, sample: Sample) -> None:
        elapsed = time.monotonic() - self._started
        share = f" ({100 * sample.done / sample.total:.0f}%)" if sample.total and sample.done is not None else ""
        try:
            self.stream.write(f"{PREFIX} {self.what}: {sample.text}{share}, {elapsed:.0f} s\n")
            self.stream.flush()
        except (OSError, ValueError):  # stderr's reader went away: the work goes on without its progress
            self._stopped.set()


class _Above(io.TextIOBase):
    """A command's output to the terminal the live progress line is on, printed above that line."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._progress._print_above(text)
        return len(text)

    def flush(self) -> None:
        self._progress.stream.flush()


def count(n: int, noun: str) -> str:
    """``1 finding``, ``3 findings``, ``12,345 records``: counts as a line of progress says them."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
