"""msSanitizer's hook libraries on a CANN host: where they are, which release (and so which wire layout) they are,
which of them to preload, and the environment a program runs with under them.

Found as msSanitizer's launcher finds them (csrc/scripts/mssanitizer, csrc/core/framework/process.cpp): in
``$LD_PRELOAD_PATH`` when set (msSanitizer's wrapper sets it to its own ``lib64``), in the toolkit's
``tools/mssanitizer/lib64`` under ``$ASCEND_HOME_PATH`` or ``$ASCEND_TOOLKIT_HOME``, and in ``../lib64`` beside the
``mssanitizer`` found on ``PATH`` (what the wrapper computes from its own path), in that order.

The release: msSanitizer and its injection library change their structs together, and a client of another wire
cannot be told from its bytes before they are misread, so the layout follows the release installed with the hooks.
Two facts identify it without loading anything (``mssanitizer -v`` prints both): msSanitizer's commit, a 40-hex
string compiled into ``tools/mssanitizer/bin/mssanitizer.bin``, and the msopcom revision compiled into
``libmssanitizer_injection.so``; ``sanitizerd.compat.packets.releases`` maps each measured commit to its wire. The
``version.info`` of the package is reported but never decides: it says 26.0.0 on every branch. The tool's commit
decides; an injection library that names another wire is refused (the pair would not speak one wire), one that
speaks none sanitizerd has is refused, and with the tool's commit unknown the injection library's decides.

Which libraries, and how: the identified layout says which libraries its release preloads for the heap options
(``WireLayout.preload``: ``--check-device-heap=yes``, ``--check-cann-heap=yes``, else the default set) and which
variables its launcher names the socket in (``WireLayout.socket_env``). Every library of the set must be there;
they are prepended to ``LD_PRELOAD`` (what was there stays after them), their directory to ``LD_LIBRARY_PATH`` (the
wrapper's, for the libraries they load in turn), and each socket variable is set to the name of the daemon's socket
in msSanitizer's form (reference §1.9).

``SANITIZERD_COMPAT_LAYOUT`` names a layout outright (a name or an alias such as ``26.1.0``): for hooks of a
release sanitizerd cannot identify but the user knows, and, with no hooks installed at all, for a program that is
a client of msSanitizer's protocol of its own (it gets the socket alone).

Never unchecked by mistake: on a CANN host (one of those variables set, or an ``mssanitizer`` on ``PATH``), and
anywhere with a heap option, hooks that cannot be used (a release not identified, tool and injection library that
disagree, a library of the set missing, none found) are a ``problem``: ``sanitizerd run`` refuses to start the
program unless ``--allow-unchecked`` asks to run it without them.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sanitizerd.compat import wire
from sanitizerd.compat.packets import releases

LIB_DIR_ENV = "LD_PRELOAD_PATH"
HOME_ENVS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
TOOL_LIB_DIR = Path("tools/mssanitizer/lib64")
LAYOUT_ENV = "SANITIZERD_COMPAT_LAYOUT"
INJECTION = "libmssanitizer_injection.so"  # the library that carries msopcom's revision
# Under the tool directory, where msSanitizer's commit is compiled in: a release build links mssanitizer.bin to
# lib64/libascend_san.so.<version>, which holds the commit (`--version` prints it from there), and a build of the
# tool as one binary holds it in mssanitizer.bin. The first of these that holds a commit is the tool's.
TOOL_BINARIES = (Path("bin/mssanitizer.bin"), Path("lib64/libascend_san.so"))
TOOL_BINARY = TOOL_BINARIES[0]
HEAP_MODES = {"check_device_heap": "--check-device-heap", "check_cann_heap": "--check-cann-heap"}

VERSION_INFO = Path("share/info/mindstudio-sanitizer/version.info")
# mssanitizer.bin is a few MiB; its commit string is read from it, never more than this.
MAX_BINARY_READ = 256 << 20
_COMMIT = re.compile(rb"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])")


def preload_mode(*, check_device_heap: bool, check_cann_heap: bool) -> str:
    """The key of ``WireLayout.preload`` for the heap options (both at once is refused by the option parser)."""
    if check_device_heap:
        return "check_device_heap"
    if check_cann_heap:
        return "check_cann_heap"
    return "default"


def socket_variables() -> frozenset[str]:
    """Every variable some release's launcher names the socket in (one left from elsewhere would misdirect)."""
    return frozenset(name for layout in wire.LAYOUTS.values() for name in layout.socket_env)


