"""The replayer's collectives on the process group's device. A device-only backend (``cuda:gloo``: gloo that
serves only ``cuda``, as NCCL does) refuses a CPU tensor, which is what a CPU mismatch flag met on NCCL and
HCCL; the replayer takes the backend's device, or the ``device=`` it is given, for every collective it
issues. This build has no CUDA, so the checked steps themselves run on a CPU-only group (``cpu:gloo``), every
collective tensor recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from client_shim.torch_sdc import SDCReplayer, group_device


@pytest.fixture
def group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[None]:
    dist.init_process_group(request.param, init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("group", ["cuda:gloo"], indirect=True)
def test_a_device_only_backend_refuses_cpu_tensors_and_the_replayer_takes_its_device(group: None) -> None:
    with pytest.raises(RuntimeError, match="No backend type associated with device type cpu"):
        dist.all_reduce(torch.zeros(1, dtype=torch.int32))  # the old mismatch flag
    assert group_device().type == "cuda"


@pytest.mark.parametrize("group", ["gloo", "cpu:gloo"], indirect=True)
def test_a_backend_that_serves_the_cpu_gets_cpu_collectives(group: None) -> None:
    assert group_device() == torch.device("cpu")


@pytest.mark.parametrize("group", ["cpu:gloo"], indirect=True)
def test_every_collective_tensor_is_on_the_replayers_device(group: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, torch.device]] = []

    def recording(name: str) -> Any:
        real = getattr(dist, name)

        def call(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            for t in tensor if isinstance(tensor, list) else [tensor]:
                seen.append((name, t.device))
            return real(tensor, *args, **kwargs)

        return call

    for name in ("all_reduce", "all_gather", "broadcast", "all_gather_into_tensor"):
        monkeypatch.setattr(dist, name, recording(name))
    model = torch.nn.Linear(4, 2)
    replayer = SDCReplayer(SDCReplayer.Config(num_steps=-1, num_replays=2), modules=[model], report=False)
    assert replayer.device == torch.device("cpu")

    def execute() -> torch.Tensor:
        loss = model(torch.ones(3, 4)).sum()
        loss.backward()
        return loss

    for step in range(1, 4):
        replayer.run_fwd_bwd(execute, step=step)
        model.zero_grad()
    assert seen == [("all_reduce", replayer.device)] * 3  # one collective, one host read per checked step
    assert replayer.host_syncs == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a device-only backend's checked steps need its device")
@pytest.mark.parametrize("group", ["cuda:gloo"], indirect=True)
def test_checked_steps_on_a_device_only_backend(group: None) -> None:
    """Where the build has CUDA (the device machine; this project's CI has none, so the two tests above stand
    for it there): every checked step on gloo that serves only ``cuda``, the model on the GPU, no error."""
    device = torch.device("cuda", torch.cuda.current_device())
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)).to(device)
    replayer = SDCReplayer(SDCReplayer.Config(num_steps=-1, num_replays=2), modules=[model], report=False)
    assert replayer.device.type == "cuda"

    def execute() -> torch.Tensor:
        loss = model(torch.ones(3, 4, device=device)).sum()
        loss.backward()
        return loss

    for step in range(1, 4):
        replayer.run_fwd_bwd(execute, step=step)
        model.zero_grad()
    assert (replayer.checked_steps, replayer.host_syncs) == (3, 3)
