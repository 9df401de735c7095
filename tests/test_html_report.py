"""The visual report end to end: the examples' planted race, stomping and illegal read run for real under a real
daemon (`run --save`), their pages written by `sanitizerd report JOB --html` and by `run --report OUT.html`, then
opened from file:// in Debian's chromium, driven by Playwright, and read as a person does, by role and label.

Playwright's own browser download cannot be fetched here, so it is pointed at the system browser
(``executable_path``). Where chromium or Playwright is missing these tests skip, unless SANITIZERD_REQUIRE_CHROMIUM=1
(.ci/run sets it after installing chromium, as for PostgreSQL): then they fail. Each page's screenshot is kept under
build/html-report/ as a CI artifact.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, RunningDaemon, sanitizerd

pytestmark = pytest.mark.first_pass_only("renders the store's findings: the same store with workers")

EXAMPLES = ROOT / "examples" / "emulated"
SCREENSHOTS = ROOT / "build" / "html-report"
JOB = re.compile(r"SUMMARY: job (\S+):")
MISSING = "no set_flag/wait_flag from PIPE_MTE2 to PIPE_V between serial 13 and 15"


def run_saved(daemon: RunningDaemon, out: Path, name: str, tools: list[str], *program: str, html: bool) -> str:
    """`sanitizerd run --save` of an example (and `--report NAME.html` when ``html``); the job's name."""
    report = ["--report", str(out / f"{name}.html")] if html else []
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), *tools, "--save", str(out / f"{name}.save"), *report, "--",
        sys.executable, *program,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    return JOB.search(result.stdout).group(1)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The pages of the planted race (through `report JOB --html --save`), the illegal read and the stomping
    (through `run --report`), and of a job with two kinds of finding (for the filters)."""
    from tests.conftest import start_daemon, stop_daemon

    base = Path(tmp_path_factory.mktemp("html", numbered=True))
    short = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))  # a socket's path must fit in 108 bytes
    daemon = start_daemon(short, "--handshake-timeout", "1")
    try:
        race = run_saved(daemon, base, "race", ["-t", "racecheck"], str(EXAMPLES / "races.py"), "missing_wait_flag",
                         html=False)  # fmt: skip
        made = sanitizerd(
            "report", race, "--html", str(base / "race.html"), "--save", str(base / "race.save"),
            "--socket", str(daemon.socket),
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        run_saved(daemon, base, "illegal_read", ["-t", "memcheck"], str(EXAMPLES / "planted.py"), "illegal_read",
                  html=True)  # fmt: skip
        run_saved(daemon, base, "stomping", ["-t", "memcheck"], str(EXAMPLES / "planted.py"), "out_of_bounds",
                  html=True)  # fmt: skip
        rules = base / "suppress.toml"
        rules.write_text('[[suppress]]\nkind = "deadlock"\nreason = "the planted hang, known"\n')
        run_saved(daemon, base, "two_kinds", ["-t", "racecheck", "--suppressions", str(rules)],
                  str(EXAMPLES / "races.py"), "deadlock", html=True)  # fmt: skip
        query = sanitizerd("findings", "--job", race, "--format", "html", "--socket", str(daemon.socket))
        assert query.returncode == 0, query.stderr
        (base / "query.html").write_text(query.stdout)
        replayed = sanitizerd("replay", str(base / "race.save"), "--socket", str(daemon.socket))
        assert replayed.returncode == 0, replayed.stderr
        made = sanitizerd(
            "report", JOB.search(replayed.stdout).group(1), "--html", str(base / "replayed.html"),  # type: ignore[union-attr]
            "--save", str(base / "race.save"), "--socket", str(daemon.socket),
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()
        shutil.rmtree(short, ignore_errors=True)
    names = ("race", "illegal_read", "stomping", "two_kinds", "query", "replayed")
    yield {name: base / f"{name}.html" for name in names}


def test_pages_are_self_contained(pages: dict[str, Path]) -> None:
    """No URL to fetch: no http(s) anywhere, no src= or stylesheet link, so the page opens offline."""
    for name, page in pages.items():
        text = page.read_text()
        assert "http" not in text.lower(), name
        assert not re.search(r"<(link|img|iframe)\b|\bsrc=", text), name
        assert text.startswith("<!DOCTYPE html>")


def test_race_page_names_the_missing_order(pages: dict[str, Path]) -> None:
    text = pages["race"].read_text()
    assert MISSING in text
    assert "set_flag(PIPE_MTE2, PIPE_V, event 0) at serial 14 has no wait_flag before serial 15" in text


def test_replayed_job_is_drawn_from_its_save(pages: dict[str, Path]) -> None:
    """`replay FILE`, then `report` of the replay's job with the same file: the replay's sessions have new ids,
    and the race is still drawn on the recorded block's pipes."""
    text = pages["replayed"].read_text()
    assert MISSING in text and 'aria-label="timeline of block aiv 0, serial 7 to 21"' in text


