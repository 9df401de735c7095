"""How long a client's strings may be, checked where messages are decoded, so that the store and the logs only
ever see bounded strings.

Two kinds. Text that only describes (kernel names, source files and functions, log lines, host names) is cut to its
length and marked with ``CUT_MARK``; each cut is counted by the connection. Names that identify something (jobs, IPC
names, signature entries, replica groups, chips) are never cut, since a cut name would be another name: a longer one
is refused as ``bad_packet`` by the message's own type (``Ident`` in messages.py).
"""

from __future__ import annotations

from typing import Final

from sanitizerd_protocol import messages as m

MAX_NAME: Final = 4096  # kernel names, source files, functions (characters): a path's PATH_MAX
MAX_LOG_TEXT: Final = 4096  # one client log line
MAX_SHORT: Final = 256  # host, tool, a host op's desc, a log level
MAX_CALLERS: Final = 256  # frames of one location's call stack
CUT_MARK: Final = "…[cut {} characters]"


def cut(text: str, limit: int) -> tuple[str, int]:
    """``text`` within ``limit`` characters (plus the mark), and how many characters were cut."""
    if len(text) <= limit:
        return text, 0
    over = len(text) - limit
    return text[:limit] + CUT_MARK.format(over), over


def cap_strings(message: m.Message) -> list[tuple[str, int]]:
    """Cut ``message``'s descriptive strings to their lengths, in place; (field, characters cut) for each cut."""
    cuts: list[tuple[str, int]] = []

    def capped(field: str, text: str, limit: int) -> str:
        text, over = cut(text, limit)
        if over:
            cuts.append((field, over))
        return text

    match message:
        case m.KernelBegin():
            message.name = capped("kernel", message.name, MAX_NAME)
        case m.Locations():
            for location in message.locations:
                location.file = capped("file", location.file, MAX_NAME)
                location.function = capped("function", location.function, MAX_NAME)
                if len(location.callers) > MAX_CALLERS:
                    cuts.append(("callers", len(location.callers) - MAX_CALLERS))
                    del location.callers[MAX_CALLERS:]
        case m.Log():
            message.text = capped("log", message.text, MAX_LOG_TEXT)
            message.level = capped("level", message.level, MAX_SHORT)
        case m.KernelEnd():
            message.problems = [capped("problem", text, MAX_LOG_TEXT) for text in message.problems]
        case m.HostOp():
            message.desc = capped("desc", message.desc, MAX_SHORT)
        case m.Hello():
            message.host = capped("host", message.host, MAX_SHORT)
            message.tool = capped("tool", message.tool, MAX_SHORT)
    return cuts
