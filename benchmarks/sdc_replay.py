"""What SDC replay costs a training step (client_shim.torch_sdc), on the CPU, one process, one thread.

A 4-layer MLP (1024 wide, batch 64, with BatchNorm buffers and dropout) does forward/backward steps, timed:

- plain: the step alone;
- unchecked: through ``SDCReplayer.run_fwd_bwd`` once its schedule is spent (``num_steps=1``, later steps);
- checked: every step checked (``num_steps=-1``) with 1 and with 2 replays.

A checked step should cost (1 + num_replays) plain steps plus the signatures (hashing every gradient, buffer and
RNG state); an unchecked one nothing but the call. Nothing is sent to a daemon (no attach environment), so the
figure is the replay itself. ``host_syncs_per_checked_step`` is what the replayer counted: its device-to-host
reads per checked step (digests stay on the device; the verdict is read once), 1 whatever the replays.

    .venv/bin/python benchmarks/sdc_replay.py [--steps 30]

Prints one JSON object last: median milliseconds per step for each mode and the ratios. It passes (exit 0) when
each checked step costs at most (1 + num_replays) plain steps plus ``--budget`` (15 %) of that for the snapshot
and signatures, and an unchecked step at most a plain one plus the budget; else it exits 1 and says which.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from client_shim.torch_sdc import SDCReplayer

WIDTH, DEPTH, BATCH = 1024, 4, 64


def model() -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.BatchNorm1d(WIDTH), torch.nn.ReLU(), torch.nn.Dropout(0.1)]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1))


def timed(steps: int, modes: dict[str, Callable[[int], None]]) -> dict[str, float]:
    """Median milliseconds per step of each mode, after two warm-up steps each. The modes take turns step by
    step, so that load from elsewhere on a shared machine falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in modes}
    for step in range(steps + 2):
        for name, one_step in modes.items():
            started = time.perf_counter()
            one_step(step)
            if step >= 2:
                times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--device", default="cpu", help="where the model and the digests live (cpu, cuda, npu)")
    parser.add_argument("--budget", type=float, default=0.15, help="allowed cost over (1 + replays) plain steps")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = model().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-4)
    x, y = torch.randn(BATCH, WIDTH, device=device), torch.randn(BATCH, 1, device=device)

    def forward_backward() -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        return loss

    def plain(step: int) -> None:
        forward_backward()
        optimizer.step()
        optimizer.zero_grad()

    def through(replayer: SDCReplayer) -> Callable[[int], None]:
        def one_step(step: int) -> None:
            replayer.run_fwd_bwd(forward_backward, step)
            optimizer.step()
            optimizer.zero_grad()

        return one_step

    unchecked = SDCReplayer(SDCReplayer.Config(num_steps=1), modules=[net], device=device, report=False)
    checked = {
        replays: SDCReplayer(
            SDCReplayer.Config(num_steps=-1, num_replays=replays), modules=[net], device=device, report=False
        )
        for replays in (1, 2)
    }
    modes = {"plain_ms": plain, "unchecked_ms": through(unchecked)}  # unchecked's one checked step: a warm-up
    modes |= {f"checked_{replays}_replay_ms": through(replayer) for replays, replayer in checked.items()}
    result = timed(args.steps, modes)
    for replays, replayer in checked.items():
        result[f"host_syncs_per_checked_step_{replays}_replay"] = replayer.host_syncs / replayer.checked_steps
    plain_ms = result["plain_ms"]
    for key in list(result):
        if key.endswith("_ms") and key != "plain_ms":
            result[key.replace("_ms", "_ratio")] = result[key] / plain_ms
    for replays in (1, 2):
        result[f"signature_ms_{replays}_replay"] = result[f"checked_{replays}_replay_ms"] - (1 + replays) * plain_ms
    limits = {replays: (1 + replays) * (1 + args.budget) for replays in (1, 2)}
    over = [
        f"checked, {replays} replay(s): x{result[f'checked_{replays}_replay_ratio']:.2f} > x{limit:.2f}"
        for replays, limit in limits.items()
        if result[f"checked_{replays}_replay_ratio"] > limit
    ]
    if result["unchecked_ratio"] > 1 + args.budget:
        over.append(f"unchecked: x{result['unchecked_ratio']:.2f} > x{1 + args.budget:.2f}")
    result["passed"] = not over
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}))
    if over:
        raise SystemExit("over budget: " + "; ".join(over))


if __name__ == "__main__":
    main()
