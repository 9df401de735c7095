"""A small deterministic data-parallel training job with silent-data-corruption replay (sdccheck).

    sanitizerd run -- torchrun --nproc_per_node=4 examples/train_ddp.py
    sanitizerd run -- torchrun --nproc_per_node=4 examples/train_ddp.py --inject-replay 2:1
    sanitizerd run -- torchrun --nproc_per_node=4 examples/train_ddp.py --inject-replica 3:2

Each rank trains the same MLP (with BatchNorm buffers and dropout, so RNG and buffers matter) on its own data
shard, data-parallel: after each backward the gradients are averaged with one all-reduce of their flattened
concatenation (gloo on CPU; HCCL on Ascend, NCCL on GPUs where present). Replay needs bit-identical reruns, and
DistributedDataParallel is not that in its first iteration: it regroups its gradient buckets after it, which
changes the order of the sums by an ulp; a fixed flat all-reduce always sums alike. Every step goes through
``SDCReplayer``: a reference forward/backward, then a replay from the restored state that must match it; the
gradients after the all-reduce are also sent for sdccheck's cross-replica check.

``--inject-replay RANK:STEP`` adds 1 to one gradient element on that rank during the replay of that step, as a
flipped bit would: every rank raises ``SDCReplayMismatch`` naming the rank, and the daemon holds one
``sdc_mismatch``. ``--inject-replica RANK:STEP`` changes that rank's gradient after the all-reduce, identically in
every run: its replays agree, but it disagrees with the other replicas, which sdccheck names.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from client_shim.torch_sdc import ScalarStateAccessor, SDCReplayer, SDCReplayMismatch

FEATURES, HIDDEN, BATCH = 16, 32, 8


def rank_and_step(text: str | None) -> tuple[int, int]:
    if not text:
        return -1, -1
    rank, step = text.split(":")
    return int(rank), int(step)


def say(line: str) -> None:
    """One line in one write: the ranks share stdout, and print's separate writes of text and newline interleave."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def average_gradients(model: torch.nn.Module, world: int) -> None:
    """The data-parallel all-reduce: one flat tensor, summed in the same order every time."""
    grads = [p.grad for p in model.parameters()]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat /= world
    for grad, averaged in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        grad.copy_(averaged)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--num-replays", type=int, default=1)
    parser.add_argument("--check-steps", type=int, default=-1, help="steps checked (-1: every step)")
    parser.add_argument("--inject-replay", metavar="RANK:STEP")
    parser.add_argument("--inject-replica", metavar="RANK:STEP")
    parser.add_argument(
        "--on-replica-mismatch", choices=("raise", "report"), default="report",
        help="what the replicas do when their gradients differ after the all-reduce (sdccheck is told either way)",
    )  # fmt: skip
    args = parser.parse_args()

    backend = "hccl" if hasattr(torch, "npu") else ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    # The model, its data and the replayer's collectives on the device the backend serves.
    kind = {"hccl": "npu", "nccl": "cuda"}.get(backend, "cpu")
    device = torch.device(kind) if kind == "cpu" else torch.device(kind, int(os.environ.get("LOCAL_RANK", "0")))
    if kind != "cpu":
        getattr(torch, kind).set_device(device)
    torch.manual_seed(0)  # the same initial weights on every rank
    torch.use_deterministic_algorithms(True)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.BatchNorm1d(HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, 1),
    ).to(device)  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    tokens = {"seen": 0}
    replayer = SDCReplayer(
        SDCReplayer.Config(num_steps=args.check_steps, num_replays=args.num_replays),
        modules=[model],
        device=device,
        scalars={"ntokens_seen": ScalarStateAccessor(lambda: tokens["seen"], lambda v: tokens.update(seen=v))},
        replica_group="dp",
        replicas=world,
        on_replica_mismatch=args.on_replica_mismatch,
    )
    replay_fault, replica_fault = rank_and_step(args.inject_replay), rank_and_step(args.inject_replica)
    try:
        for step in range(1, args.steps + 1):
            x = torch.randn(BATCH, FEATURES, generator=data)
            x = x.to(device)  # drawn on the CPU generator: the same data on any device
            y = x.sum(dim=1, keepdim=True)

            def forward_backward(step: int = step, x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                average_gradients(model, world)
                tokens["seen"] += BATCH
                first = model[0].weight.grad
                with torch.no_grad():
                    if (rank, step) == replay_fault and replayer.replay >= 1:
                        first.view(-1)[0] += 1.0  # a corrupted value, in the replay only
                    if (rank, step) == replica_fault:
                        first.view(-1)[0] += 1.0  # after the collective: this replica now differs
                return loss

            loss = replayer.run_fwd_bwd(forward_backward, step)
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
            if rank == 0:
                say(f"step {step}: loss {loss.item():.6f}")
    except SDCReplayMismatch as exc:
        say(f"rank {rank} raised SDCReplayMismatch: {exc}")
        status = 3
    else:
        status = 0
    dist.barrier()  # gloo aborts a rank whose peer tears the group down under it
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
