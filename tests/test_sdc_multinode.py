"""A data-parallel job on two hosts: two real daemons on two sockets stand for the hosts' daemons, and
`sanitizerd run -- torchrun --nnodes=2 --nproc_per_node=2 --node_rank=K` on each starts two of the four
ranks (gloo on CPU, static rendezvous on this machine). No daemon sees every replica; the ranks compare
their post-all-reduce digests through their own process group and each tells its local daemon."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanitizerd.cli.run import SDC_EXIT_STATUS
from tests.conftest import ROOT, RunningDaemon, sanitizerd, start_daemon, stop_daemon
from tests.test_e2e_daemon import free_port
from tests.test_train_ddp import EXAMPLE, JOB, TORCHRUN


@pytest.fixture
def hosts(short_dir: Path) -> Iterator[tuple[RunningDaemon, RunningDaemon]]:
    (short_dir / "a").mkdir(), (short_dir / "b").mkdir()
    first = start_daemon(short_dir / "a")
    try:
        second = start_daemon(short_dir / "b")
    except BaseException:
        stop_daemon(first)
        raise
    yield first, second
    codes = stop_daemon(first), stop_daemon(second)
    assert codes == (0, 0), first.log_text() + second.log_text()


def train_on_two_hosts(hosts: tuple[RunningDaemon, ...], *options: str) -> list[tuple[int, str, list[dict]]]:
    """Both hosts' runs at once: for each, its exit status, its output and the findings of its job."""
    port = free_port()
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sanitizerd",
                "run",
                "--socket",
                str(daemon.socket),
                "--",
                TORCHRUN,
                "--nnodes=2",
                "--nproc_per_node=2",
                f"--node_rank={node}",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                EXAMPLE,
                "--steps",
                "2",
                *options,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node, daemon in enumerate(hosts)
    ]
    out = []
    for daemon, run in zip(hosts, runs, strict=True):
        stdout, stderr = run.communicate(timeout=300)
        job = JOB.findall(stdout)[-1]
        listed = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
        out.append((run.returncode, stdout + stderr, json.loads(listed.stdout)))
    return out


def test_a_replica_on_the_other_host_that_disagrees_is_found_where_it_runs(
    hosts: tuple[RunningDaemon, RunningDaemon],
) -> None:
    """Rank 3 (the second host's second rank) changes its gradient after the all-reduce at step 1: the
    finding is stored by the second host's daemon on rank 3's session, the first host's run says what the
    job's process group saw, and both runs exit non-zero although the training itself completed."""
    (status_a, out_a, found_a), (status_b, out_b, found_b) = train_on_two_hosts(hosts, "--inject-replica", "3:1")
    (finding,) = found_b
    assert finding["kind"] == "sdc_replica_mismatch"
    assert (finding["replay"]["step"], finding["replay"]["rank"], finding["device"]) == (1, 3, 1)  # LOCAL_RANK 1
    assert finding["detail"].endswith("differs from 3 of 3 other replica(s)")
    (elsewhere,) = found_a
    assert (elsewhere["replay"]["rank"], elsewhere["device"]) == (3, -1)
    assert "rank 3 is not served by this daemon" in elsewhere["detail"]
    assert (status_a, status_b) == (SDC_EXIT_STATUS, SDC_EXIT_STATUS), out_a + out_b
    assert "step 2: loss" in out_a  # report, the example's policy: training went on
    assert "incomplete" not in out_a + out_b


def test_a_clean_job_on_two_hosts_is_checked_and_clean(hosts: tuple[RunningDaemon, RunningDaemon]) -> None:
    for status, out, found in train_on_two_hosts(hosts):
        assert (status, found) == (0, []), out
        assert "No error detected." in out and "incomplete" not in out


def test_replicas_that_cannot_compare_themselves_are_said_to_be_incomplete(
    hosts: tuple[RunningDaemon, RunningDaemon],
) -> None:
    """Clients that send their post-all-reduce gradients with no verdict of their own (the C client, a
    script): each host's daemon holds two of the four replicas, and its run's summary says so instead of
    staying silent."""
    ranks = textwrap.dedent(
        """
        import os, sys
        from client_shim.client import Client
        first = int(sys.argv[1])
        for rank in (first, first + 1):  # this host's two ranks
            c = Client(os.environ["SANITIZERD_SOCKET"], job=os.environ["SANITIZERD_JOB"], rank=rank, world_size=4)
            c.signature(1, [("gradient:0:w", "f", 7)], phase="post_all_reduce", replica_group="dp", replicas=4)
            c.close()
        """
    )
    for node, daemon in enumerate(hosts):
        result = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, "-c", ranks, str(2 * node))
        assert result.returncode == 0, result.stdout + result.stderr
        assert re.search(
            r"WARNING: job \S+: the cross-replica check of 1 step\(s\) is incomplete: 'dp' heard from 2 of 4 ",
            result.stdout,
        ), result.stdout