def hook_library_names() -> frozenset[str]:
    """Every library some release preloads: one of them in a directory means msSanitizer is installed there."""
    return frozenset(
        name for layout in wire.LAYOUTS.values() for names in layout.preload.values() for name in names
    ) | {INJECTION}


def candidate_dirs(env: Mapping[str, str]) -> list[Path]:
    """Where the hook libraries may be, in the order they are looked for."""
    dirs: list[Path] = []
    if env.get(LIB_DIR_ENV):
        dirs.append(Path(env[LIB_DIR_ENV]))
    dirs += [Path(env[name]) / TOOL_LIB_DIR for name in HOME_ENVS if env.get(name)]
    launcher = _launcher(env)
    if launcher:
        dirs.append(Path(os.path.realpath(launcher)).parent.parent / "lib64")
    unique: list[Path] = []
    for path in dirs:
        if path not in unique:
            unique.append(path)
    return unique


def _launcher(env: Mapping[str, str]) -> str | None:
    return shutil.which("mssanitizer", path=env.get("PATH", os.defpath))


def looks_like_cann(env: Mapping[str, str]) -> bool:
    """Whether this is a CANN host: where Ascend programs run, so hooks that cannot be used fail the run."""
    return any(env.get(name) for name in (LIB_DIR_ENV, *HOME_ENVS)) or _launcher(env) is not None


def tool_root(directory: Path) -> Path:
    """The msSanitizer tool directory (``.../tools/mssanitizer``) of a hook directory (its ``lib64``)."""
    return directory.parent


def read_version(directory: Path, env: Mapping[str, str]) -> tuple[str, str]:
    """The package version of the install the hooks belong to, and the file it was read from ("" when none)."""
    install = tool_root(directory).parent.parent  # <install>/tools/mssanitizer/lib64
    places = [install / VERSION_INFO] + [Path(env[name]) / VERSION_INFO for name in HOME_ENVS if env.get(name)]
    for place in places:
        try:
            text = place.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "Version" and value.strip():
                return value.strip(), str(place)
    return "", ""


