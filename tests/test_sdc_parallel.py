"""The SDC replayer under real parallelism on CPU ranks with gloo: FSDP2 (fully_shard, DTensor gradients and
parameters signed by their local shard) and DistributedDataParallel with several buckets (the bucket rebuild
after the first iteration is no false alarm)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

COMMON = textwrap.dedent(
    """
    import os, sys, warnings, torch, torch.distributed as dist
    from client_shim.torch_sdc import SDCReplayer, SDCReplayMismatch
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    mode = sys.argv[1]

    def finish():
        # Every rank leaves together, then without C++ static destructors: gloo's threads can still be winding down
        # at interpreter exit and abort it ("terminate called without an active exception"), a teardown race of
        # torch's, not of the code under test.
        dist.barrier()
        dist.destroy_process_group()
        sys.stdout.flush()
        os._exit(0)
    """
)

FSDP = COMMON + textwrap.dedent(
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    r = SDCReplayer(SDCReplayer.Config(num_steps=-1), modules=[model], device=torch.device("cpu"), report=False)
    data = torch.Generator().manual_seed(rank)
    try:
        for step in range(1, 4):
            x = torch.randn(4, 8, generator=data)
            def execute():
                loss = model(x).square().mean()
                loss.backward()
                if mode == "flip" and rank == 1 and step == 2 and r.replay == 1:
                    with torch.no_grad():  # one bit of this rank's shard of the first gradient
                        model[0].weight.grad.to_local().view(torch.int32).view(-1)[0] ^= 1
                return loss
            r.run_fwd_bwd(execute, step=step)
            optimizer.step()
            optimizer.zero_grad()
        print(f"rank {rank} clean")
    except SDCReplayMismatch as exc:
        print(f"rank {rank} raised step={exc.step} rank={exc.rank} {exc.signature_mismatch}")
    finish()
    """
)

DDP = COMMON + textwrap.dedent(
    """
    from torch.nn.parallel import DistributedDataParallel
    layers = [torch.nn.Linear(32, 32) for _ in range(6)]
    if mode == "replicate":  # composable DDP, as TorchTitan applies it: the reducer is made at the first forward
        from torch.distributed._composable.replicate import replicate
        model = replicate(torch.nn.Sequential(*layers), bucket_cap_mb=0.005)
    else:
        model = DistributedDataParallel(torch.nn.Sequential(*layers), bucket_cap_mb=0.005)  # ~1 layer a bucket
    reducer = lambda: model.reducer if mode != "replicate" else replicate.state(model)._ddp.reducer
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    r = SDCReplayer(SDCReplayer.Config(num_steps=-1), modules=[model], report=False)
    data = torch.Generator().manual_seed(rank)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for step in range(1, 5):
                x = torch.randn(16, 32, generator=data)
                def execute():
                    loss = model(x).square().mean()
                    loss.backward()
                    return loss
                r.run_fwd_bwd(execute, step=step)
                optimizer.step()
                optimizer.zero_grad()
            rebuilt = sum("rebuilt its gradient buckets" in str(w.message) for w in caught)
            print(f"rank {rank} clean buckets={len(reducer()._get_zeros_like_grad_buckets())} rebuilt={rebuilt}")
        except SDCReplayMismatch as exc:
            print(f"rank {rank} raised step={exc.step} rank={exc.rank} {exc.signature_mismatch}")
    finish()
    """
)


def run_ranks(script: str, world: int, *args: str) -> list[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args],
            env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    results = [p.communicate(timeout=180) for p in procs]
    out = sorted(stdout.strip() for stdout, _ in results)
    assert all(p.returncode == 0 for p in procs), (
        out,
        [(p.returncode, err[-2000:]) for p, (_, err) in zip(procs, results, strict=True)],
    )
    return out


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("clean", ["rank 0 clean", "rank 1 clean"]),
        (
            "flip",
            [
                "rank 0 raised step=2 rank=1 gradient:0:0.weight",
                "rank 1 raised step=2 rank=1 gradient:0:0.weight",
            ],
        ),
    ],
)
def test_fsdp2_clean_run_passes_and_a_flipped_gradient_shard_is_caught_on_every_rank(
    mode: str, expected: list[str]
) -> None:
    assert run_ranks(FSDP, 2, mode) == expected


@pytest.mark.parametrize("mode", ["clean", "replicate"])
def test_ddp_with_several_buckets_on_four_ranks_has_no_false_alarm(mode: str) -> None:
    out = run_ranks(DDP, 4, mode)
    assert all(line.startswith(f"rank {i} clean") for i, line in enumerate(out)), out
    assert all(int(line.split("buckets=")[1].split()[0]) > 2 for line in out), out
    assert all(line.endswith("rebuilt=1") for line in out), out  # the first step was checked again, once


REPLICA = COMMON + textwrap.dedent(
    """
    from client_shim.torch_sdc import SDCReplicaMismatch
    policy, bad = sys.argv[2], int(sys.argv[3])
    model = torch.nn.Linear(4, 2)
    r = SDCReplayer(SDCReplayer.Config(num_steps=-1), modules=[model], replica_group="dp", report=False,
                    on_replica_mismatch=policy)
    try:
        for step in range(1, 3):
            x = torch.randn(3, 4, generator=torch.Generator().manual_seed(rank * 10 + step))
            def execute():
                loss = model(x).sum()
                loss.backward()
                for p in model.parameters():  # the data-parallel all-reduce
                    dist.all_reduce(p.grad)
                if rank == bad and step == 2:
                    with torch.no_grad():  # after the collective, in every run: the replays agree
                        model.weight.grad.view(-1)[0] += 1.0
                return loss
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                r.run_fwd_bwd(execute, step=step)
            for w in caught:
                print(f"rank {rank} warned {w.message}")
            model.zero_grad()
        print(f"rank {rank} done")
    except SDCReplicaMismatch as exc:
        print(f"rank {rank} raised {exc}")
    finish()
    """
)


def test_a_replica_that_disagrees_after_the_all_reduce_is_named_on_every_rank() -> None:
    """Three replicas, rank 2 alters its gradient after the all-reduce: every rank raises, naming rank 2."""
    out = run_ranks(REPLICA, 3, "clean", "raise", "2")
    message = "SDC replica mismatch: step=2, ranks [2] disagree with the other replicas after the gradient all-reduce"
    assert out == [f"rank {i} raised {message}" for i in range(3)]


def test_two_replicas_that_disagree_are_both_named_and_report_lets_training_go_on() -> None:
    out = run_ranks(REPLICA, 2, "clean", "report", "1")
    message = (
        "SDC replica mismatch: step=2, replicas [0, 1] disagree and none has a majority after the gradient all-reduce"
    )
    assert out == [f"rank {i} warned {message}\nrank {i} done" for i in range(2)]
