"""A job's name outside `sanitizerd run`: the launcher's guessable name is only a stem, the ranks agree on a random
suffix through their own rendezvous store, so two concurrent jobs with the same launcher name stay two jobs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from client_shim.attach import hook_dir, user_name
from tests.conftest import ROOT, RunningDaemon, program_env, sanitizerd

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))

# Rank 0 sends before init_process_group (through torchrun's agent store), the other after (the same store, or the
# process group's): both must name the same job. Each run sends its own digests, which two merged runs would mix.
RANKS = textwrap.dedent(
    """
    import os, sys
    import torch.distributed as dist
    from client_shim import connect
    rank, digest = int(os.environ["RANK"]), int(sys.argv[1])
    entries = [("gradient:0:w", "((4,), 'torch.float32', 'cpu')", digest)]
    def send():
        c = connect()
        c.signature(1, entries, local_step=1, replay=0, rank=rank)
        c.signature(1, entries, local_step=1, replay=1, rank=rank)
        c.signature(1, entries, phase="post_all_reduce", replica_group="dp", replicas=2, rank=rank)
        c.flush()
    if rank == 0:
        send()
    dist.init_process_group("gloo")
    if rank != 0:
        send()
    dist.barrier()
    os.write(1, f"job {connect().job}\\n".encode())  # one write: the two ranks share the pipe
    dist.destroy_process_group()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def attach_env(daemon: RunningDaemon) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(hook_dir()), os.environ.get("PYTHONPATH", "")) if p)
    return dict(program_env(), SANITIZERD_ATTACH="1", SANITIZERD_SOCKET=str(daemon.socket), PYTHONPATH=path)


def jobs(daemon: RunningDaemon) -> list[dict]:
    return json.loads(sanitizerd("jobs", "--socket", str(daemon.socket), "--format", "json").stdout)


def test_two_concurrent_torchruns_without_rdzv_id_are_two_jobs(daemon: RunningDaemon) -> None:
    """c10d rendezvous, no --rdzv-id (torchrun's run id is "none" in both), two master ports: two jobs of two
    sessions each, and no finding."""
    runs = [
        subprocess.Popen(
            [
                TORCHRUN,
                "--nnodes=1",
                "--nproc_per_node=2",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{free_port()}",
                "--no-python",
                sys.executable,
                "-c",
                RANKS,
                str(digest),
            ],
            env=attach_env(daemon),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for digest in (11, 22)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    for run, (_, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err
    named = [{line.split()[1] for line in out.splitlines() if line.startswith("job ")} for out, _ in outputs]
    assert all(len(names) == 1 for names in named), outputs  # each run's two ranks agreed
    (a,), (b,) = named
    stem = f"{user_name()}/torchrun-none-"
    assert a != b and a.startswith(stem) and b.startswith(stem), (a, b)
    views = {j["job"]: j for j in jobs(daemon)}
    for name in (a, b):
        assert (views[name]["sessions"], views[name]["ranks"]) == (2, [0, 1])
        found = sanitizerd("findings", "--socket", str(daemon.socket), "--job", name, "--format", "json").stdout
        assert json.loads(found) == []
    assert not [n for n in views if n.rstrip("-").endswith("torchrun-none")]  # the bare launcher name is never used


AFTER_INIT = textwrap.dedent(
    """
    import os
    import torch.distributed as dist
    from client_shim import connect
    dist.init_process_group("gloo")
    c = connect()
    c.signature(1, [("loss", "()", 7)], rank=dist.get_rank())
    dist.barrier()
    os.write(1, f"job {c.job}\\n".encode())
    dist.destroy_process_group()
    """
)


def test_ranks_without_an_agent_store_agree_through_the_process_groups_store(daemon: RunningDaemon) -> None:
    """Launched by hand (MASTER_ADDR:MASTER_PORT, no torchrun agent), as Ascend jobs often are: the ranks agree
    through init_process_group's store."""
    port = free_port()
    env = dict(attach_env(daemon), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", AFTER_INIT],
            env=dict(env, RANK=str(rank)),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    (name,) = {out.split()[1] for out, _ in outputs}
    assert name.startswith(f"{user_name()}/127.0.0.1:{port}-"), name
    (view,) = [j for j in jobs(daemon) if j["job"] == name]
    assert (view["sessions"], view["ranks"]) == (2, [0, 1])


def test_a_rank_with_no_store_yet_is_a_job_of_its_own(daemon: RunningDaemon) -> None:
    """Sending before init_process_group with no agent store: no guess at the others' name, one warning."""
    code = (
        "import os; from client_shim import connect; c = connect(); c.signature(1, [('loss', '()', 7)]); "
        "print(c.job, os.getpid())"
    )
    env = dict(attach_env(daemon), RANK_TABLE_FILE="/etc/hccl_8p.json", RANK_ID="3")
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    name, pid = result.stdout.split()
    assert name == f"{user_name()}/ranktable-hccl_8p-{socket.gethostname()}-{pid}"
    assert result.stderr.count("could not agree its job") == 1, result.stderr