def test_findings_query_as_a_page(pages: dict[str, Path]) -> None:
    """`findings --format html`: the same race from the store alone, its missing order said, no timeline (no
    stream), and where to get one."""
    text = pages["query"].read_text()
    assert MISSING in text and "timeline of block" not in text and "--save FILE" in text


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium through Playwright; skipped where missing, failed where .ci/run required it."""
    required = os.environ.get("SANITIZERD_REQUIRE_CHROMIUM") == "1"
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None  # type: ignore[assignment]
    if executable is None or sync_playwright is None:
        missing = "chromium (Debian: chromium)" if executable is None else "playwright (pip: the test extra)"
        if required:
            pytest.fail(f"SANITIZERD_REQUIRE_CHROMIUM=1 but {missing} is not installed")
        pytest.skip(f"{missing} is not installed (.ci/run installs it)")
    with sync_playwright() as driver:
        # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start
        launched = driver.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


def open_page(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    """The page loaded from file://, with the console errors and the non-file requests it made."""
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    errors: list[str] = []
    fetched: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: fetched.append(request.url) if not request.url.startswith("file:") else None)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, fetched


def screenshot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_race_in_chromium(browser: Any, pages: dict[str, Path]) -> None:
    """The race's two accesses are drawn at their pipes and serials, visible, and the missing pair said."""
    page, errors, fetched = open_page(browser, pages["race"])
    try:
        first = page.get_by_role("img", name="race access 1: PIPE_MTE2 Write at serial 13")
        second = page.get_by_role("img", name="race access 2: PIPE_V Read at serial 15")
        assert first.is_visible() and second.is_visible()
        missing = page.get_by_role("note", name="missing order")
        assert missing.is_visible() and missing.inner_text() == MISSING
        assert page.get_by_role("img", name=re.compile(r"^timeline of block aiv 0")).is_visible()
        # the flag pair that does order the block's later work is drawn as an arrow
        assert page.get_by_role("img", name=re.compile(r"set_flag PIPE_V to PIPE_MTE3 event 0: serial \d+ waited"))
        assert page.get_by_role("table", name="findings").get_by_role("row").count() == 2  # header and the race
        screenshot(page, "race")
        assert errors == [] and fetched == []
    finally:
        page.close()


def test_illegal_read_in_chromium(browser: Any, pages: dict[str, Path]) -> None:
    """The memory map draws the allocation and, past its end, the bytes the read took outside it."""
    page, errors, fetched = open_page(browser, pages["illegal_read"])
    try:
        memory_map = page.get_by_role("group", name="memory map of add_custom")
        assert memory_map.is_visible()
        # planted.py allocates x 224 bytes short: block 1's 512-byte tile at +0x200 reads 224 bytes past its end
        allocation = memory_map.get_by_role("img", name="allocation 0x12c0c0000000, 800 bytes")
        outside = memory_map.get_by_role("img", name=re.compile(r"^illegal read: 224 bytes outside: 0x12c0c0000320 "))
        access = memory_map.get_by_role("img", name=re.compile(r"^the access \(serial \d+\): 0x12c0c0000200 to "
                                                                r"0x12c0c0000400 \(512 bytes\)"))  # fmt: skip
        assert allocation.is_visible() and outside.is_visible() and access.is_visible()
        screenshot(page, "illegal_read")
        assert errors == [] and fetched == []
    finally:
        page.close()


def test_stomping_in_chromium(browser: Any, pages: dict[str, Path]) -> None:
    """Both blocks' writes drawn on the z allocation, over the tile they both wrote."""
    page, errors, fetched = open_page(browser, pages["stomping"])
    try:
        memory_map = page.get_by_role("group", name="memory map of add_custom")
        for block in (0, 1):
            wrote = memory_map.get_by_role(
                "img", name=f"block aiv {block} wrote: 0x12c0e0000000 to 0x12c0e0000200 (512 bytes)"
            )
            assert wrote.is_visible()
        stomped = memory_map.get_by_role("img", name=re.compile(r"^stomped \(out of bounds when writing\)"))
        assert stomped.is_visible()
        screenshot(page, "stomping")
        assert errors == [] and fetched == []
    finally:
        page.close()