def read_commit(path: Path, known: frozenset[str]) -> str:
    """The commit string compiled into ``path`` (``mssanitizer.bin``: what ``mssanitizer -v`` prints after the
    version; ``libmssanitizer_injection.so``: what its ``GetFuncInjectionRevision`` returns), read as bytes, never
    loaded: one of ``known`` if the file holds exactly one, else its only 40-hex string, else ""."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_BINARY_READ)
    except OSError:
        return ""
    commits = {match.decode() for match in _COMMIT.findall(data)}
    if len(commits & known) == 1:
        return (commits & known).pop()
    return commits.pop() if len(commits) == 1 else ""


@dataclass(frozen=True, slots=True)
class Release:
    """What the install of one hook directory says of itself, and the layout that follows (``layout``), or why
    none does (``problem``)."""

    directory: Path
    tool_binary: Path
    injection_library: Path
    version: str = ""
    version_file: str = ""
    tool_commit: str = ""
    tool_wire: str | None = None
    injection_commit: str = ""
    injection_wire: str | None = None
    layout: wire.WireLayout | None = None
    problem: str = ""

    def facts(self) -> str:
        """What was found, for a message: each fact with the file it came from."""
        version = f"version.info {self.version} ({self.version_file})" if self.version else "no version.info"
        tool = (
            f"mssanitizer {self.tool_commit} ({self.tool_binary})"
            if self.tool_commit
            else f"no commit in {self.tool_binary}"
            if self.tool_binary.is_file()
            else f"no {self.tool_binary}"
        )
        injection = (
            f"msopcom {self.injection_commit} ({self.injection_library})"
            if self.injection_commit
            else f"no revision in {self.injection_library}"
            if self.injection_library.is_file()
            else f"no {self.injection_library}"
        )
        return f"{version}, {tool}, {injection}"


def _pair(tool_wire: str, injection_wire: str) -> bool:
    tool, injection = wire.layout_named(tool_wire), wire.layout_named(injection_wire)
    if tool is None or injection is None:
        return tool_wire == injection_wire
    return wire.same_outer_wire(tool, injection)


def identify(directory: Path, env: Mapping[str, str]) -> Release:
    """The release of the hooks in ``directory``, by the commits compiled into its binaries (module docstring)."""
    version, version_file = read_version(directory, env)
    tool_binary, tool_commit = tool_root(directory) / TOOL_BINARY, ""
    for candidate in TOOL_BINARIES:
        tool_commit = read_commit(tool_root(directory) / candidate, releases.tool_commits())
        if tool_commit:
            tool_binary = tool_root(directory) / candidate
            break
    injection_library = directory / INJECTION
    injection_commit = read_commit(injection_library, releases.injection_commits())
    tool_wire = releases.wire_of_tool(tool_commit) if tool_commit else None
    injection_wire = releases.wire_of_injection(injection_commit) if injection_commit else None
    facts = Release(
        directory, tool_binary, injection_library, version, version_file, tool_commit, tool_wire, injection_commit,
        injection_wire,
    )  # fmt: skip

    def refused(problem: str) -> Release:
        return dataclasses.replace(facts, problem=problem)

    if tool_wire and injection_wire and not _pair(tool_wire, injection_wire):
        # The tool and the library it preloads write their structs together: a pair that disagrees on what the
        # library writes is neither release. (msopcom is measured on the outer structs alone, its own copies, and
        # mapped to the latest wire they match: a pair of two wires alike there is one release.)
        return refused(
            f"its msSanitizer (mssanitizer {tool_commit[:8]}: wire {tool_wire}) and its injection library (msopcom "
            f"{injection_commit[:8]}: wire {injection_wire}) speak different wires"
        )
    name = tool_wire or injection_wire
    if not name:
        # version.info cannot stand in: 26.0.0 is what every branch's says, across wires that differ.
        return refused(
            "no commit sanitizerd has measured identifies its release"
            + (f" (version.info's {version} is every branch's and names no wire)" if version else "")
        )
    layout = wire.layout_named(name)
    if layout is None:
        return refused(f"its release speaks wire {name}, which this sanitizerd has no layout for")
    return dataclasses.replace(facts, layout=layout)


def known_names(limit: int = 6) -> str:
    """A few names ``SANITIZERD_COMPAT_LAYOUT`` takes, for a message: the short aliases (``26.1.0``, ``master``)
    and the April layout first, as the likeliest to be meant; then the long branch names, then the rest."""
    aliases = sorted({alias for layout in wire.LAYOUTS.values() for alias in layout.aliases})
    short = [alias for alias in aliases if "_" not in alias]
    long = [alias for alias in aliases if "_" in alias]
    names = [*short, wire.DEFAULT_LAYOUT, *long, *sorted(set(wire.LAYOUTS) - {wire.DEFAULT_LAYOUT})]
    shown = names[:limit]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f", and {more} more" if more else "")


@dataclass(slots=True)
class Choice:
    """What a run gives its program: the wire its clients speak (``layout``; None: no compat socket), the hook
    libraries to preload from ``directory`` (empty with a layout: a program that is its own client), the release
    they were identified as, and ``problem`` when the hooks cannot be used where they are needed (the run is
    refused, or runs unchecked with --allow-unchecked). ``notes`` are for --log-level=info."""

    mode: str
    layout: wire.WireLayout | None = None
    directory: Path | None = None
    libraries: list[Path] = field(default_factory=list)
    release: Release | None = None
    forced: str = ""
    looked_in: list[Path] = field(default_factory=list)
    problem: str = ""
    notes: list[str] = field(default_factory=list)

    def refusal(self) -> str:
        """The one line a refused run prints (after ``[sanitizerd] ERROR: ``): what was found, and the ways on."""
        return (
            f"msSanitizer's hooks cannot be used, and the program would run unchecked: {self.problem}. "
            f"{LAYOUT_ENV}=<layout> names the wire outright (known: {known_names()}); --allow-unchecked runs the "
            "program without the hooks (only client_shim programs are then checked); nothing was run"
        )


def choose(env: Mapping[str, str], *, check_device_heap: bool = False, check_cann_heap: bool = False) -> Choice:
    """The hooks for a run with these heap options: the first candidate directory whose release is identified (or
    named by ``SANITIZERD_COMPAT_LAYOUT``) and holds every library that release preloads for them."""
    mode = preload_mode(check_device_heap=check_device_heap, check_cann_heap=check_cann_heap)
    choice = Choice(mode, looked_in=candidate_dirs(env))
    forced_name = env.get(LAYOUT_ENV, "")
    forced = wire.layout_named(forced_name) if forced_name else None
    if forced_name and forced is None:
        choice.problem = f"{LAYOUT_ENV}={forced_name} is not a layout"
        return choice
    choice.forced = forced_name
    passed: list[str] = []  # directories that hold msSanitizer but cannot serve, each with why
    for directory in choice.looked_in:
        if not _holds_mssanitizer(directory):
            continue
        release = identify(directory, env)
        layout = forced or release.layout
        if layout is None:
            passed.append(f"in {directory}: {release.facts()}: {release.problem}")
            continue
        names = layout.preload[mode]
        absent = [name for name in names if not (directory / name).is_file()]
        if absent:
            passed.append(
                f"in {directory}: {release.facts()}: wire {layout.name} preloads {', '.join(names)}, and "
                f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} missing"
            )
            continue
        choice.layout, choice.release = layout, release
        choice.directory = directory.resolve()
        choice.libraries = [(directory / name).resolve() for name in names]
        choice.notes += [f"passed over: {why}" for why in passed]
        return choice
    heap = HEAP_MODES.get(mode, "")
    if passed:
        # msSanitizer is installed but cannot be used: wherever that is, the program would go unchecked.
        choice.problem = "; ".join(passed)
    elif forced is not None and not heap:
        # No hooks anywhere, and the wire named: the program speaks msSanitizer's protocol itself.
        choice.layout = forced
    elif heap or looks_like_cann(env):
        where = ", ".join(str(d) for d in choice.looked_in) or (
            f"nowhere: ${LIB_DIR_ENV}, ${' and $'.join(HOME_ENVS)} are unset and no mssanitizer is on PATH"
        )
        need = f"{heap} needs them; " if heap else ""
        choice.problem = f"{need}no msSanitizer hook libraries were found; looked in {where}"
    else:
        choice.notes.append("no msSanitizer hooks (not a CANN host): programs that use client_shim are checked")
    return choice


def _holds_mssanitizer(directory: Path) -> bool:
    """Whether msSanitizer is installed at ``directory``: a hook library there, or its tool binary beside it."""
    if (tool_root(directory) / TOOL_BINARY).is_file():
        return True
    return any((directory / name).is_file() for name in hook_library_names())


def socket_environment(layout: wire.WireLayout, socket_name: str) -> dict[str, str]:
    """The variables that name the socket: those the layout's launcher sets, each to the socket's name."""
    return dict.fromkeys(layout.socket_env, socket_name)


def hook_environment(env: Mapping[str, str], choice: Choice, socket_name: str) -> dict[str, str]:
    """The variables a program runs with under ``choice`` (those that change): the libraries before whatever
    ``LD_PRELOAD`` held, their directory first on ``LD_LIBRARY_PATH``, and the socket's name; just the socket's
    name for a program with no hooks (its own client)."""
    assert choice.layout is not None
    changed = socket_environment(choice.layout, socket_name)
    if choice.libraries:
        assert choice.directory is not None
        preload = ":".join(str(path) for path in choice.libraries)
        changed["LD_PRELOAD"] = f"{preload}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else preload
        changed["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(choice.directory), env.get("LD_LIBRARY_PATH", "")) if p
        )
    return changed
