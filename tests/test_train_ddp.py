"""The multi-card example end to end: `sanitizerd run -- torchrun --nproc_per_node=4 examples/train_ddp.py`
on a real daemon, four real rank processes (gloo on CPU) that attach automatically; and the same training
with no daemon at all."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from client_shim.attach import hook_dir
from sanitizerd.cli.run import SDC_EXIT_STATUS
from tests.conftest import ROOT, RunningDaemon, sanitizerd

# A job's ranks routed to one worker: test_workers, test_sdccheck and test_sdc_multinode run in both passes.
pytestmark = pytest.mark.first_pass_only("four torchrun ranks of one job: their routing is tested elsewhere")

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
EXAMPLE = str(ROOT / "examples" / "train_ddp.py")
JOB = re.compile(r"job (\S+):")


def train(daemon: RunningDaemon, *options: str) -> tuple[str, str, list[dict], dict, int]:
    """Run the example under sanitizerd with 4 ranks: its output, the job, its findings, its job view, and the
    run's exit status."""
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--", TORCHRUN, "--standalone", "--nproc_per_node=4", EXAMPLE,
        *options, timeout=300,
    )  # fmt: skip
    job = JOB.findall(result.stdout)[-1]
    found = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json").stdout)
    jobs = json.loads(sanitizerd("jobs", "--socket", str(daemon.socket), "--format", "json").stdout)
    (view,) = [j for j in jobs if j["job"] == job]
    return result.stdout, job, found, view, result.returncode


def test_clean_training_one_job_four_ranks_no_finding(daemon: RunningDaemon) -> None:
    stdout, _, found, view, status = train(daemon)
    assert (found, status) == ([], 0)
    assert "No error detected." in stdout
    assert (view["sessions"], view["ranks"], view["devices"]) == (4, [0, 1, 2, 3], [0, 1, 2, 3])
    assert set(view["signatures"]) == {"0", "1", "2", "3"} and all(n > 0 for n in view["signatures"].values())
    text = sanitizerd("jobs", "--socket", str(daemon.socket)).stdout
    (line,) = [line for line in text.splitlines() if line.startswith(view["job"][:28])]
    assert line.split()[1:5] == [view["state"], "4", "0", "0-3"]


def test_a_corrupted_replay_on_rank_2_at_step_1(daemon: RunningDaemon) -> None:
    """Every rank raises SDCReplayMismatch naming rank 2; the daemon holds exactly one sdc_mismatch."""
    stdout, _, found, _, status = train(daemon, "--inject-replay", "2:1")
    assert status != 0  # the ranks failed: torchrun's status
    raised = re.findall(r"rank (\d) raised SDCReplayMismatch: (.*)", stdout)
    assert sorted(r for r, _ in raised) == ["0", "1", "2", "3"], stdout
    assert {message for _, message in raised} == {
        "SDC replay mismatch: step=1, local_step=1, replay=1, rank=2, signature='gradient:0:0.weight'"
    }
    (finding,) = found
    assert finding["kind"] == "sdc_mismatch"
    assert (finding["replay"]["step"], finding["replay"]["rank"]) == (1, 2)
    assert finding["replay"]["signature"].startswith("gradient:")


def test_a_replica_that_disagrees_after_the_all_reduce(daemon: RunningDaemon) -> None:
    """Rank 3 changes its gradient after the collective: its replays agree with it, the other replicas don't."""
    stdout, _, found, _, status = train(daemon, "--inject-replica", "3:2")
    assert "raised" not in stdout and "step 3: loss" in stdout  # "report": the training completed
    assert status == SDC_EXIT_STATUS  # and the run says it cannot be trusted
    (finding,) = found
    assert finding["kind"] == "sdc_replica_mismatch"
    assert (finding["replay"]["step"], finding["replay"]["rank"], finding["device"]) == (2, 3, 3)


def test_training_with_no_daemon_completes_with_one_warning(short_dir: Path) -> None:
    """The attach environment without a daemon: the training completes, with one warning (from the rank, which
    tried to send; torchrun's agent, which attached too but sent nothing, stays silent)."""
    env = dict(
        os.environ, SANITIZERD_ATTACH="1", SANITIZERD_SOCKET=str(short_dir / "absent.sock"),
        PYTHONPATH=str(hook_dir()),
    )  # fmt: skip
    result = subprocess.run(
        [TORCHRUN, "--standalone", "--nproc_per_node=1", EXAMPLE, "--steps", "2"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("[sanitizerd] WARNING")]
    assert len(warnings) == 1, result.stderr
    assert "this process runs unchecked" in warnings[0]
    assert "step 2: loss" in result.stdout
