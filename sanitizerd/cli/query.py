"""``sanitizerd findings``, ``sanitizerd sessions`` and ``sanitizerd jobs``: ask a running daemon."""

from __future__ import annotations

import sys
import time

import msgspec

from client_shim.transport import ClientError
from sanitizerd.cli.control import ControlClient
from sanitizerd.findings.render import block_list, render_json, render_text
from sanitizerd.protocol import messages as m


def _ask(socket: str, query: m.Message, answer: type[m.Message]) -> m.Message | None:
    """One question to the daemon; None (after saying why on stderr) when it cannot be asked."""
    try:
        with ControlClient(socket) as control:
            reply = control.request(query)
    except ClientError as exc:
        print(f"[sanitizerd] ERROR: {exc}", file=sys.stderr)
        return None
    except TimeoutError:
        print(f"[sanitizerd] ERROR: sanitizerd at {socket} did not answer in time", file=sys.stderr)
        return None
    assert isinstance(reply, answer)
    return reply


def findings(socket: str, *, job: str, session: int, fmt: str) -> int:
    reply = _ask(socket, m.QueryFindings(job=job, session=session), m.Findings)
    if not isinstance(reply, m.Findings):
        return 1
    if fmt == "json":
        sys.stdout.write(render_json(reply.findings).decode() + "\n")
    else:
        sys.stdout.write(render_text(reply.findings))
        print(f"[sanitizerd] {len(reply.findings)} finding(s)")
    return 0


def sessions(socket: str, *, fmt: str) -> int:
    reply = _ask(socket, m.QuerySessions(), m.Sessions)
    if not isinstance(reply, m.Sessions):
        return 1
    if fmt == "json":
        sys.stdout.write(msgspec.json.encode(reply.sessions).decode() + "\n")
        return 0
    header = f"{'SESSION':>8} {'STATE':6} {'JOB':24} {'PID':>7} {'DEVICE':>6} {'KERNELS':>7} {'EVENTS':>12} "
    print(header + f"{'FINDINGS':>8} STARTED")
    for s in reply.sessions:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started)) if s.started else "-"
        print(
            f"{s.session:>8} {s.state:6} {s.job[:24]:24} {s.pid:>7} {s.device:>6} {s.kernels:>7} {s.events:>12} "
            f"{s.findings:>8} {started}"
        )
    return 0


def jobs(socket: str, *, fmt: str) -> int:
    reply = _ask(socket, m.QueryJobs(), m.Jobs)
    if not isinstance(reply, m.Jobs):
        return 1
    if fmt == "json":
        sys.stdout.write(msgspec.json.encode(reply.jobs).decode() + "\n")
        return 0
    print(f"{'JOB':28} {'STATE':7} {'SESSIONS':>8} {'LIVE':>4} {'RANKS':12} {'DEVICES':12} {'EVENTS':>12} "
          f"{'FINDINGS':>8} SIGNATURES")  # fmt: skip
    for j in reply.jobs:
        signatures = ",".join(f"{rank}:{n}" for rank, n in j.signatures.items()) if any(j.signatures.values()) else "-"
        print(
            f"{j.job[:28]:28} {j.state:7} {j.sessions:>8} {j.live:>4} {_ids(j.ranks):12} {_ids(j.devices):12} "
            f"{j.events:>12} {j.findings:>8} {signatures}"
        )
    return 0


def _ids(ids: list[int]) -> str:
    return block_list(ids) or "-"
