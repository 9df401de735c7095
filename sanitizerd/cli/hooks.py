"""msSanitizer's hook libraries on a CANN host: where they are, which to preload, which release (and so which wire
layout) they are, and the environment a program runs with under them.

Found and chosen as msSanitizer's launcher does (csrc/scripts/mssanitizer, csrc/core/framework/process.cpp):

* where: ``$LD_PRELOAD_PATH`` when set (msSanitizer's wrapper sets it to its own ``lib64``), else the toolkit's
  ``tools/mssanitizer/lib64`` under ``$ASCEND_HOME_PATH`` or ``$ASCEND_TOOLKIT_HOME``, else ``../lib64`` beside the
  ``mssanitizer`` found on ``PATH`` (what the wrapper computes from its own path);
* which: ``--check-device-heap=yes``: ``libascend_hal_hook.so``; ``--check-cann-heap=yes``:
  ``libascend_acl_hook.so``; otherwise the injection library and its stub,
  ``libmssanitizer_injection.so:libascend_san_stub.so``;
* how: prepended to ``LD_PRELOAD`` (what was there stays after them), the directory prepended to
  ``LD_LIBRARY_PATH`` (the wrapper's, for the libraries they load in turn), and ``MSOP_SOCKET_PATH`` and
  ``MSSANITIZER_PID`` both set to the name of the daemon's socket in msSanitizer's form (reference §1.9).

The release: the hooks and msSanitizer change their structs together, so the wire layout follows the release
installed with the hooks. Three facts identify it without loading anything (``mssanitizer -v`` prints the last two,
``mssanitizer 26.0.0-<commit>`` and ``msopscommon <commit>``): the package version in
``share/info/mindstudio-sanitizer/version.info`` of the install (``Version=26.0.0``), msSanitizer's commit (a 40-hex
string compiled into ``tools/mssanitizer/bin/mssanitizer.bin``) and the injection library's (compiled into
``libmssanitizer_injection.so``, which ``mssanitizer -v`` dlopens to ask). msSanitizer's commit decides, else the
injection library's, else a version that names exactly one known release; an injection library that is not the one
released with that msSanitizer is another wire. ``SANITIZERD_COMPAT_LAYOUT`` names a layout outright (for a
release whose hooks are known to speak one sanitizerd has; with no hooks installed, ``sanitizerd run`` then gives the
program the socket alone, for a client of msSanitizer's protocol of its own). An unknown or unidentifiable release
is refused: hooks that write structs of another size would be misread.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

LIB_DIR_ENV = "LD_PRELOAD_PATH"
HOME_ENVS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
TOOL_LIB_DIR = Path("tools/mssanitizer/lib64")
LAYOUT_ENV = "SANITIZERD_COMPAT_LAYOUT"
SOCKET_ENVS = ("MSOP_SOCKET_PATH", "MSSANITIZER_PID")  # the hooks read the second, the injection library the first

DEVICE_HEAP_HOOKS = ("libascend_hal_hook.so",)
CANN_HEAP_HOOKS = ("libascend_acl_hook.so",)
KERNEL_HOOKS = ("libmssanitizer_injection.so", "libascend_san_stub.so")

VERSION_INFO = Path("share/info/mindstudio-sanitizer/version.info")
# mssanitizer.bin is a few MiB; its commit string is read from it, never more than this.
MAX_BINARY_READ = 256 << 20
_COMMIT = re.compile(rb"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])")


@dataclass(frozen=True, slots=True)
class Release:
    """An msSanitizer release sanitizerd speaks the wire of: its ``version.info`` version, its commit, the commit of
    the msopcom injection library released with it (the wire is the pair's: reference §1.9), and the name of its
    layout in ``sanitizerd.compat.wire.LAYOUTS``."""

    version: str
    commit: str
    injection: str
    layout: str


RELEASES: tuple[Release, ...] = (
    # msSanitizer 4a419f05 (2026-04-03); its msopscommon submodule (the injection library's source) at ed482176
    Release(
        "26.0.0",
        "4a419f05d170a006695877cda897f0115c935931",
        "ed4821765f67d5887be8ce9d80b4b13d6851c89e",
        "mssanitizer-4a419f05",
    ),
)


def hook_names(*, check_device_heap: bool, check_cann_heap: bool) -> tuple[str, ...]:
    """The libraries msSanitizer preloads for the heap options (both at once is refused by the option parser)."""
    if check_device_heap:
        return DEVICE_HEAP_HOOKS
    if check_cann_heap:
        return CANN_HEAP_HOOKS
    return KERNEL_HOOKS


def candidate_dirs(env: Mapping[str, str]) -> list[Path]:
    """Where the hook libraries may be, in the order they are looked for."""
    dirs: list[Path] = []
    if env.get(LIB_DIR_ENV):
        dirs.append(Path(env[LIB_DIR_ENV]))
    dirs += [Path(env[name]) / TOOL_LIB_DIR for name in HOME_ENVS if env.get(name)]
    launcher = shutil.which("mssanitizer", path=env.get("PATH", os.defpath))
    if launcher:
        dirs.append(Path(os.path.realpath(launcher)).parent.parent / "lib64")
    unique: list[Path] = []
    for path in dirs:
        if path not in unique:
            unique.append(path)
    return unique


def looks_like_cann(env: Mapping[str, str]) -> bool:
    """Whether the environment says this is a CANN host (so that finding no hooks deserves a warning)."""
    return any(env.get(name) for name in (LIB_DIR_ENV, *HOME_ENVS))


@dataclass(slots=True)
class Hooks:
    """The hook libraries a run preloads (``libraries``, in order, from ``directory``), or why none
    (``libraries`` empty, ``missing`` and ``looked_in`` say where and what)."""

    names: tuple[str, ...]
    directory: Path | None = None
    libraries: list[Path] = field(default_factory=list)
    looked_in: list[Path] = field(default_factory=list)
    missing: list[Path] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.libraries)


def find_hooks(env: Mapping[str, str], *, check_device_heap: bool = False, check_cann_heap: bool = False) -> Hooks:
    """The first directory that holds every library the heap options choose."""
    names = hook_names(check_device_heap=check_device_heap, check_cann_heap=check_cann_heap)
    hooks = Hooks(names, looked_in=candidate_dirs(env))
    for directory in hooks.looked_in:
        paths = [directory / name for name in names]
        absent = [path for path in paths if not path.is_file()]
        if not absent:
            hooks.directory = directory.resolve()
            hooks.libraries = [path.resolve() for path in paths]
            return hooks
        if len(absent) < len(paths):  # a partial install: worth naming what is not there
            hooks.missing += absent
    return hooks


@dataclass(frozen=True, slots=True)
class Identified:
    """What is known of the installed release: its version and commit (when found), where they came from, and the
    layout chosen (``layout``), or why none can be (``problem``)."""

    version: str = ""
    commit: str = ""
    sources: tuple[str, ...] = ()
    layout: str = ""
    problem: str = ""


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


def read_commit(path: Path, known: set[str]) -> str:
    """The commit string compiled into ``path`` (``mssanitizer.bin``: what ``mssanitizer -v`` prints after the
    version; ``libmssanitizer_injection.so``: what its ``GetFuncInjectionRevision`` returns), read as bytes, never
    loaded: one of ``known`` if the file holds one, else its only 40-hex string, else ""."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_BINARY_READ)
    except OSError:
        return ""
    commits = {match.decode() for match in _COMMIT.findall(data)}
    if len(commits & known) == 1:
        return (commits & known).pop()
    return commits.pop() if len(commits) == 1 else ""


def identify(directory: Path, env: Mapping[str, str], layouts: frozenset[str]) -> Identified:
    """The wire layout for the hooks in ``directory`` (``layouts``: the names the daemon's table holds)."""
    forced = env.get(LAYOUT_ENV, "")
    version, version_file = read_version(directory, env)
    tool_binary = tool_root(directory) / "bin" / "mssanitizer.bin"
    injection_library = directory / KERNEL_HOOKS[0]
    commit = read_commit(tool_binary, {r.commit for r in RELEASES})
    injection = read_commit(injection_library, {r.injection for r in RELEASES})
    sources = tuple(
        str(place) for place, fact in ((version_file, version), (tool_binary, commit), (injection_library, injection))
        if fact
    )  # fmt: skip

    def refused(problem: str) -> Identified:
        return Identified(version, commit, sources, problem=problem)

    if forced:
        if forced not in layouts:
            return refused(f"{LAYOUT_ENV}={forced} is not a layout (known: {', '.join(sorted(layouts)) or 'none'})")
        return Identified(version, commit, sources, layout=forced)
    # The most specific fact decides: the tool's commit, else the injection library's, else a version that names
    # exactly one release.
    if commit:
        matches = [r for r in RELEASES if r.commit == commit]
    elif injection:
        matches = [r for r in RELEASES if r.injection == injection]
    else:
        matches = [r for r in RELEASES if version and r.version == version]
    known = "; ".join(f"{r.version} (mssanitizer {r.commit[:8]}, msopcom {r.injection[:8]})" for r in RELEASES)
    advice = f"Its wire would be misread, so its hooks are not preloaded ({LAYOUT_ENV}=<layout> names one outright)"
    if len(matches) != 1:
        facts = [
            version,
            f"mssanitizer {commit[:8]}" if commit else "",
            f"msopcom {injection[:8]}" if injection else "",
        ]
        found = ", ".join(fact for fact in facts if fact)
        if not found:
            what = f"cannot tell which msSanitizer release the hooks in {directory} are (no {VERSION_INFO}, no commit)"
        else:
            what = f"the msSanitizer release of the hooks in {directory} ({found}) is not one sanitizerd knows"
        return refused(f"{what}; it knows: {known}. {advice}")
    (release,) = matches
    if injection and injection != release.injection:
        # msSanitizer and its injection library change their structs together: a pair sanitizerd has not seen is
        # a wire it has not measured.
        return refused(
            f"the injection library {injection_library} (msopcom {injection[:8]}) is not the one released with "
            f"msSanitizer {release.version} ({release.commit[:8]}: msopcom {release.injection[:8]}). {advice}"
        )
    if release.layout not in layouts:
        return refused(f"this daemon has no wire layout {release.layout!r} (msSanitizer {release.version})")
    return Identified(version or release.version, commit or release.commit, sources, layout=release.layout)


def hook_environment(env: Mapping[str, str], hooks: Hooks, socket_name: str) -> dict[str, str]:
    """The variables a program runs with under ``hooks`` (those that change): the libraries before whatever
    ``LD_PRELOAD`` held, their directory first on ``LD_LIBRARY_PATH``, and the socket's name."""
    assert hooks.directory is not None
    preload = ":".join(str(path) for path in hooks.libraries)
    changed = {
        "LD_PRELOAD": f"{preload}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else preload,
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(hooks.directory), env.get("LD_LIBRARY_PATH", "")) if p),
    }
    return changed | socket_environment(socket_name)


def socket_environment(socket_name: str) -> dict[str, str]:
    """The variables that name the socket: both of msSanitizer's, set to the same name as its launcher sets them."""
    return dict.fromkeys(SOCKET_ENVS, socket_name)