def test_filters_hide_rows_in_chromium(browser: Any, pages: dict[str, Path]) -> None:
    """A kind filter hides the other kind's rows and says how many are shown; 'all' brings them back."""
    page, errors, fetched = open_page(browser, pages["two_kinds"])
    try:
        table = page.get_by_role("table", name="findings")
        race = table.get_by_role("row", name=re.compile(r"^finding \d+: race_raw"))
        deadlock = table.get_by_role("row", name=re.compile(r"^finding \d+: deadlock"))
        assert race.is_visible() and deadlock.is_visible()
        # the suppressed deadlock is listed, greyed, with the rule's reason
        assert "suppressed: the planted hang, known" in deadlock.inner_text()
        assert deadlock.evaluate("row => getComputedStyle(row).color") == "rgb(153, 153, 153)"
        assert race.evaluate("row => getComputedStyle(row).color") != "rgb(153, 153, 153)"
        page.get_by_label("filter by kind").select_option("deadlock")
        assert deadlock.is_visible() and not race.is_visible()
        assert page.get_by_role("status").filter(has_text="finding(s) shown").inner_text() == "1 of 2 finding(s) shown"
        page.get_by_label("filter by kind").select_option("")
        assert race.is_visible()
        page.get_by_label("filter by block").select_option("aiv:3")
        assert race.is_visible()  # the race is found in every block, and shown in block 0: aiv 3 among them
        screenshot(page, "two_kinds")
        assert errors == [] and fetched == []
    finally:
        page.close()


def test_page_size_is_bounded_by_the_table() -> None:
    """20 000 findings: the table lists the first 5 000 and says where the rest are; the page stays under 5 MB."""
    from sanitizerd.findings.html import MAX_TABLE_ROWS, render_html
    from sanitizerd_protocol.model import Frame, make_finding

    stack = [Frame(file="/opt/k/add_custom.cpp", line=18, column=5, function="CopyIn")]
    found = [
        make_finding("illegal_read", job="j", session=1, device=i % 8, kernel=f"k{i % 50}", launch=1 + i % 50,
                     blocks={"aiv": [i % 48]}, address=0x12C0C0000000 + 32 * i, size=32, serial=i, stack=stack)
        for i in range(20_000)
    ]  # fmt: skip
    page = render_html(found, title="many", version="test")
    assert len(page.encode()) < 5_000_000
    assert page.count('<tr id="finding-') == MAX_TABLE_ROWS
    assert "15000 more finding(s) not listed" in page
    # deep stacks make long rows: the table stops at its budget, whatever the row count
    deep = [Frame(file=f"/opt/k/layer{n}.cpp", line=n, column=1, function=f"Layer{n}::Run()") for n in range(64)]
    for finding in found:
        finding.stack = deep
    page = render_html(found, title="deep", version="test")
    assert len(page.encode()) < 5_000_000 and "more finding(s) not listed" in page


def test_client_text_is_escaped() -> None:
    """A kernel name, a file and a detail come from the client: they are text on the page, never markup."""
    from sanitizerd.findings.html import render_html
    from sanitizerd_protocol.model import Frame, RaceAccess, make_finding

    hostile = '<img src=x onerror="alert(1)">'
    access = RaceAccess(pipe=hostile, op="Write", address=0, block_type="aiv", blocks=[0], serial=1,
                        location=Frame(file=hostile, line=1))  # fmt: skip
    race = make_finding("race_raw", kernel=hostile, launch=1, blocks={"aiv": [0]}, space="UB", detail=hostile,
                        accesses=[access, access])  # fmt: skip
    page = render_html([race], title=hostile, version="test")
    assert hostile not in page and "<img" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


def test_race_timelines_stay_within_the_budget() -> None:
    """100 races each with a full window of 300 events (two blocks each): the first are drawn, the rest listed
    with their missing order but no timeline, and the page stays under 5 MB."""
    from sanitizerd.findings.html import KernelFacts, PipeEvent, StreamFacts, race_windows, render_html
    from sanitizerd_protocol.model import RaceAccess, make_finding

    facts = KernelFacts(name="big")
    races = []
    for n in range(100):
        first = RaceAccess(pipe="PIPE_MTE2", op="Write", address=0, block_type="aiv", blocks=[n], serial=1000)
        second = RaceAccess(pipe="PIPE_V", op="Read", address=0, block_type="aiv", blocks=[n + 1], serial=1290)
        race = make_finding("race_raw", session=1, launch=1, kernel="big", space="UB", accesses=[first, second])
        races.append(race)
        for window in race_windows(race):
            facts.windows[window] = [
                PipeEvent(serial=window[2] + i, pipe="PIPE_MTE2" if i % 2 else "PIPE_V", what="read", space="UB",
                          address=0x100 * i, size=256)
                for i in range(300)
            ]  # fmt: skip
    page = render_html(races, title="big", version="test", facts=StreamFacts(kernels={(1, 1): facts}))
    assert len(page.encode()) < 5_000_000
    assert "timeline of block aiv 0," in page and "Timeline left out" in page
    assert page.count('aria-label="missing order"') == 100
