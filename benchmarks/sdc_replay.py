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

Prints one JSON object last: median milliseconds per step for each mode and the ratios.
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


def timed(steps: int, one_step: Callable[[int], None]) -> float:
    """Median milliseconds per step, after two warm-up steps."""
    for step in range(2):
        one_step(step)
    times = []
    for step in range(2, steps + 2):
        started = time.perf_counter()
        one_step(step)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--device", default="cpu", help="where the model and the digests live (cpu, cuda, npu)")
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

    result = {"plain_ms": timed(args.steps, plain)}
    unchecked = SDCReplayer(SDCReplayer.Config(num_steps=1), modules=[net], device=device, report=False)
    result["unchecked_ms"] = timed(args.steps, through(unchecked))  # its one checked step is a warm-up step
    for replays in (1, 2):
        checked = SDCReplayer(
            SDCReplayer.Config(num_steps=-1, num_replays=replays), modules=[net], device=device, report=False
        )
        result[f"checked_{replays}_replay_ms"] = timed(args.steps, through(checked))
        result[f"host_syncs_per_checked_step_{replays}_replay"] = checked.host_syncs / checked.checked_steps
    plain_ms = result["plain_ms"]
    for key in list(result):
        if key.endswith("_ms") and key != "plain_ms":
            result[key.replace("_ms", "_ratio")] = result[key] / plain_ms
    for replays in (1, 2):
        result[f"signature_ms_{replays}_replay"] = result[f"checked_{replays}_replay_ms"] - (1 + replays) * plain_ms
    print(json.dumps({k: round(v, 3) for k, v in result.items()}))


if __name__ == "__main__":
    main()
