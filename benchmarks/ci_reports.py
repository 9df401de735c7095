"""Rendering cost of the CI reports (issue 14): seconds to render N findings as SARIF and as JUnit XML, beside
the msSanitizer text and the JSON that `findings` already renders for the same findings (the baseline). The
findings are the demo's mix: kernel findings with a two-frame stack, spread over launches, and host-side leaks.
Prints the best of ``--repeats`` runs and the report's size.

    PYTHONPATH=. .venv/bin/python benchmarks/ci_reports.py [--findings 100000] [--launches 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from sanitizerd.findings.checked import CheckedKernel
from sanitizerd.findings.junit import render_junit
from sanitizerd.findings.render import render_json, render_text
from sanitizerd.findings.sarif import render_sarif
from sanitizerd_protocol.model import Finding, Frame, make_finding

SOURCE = "/opt/samples/add_custom/add_custom.cpp"


def findings(count: int, launches: int) -> list[Finding]:
    stack = [Frame(file=SOURCE, line=18, column=5, function="KernelAdd::CopyIn()"),
             Frame(file=SOURCE, line=54, column=5, function="add_custom_kernel")]  # fmt: skip
    made = []
    for i in range(count):
        if i % 4 == 3:
            made.append(make_finding("memory_leak", job="j", session=1, address=0x1000 * i, size=4096, serial=i,
                                     location=Frame(file="main.cpp", line=73)))  # fmt: skip
        else:
            made.append(make_finding("illegal_read", job="j", session=1, device=0, kernel="add_custom_kernel",
                                     launch=1 + i % launches, blocks={"aiv": [i % 8]}, address=0x12C0C0007E00 + i,
                                     size=224, serial=i, pc=0x800, location=stack[0], stack=stack))  # fmt: skip
    return made


def best(render: Callable[[], object], repeats: int) -> tuple[float, int]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = render()
        times.append(time.perf_counter() - start)
    return min(times), len(out)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--findings", type=int, default=100_000)
    parser.add_argument("--launches", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    found = findings(args.findings, args.launches)
    kernels = [CheckedKernel(job="j", session=1, launch=n, name="add_custom_kernel", tools=("memcheck",))
               for n in range(1, args.launches + 1)]  # fmt: skip
    for name, render in (
        ("text (baseline)", lambda: render_text(found)),
        ("json (baseline)", lambda: render_json(found)),
        ("sarif", lambda: render_sarif(found, version="0", kernels=kernels)),
        ("junit", lambda: render_junit(found, kernels=kernels)),
    ):
        seconds, size = best(render, args.repeats)
        print(f"{name:16} {seconds:8.3f} s  {args.findings / seconds:10.0f} findings/s  {size / 1e6:8.1f} MB")


if __name__ == "__main__":
    main()
