"""client_shim.torch_sdc, the SDC replayer for PyTorch training loops, on CPU: TorchTitan's behaviour
(peers.md §1.9) and what sanitizerd adds. No daemon here: the replayer checks in process."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch

from client_shim.torch_sdc import ScalarStateAccessor, SDCReplayer, SDCReplayMismatch, _xor_hash, hash_tensor
from tests.conftest import ROOT


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
        self.register_buffer("counter", torch.zeros(()))

    def forward(self) -> torch.Tensor:
        self.counter += 1
        noise = torch.rand(2) + random.random()
        return (self.weight * noise).sum()


def replayer(module: torch.nn.Module, counter: dict[str, int], **config: int) -> SDCReplayer:
    scalars = {"ntokens_seen": ScalarStateAccessor(lambda: counter["n"], lambda v: counter.update(n=v))}
    return SDCReplayer(SDCReplayer.Config(**config), modules=[module], scalars=scalars, report=False)


def step_fn(module: Tiny, counter: dict[str, int], calls: list[int]) -> Callable[[], torch.Tensor]:
    def execute() -> torch.Tensor:
        calls.append(1)
        loss = module()
        loss.backward()
        counter["n"] += 5
        return loss

    return execute


class TestReplay:
    def test_a_checked_step_runs_reference_and_replays_and_keeps_only_the_last(self) -> None:
        module, counter, calls = Tiny(), {"n": 0}, []
        r = replayer(module, counter, num_replays=2)
        r.run_fwd_bwd(step_fn(module, counter, calls), step=1)
        assert len(calls) == 3
        assert module.counter.item() == 1 and counter["n"] == 5  # not 3 and 15: only the final run's effects
        assert module.weight.grad is not None

    def test_a_corrupted_gradient_in_the_replay_is_fatal_and_named(self) -> None:
        module, counter, calls = Tiny(), {"n": 0}, []
        r = replayer(module, counter, num_replays=1)
        inner = step_fn(module, counter, calls)

        def execute() -> torch.Tensor:
            loss = inner()
            if r.replay == 1:
                with torch.no_grad():
                    module.weight.grad[0] += 1
            return loss

        with pytest.raises(SDCReplayMismatch, match="gradient:0:weight") as raised:
            r.run_fwd_bwd(execute, step=4)
        assert (raised.value.step, raised.value.local_step, raised.value.replay, raised.value.rank) == (4, 1, 1, 0)
        assert r.steps_since_reset == 0

    @pytest.mark.parametrize(
        ("corrupt", "name"),
        [
            (lambda m, c: m.counter.add_(1), "buffer:0:counter"),
            (lambda m, c: torch.rand(1), "rng:cpu"),
            (lambda m, c: random.random(), "state:python_rng"),
            (lambda m, c: c.update(n=c["n"] + 1), "state:ntokens_seen"),
        ],
    )
    def test_state_that_is_not_restored_is_named(self, corrupt: Callable[..., object], name: str) -> None:
        module, counter, calls = Tiny(), {"n": 0}, []
        r = replayer(module, counter)
        inner = step_fn(module, counter, calls)

        def execute() -> torch.Tensor:
            loss = inner()
            if r.replay == 1:
                corrupt(module, counter)
            return loss

        with pytest.raises(SDCReplayMismatch) as raised:
            r.run_fwd_bwd(execute, step=1)
        assert raised.value.signature_mismatch == name

    def test_unregistered_scratch_state_does_not_matter(self) -> None:
        module, counter, calls, scratch = Tiny(), {"n": 0}, [], [0]
        r = replayer(module, counter)
        inner = step_fn(module, counter, calls)

        def execute() -> torch.Tensor:
            scratch[0] += 1
            return inner()

        r.run_fwd_bwd(execute, step=1)
        assert scratch == [2]

    @pytest.mark.parametrize(("num_steps", "checked"), [(1, 1), (3, 3), (-1, 5)])
    def test_the_schedule_checks_the_first_steps_and_rearms_on_reset(self, num_steps: int, checked: int) -> None:
        module, counter, calls = Tiny(), {"n": 0}, []
        r = replayer(module, counter, num_steps=num_steps)
        execute = step_fn(module, counter, calls)
        for step in range(5):
            r.run_fwd_bwd(execute, step)
            module.weight.grad = None
        assert len(calls) == 5 + checked
        calls.clear()
        r.reset_schedule()
        r.run_fwd_bwd(execute, 6)
        assert len(calls) == 2

    def test_pending_gradients_are_refused(self) -> None:
        module, counter = Tiny(), {"n": 0}
        module.weight.grad = torch.ones(2)
        with pytest.raises(RuntimeError, match="no pending gradients"):
            replayer(module, counter).run_fwd_bwd(step_fn(module, counter, []), 1)

    def test_config_validation(self) -> None:
        with pytest.raises(ValueError, match="num_steps must be -1 or at least 1"):
            SDCReplayer.Config(num_steps=0)
        with pytest.raises(ValueError, match="num_replays must be at least 1"):
            SDCReplayer.Config(num_replays=0)


class TestHashing:
    def test_empty_is_zero_and_complex_is_hashed_as_real(self) -> None:
        assert hash_tensor(torch.empty(0)) == 0
        z = torch.tensor([1 + 2j, 3 - 1j])
        assert hash_tensor(z) == hash_tensor(torch.view_as_real(z))

    @pytest.mark.parametrize("tensor", [torch.arange(7), torch.linspace(-1, 1, 9), torch.tensor([True, False])])
    def test_the_fallback_matches_torch_hash_tensor(self, tensor: torch.Tensor) -> None:
        """Where torch.hash_tensor is missing, the same XOR over 64-bit words is computed with numpy."""
        assert _xor_hash(tensor) == int(torch.hash_tensor(tensor).item())

    def test_rng_states_get_a_real_hash(self) -> None:
        """One draw more changes two position counters of the generator alike, which an XOR cancels out."""
        before = torch.get_rng_state()
        torch.rand(1)
        assert hash_tensor(before) != hash_tensor(torch.get_rng_state())


AGREEMENT = textwrap.dedent(
    """
    import os, sys, torch, torch.distributed as dist
    from client_shim.torch_sdc import SDCReplayer, SDCReplayMismatch
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    w = torch.nn.Parameter(torch.ones(3))
    r = SDCReplayer(SDCReplayer.Config(), modules=[torch.nn.ParameterList([w])], report=False)
    def execute():
        loss = (w * w).sum(); loss.backward()
        if rank == 0 and r.replay == 1:
            with torch.no_grad(): w.grad[1] += 1
        return loss
    try:
        r.run_fwd_bwd(execute, step=7)
        print(f"rank {rank} clean")
    except SDCReplayMismatch as exc:
        print(f"rank {rank} raised rank={exc.rank} {exc.signature_mismatch}")
    dist.destroy_process_group()
    """
)


def test_a_remote_mismatch_is_fatal_on_a_locally_matching_rank() -> None:
    """Rank 0's replay differs; rank 1's does not, and raises all the same, naming rank 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", AGREEMENT],
            env=dict(env, RANK=str(rank)),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    out = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    assert out == ["rank 0 raised rank=0 gradient:0:0", "rank 1 raised rank=0 gradient:0:0"]
