"""A real install gets every file of the packages: the wheel built from this checkout holds each file under
sanitizerd/ and client_shim/ that the installed code may import or open beside its modules (issue 24: the wheel once
lacked the PostgreSQL store's migrations and the C client's files, which only an editable install found).

The rule for what must be in the wheel: every file git keeps (or would keep: untracked and not ignored) under the two
packages, less the C extension's sources, which the wheel holds compiled. It asks nothing of how pyproject.toml names
them, so a data file added later without a package-data glob fails here, not on a user's host. .ci/run goes further:
it installs the wheel in a clean venv and runs the installed commands (.ci/smoke.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from tests.conftest import ROOT

PACKAGES = ("sanitizerd", "client_shim")

# One build answers the whole question; the worker shape of CI's second pass changes nothing in a wheel.
pytestmark = pytest.mark.first_pass_only("builds the wheel: no daemon, nothing a worker changes")


def checkout_files() -> list[str]:
    """The checkout's files as a fresh clone of it would have them, relative to the root: git's list, so that build
    outputs, caches and a developer's ignored leftovers are neither required in the wheel nor built into it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the files of the packages cannot be told from build outputs")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True, text=True, check=True, cwd=ROOT, timeout=30,
    ).stdout  # fmt: skip
    # A file deleted in the work tree but not yet in the index is still listed: it is not part of this checkout.
    return sorted(name for name in listed.split("\0") if name and (ROOT / name).is_file())


def extension_sources() -> set[str]:
    """The C sources pyproject.toml compiles into extension modules: built, never opened at run time."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {source for module in config["tool"]["setuptools"].get("ext-modules", []) for source in module["sources"]}


def package_files(files: list[str]) -> list[str]:
    compiled = extension_sources()
    return [name for name in files if name.split("/", 1)[0] in PACKAGES and name not in compiled]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel pip builds from a copy of the checkout's files (a build in the checkout itself would write build/
    and egg-info there, and would read a stale egg-info's file list). No build isolation: the test extra brings the
    build-system's requirements, so the build needs no index and takes a few seconds."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out),
         str(source)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert build.returncode == 0, f"pip wheel failed:\n{build.stdout}\n{build.stderr}"
    [built] = out.glob("sanitizerd-*.whl")
    return zipfile.ZipFile(built)


def test_the_rule_finds_the_files_the_code_opens() -> None:
    """The rule's list is the one this test is for: it names the migrations and the C client's header (were it empty,
    or missed them, the wheel check below would pass on nothing)."""
    data = [name for name in package_files(checkout_files()) if not name.endswith(".py")]
    assert data, "no data file found under the packages: the rule is broken"
    assert "client_shim/native/mssanitizer_wire.h" in data, data
    assert "client_shim/native/msop_add_client.c" in data, data
    assert [name for name in data if name.startswith("sanitizerd/findings/migrations/postgresql/")], data
    assert "client_shim/_autoattach/sitecustomize.py" in package_files(checkout_files())
    assert "client_shim/_record_buffer.c" not in package_files(checkout_files())  # compiled, not opened


def test_the_wheel_holds_every_file_of_the_packages(wheel: zipfile.ZipFile) -> None:
    inside = set(wheel.namelist())
    wanted = package_files(checkout_files())
    missing = [name for name in wanted if name not in inside]
    assert not missing, (
        f"the wheel lacks {len(missing)} file(s) the installed code may open: {missing}; name them in "
        "pyproject.toml's [tool.setuptools.package-data] (or make their folder a package)"
    )
    # Each copy is the checkout's file, not an older one a stale build directory left behind.
    for name in wanted:
        assert wheel.read(name) == (ROOT / name).read_bytes(), f"{name} in the wheel differs from the checkout's"


def test_the_wheel_declares_the_command_and_the_pytest_plugin(wheel: zipfile.ZipFile) -> None:
    [entry_points] = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[console_scripts]\nsanitizerd = sanitizerd.cli.main:main" in text, text
    assert "[pytest11]\nsanitizerd = sanitizerd.pytest_plugin" in text, text
