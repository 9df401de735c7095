"""TorchTitan's SDC replayer unit tests (tests/unit_tests/cpu/observability/test_sdc_replayer.py, with the
scalar-state cases of its test_sdc_replay.py), ported to client_shim.torch_sdc: TorchTitan's constructor
``(config, *, modules, device, scalar_state)``, its messages and behaviour, our code under test. Where a test
reached into TorchTitan's private helpers, it calls ours that do the same job (the state provider is the
replayer's _snapshot/_restore; the signature comparison is _Signature.differs). Plus what issue 12 found
missing: a buffer reassigned in forward, a ``None`` buffer that forward fills, the missing-hash refusal."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, distribute_tensor

from client_shim.torch_sdc import (
    ScalarStateAccessor,
    SDCReplayer,
    SDCReplayMismatch,
    _device_digest,
    _Signature,
)

CPU = torch.device("cpu")


class _BufferModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([2.0]))
        self.register_buffer("counter", torch.tensor([0.0]), persistent=False)
        self.register_buffer("optional", None, persistent=False)


class _Counter:
    def __init__(self, value: int = 0) -> None:
        self.value = value


def _scalar_state(counter: _Counter) -> dict[str, ScalarStateAccessor]:
    return {"ntokens_seen": ScalarStateAccessor(lambda: counter.value, lambda v: setattr(counter, "value", v))}


def _replayer(modules: list[torch.nn.Module], **config: int) -> SDCReplayer:
    return SDCReplayer(SDCReplayer.Config(**config), modules=modules, device=CPU)


def test_the_constructor_takes_torchtitans_arguments() -> None:
    counter = _Counter()
    replayer = SDCReplayer(
        SDCReplayer.Config(), modules=[_BufferModule()], device=torch.device("cpu"),
        scalar_state=_scalar_state(counter),
    )  # fmt: skip
    assert replayer.device == CPU and set(replayer.scalar_state) == {"ntokens_seen"}
    with pytest.raises(TypeError):
        SDCReplayer(SDCReplayer.Config(), modules=[], device=CPU, scalar_state={}, scalars={})


def test_state_provider_restores_rng_buffers_and_gradients() -> None:
    module = _BufferModule()
    module.weight.grad = torch.zeros(1)
    replayer = _replayer([module])

    random.seed(7)
    torch.manual_seed(11)
    state = replayer._snapshot()
    expected_python = random.random()
    expected_torch = torch.rand(1)

    module.counter.add_(5)
    module.optional = torch.ones(1)
    module.weight.grad.add_(6)
    random.random()
    torch.rand(1)

    replayer._restore(state)

    torch.testing.assert_close(module.counter, torch.zeros(1))
    assert module.optional is None
    torch.testing.assert_close(module.weight.grad, torch.zeros(1))
    assert random.random() == expected_python
    torch.testing.assert_close(torch.rand(1), expected_torch)


def test_replay_commits_only_final_candidate() -> None:
    module, counter = _BufferModule(), _Counter(0)
    replayer = SDCReplayer(
        SDCReplayer.Config(num_replays=2), modules=[module], device=CPU, scalar_state=_scalar_state(counter)
    )
    calls = 0

    def execute() -> torch.Tensor:
        nonlocal calls
        calls += 1
        module.counter.add_(1)
        counter.value += 5
        loss = module.weight.square().sum()
        loss.backward()
        return loss

    loss = replayer.run_fwd_bwd(execute, step=3)

    assert calls == 3
    torch.testing.assert_close(loss, torch.tensor(4.0))
    torch.testing.assert_close(module.counter, torch.ones(1))
    torch.testing.assert_close(module.weight.grad, torch.tensor([4.0]))
    assert counter.value == 5


def test_replay_wraps_compiled_forward_backward() -> None:
    module = torch.nn.Linear(4, 2)
    compiled = torch.compile(module, backend="eager")
    replayer = _replayer([module])

    def execute() -> torch.Tensor:
        loss = compiled(torch.ones(3, 4)).sum()
        loss.backward()
        return loss

    replayer.run_fwd_bwd(execute, step=1)

    assert module.weight.grad is not None


def test_replay_ignores_unregistered_scratch_state() -> None:
    module = _BufferModule()
    replayer = _replayer([module])
    scratch_invocations = 0

    def execute() -> torch.Tensor:
        nonlocal scratch_invocations
        scratch_invocations += 1
        loss = module.weight.square().sum()
        loss.backward()
        return loss

    replayer.run_fwd_bwd(execute, step=1)

    assert scratch_invocations == 2


def test_replay_mismatch_is_fatal() -> None:
    module = _BufferModule()
    replayer = _replayer([module])
    calls = 0

    def execute() -> torch.Tensor:
        nonlocal calls
        calls += 1
        loss = module.weight.square().sum()
        loss.backward()
        if calls == 2:
            module.weight.grad.add_(1)
        return loss

    with pytest.raises(SDCReplayMismatch, match="gradient:0:weight"):
        replayer.run_fwd_bwd(execute, step=9)
    assert replayer.steps_since_reset == 0


@pytest.mark.parametrize(
    ("corruption", "expected"),
    (
        ("buffer", "buffer:0:counter"),
        ("cpu_rng", "rng:cpu"),
        ("python_rng", "state:python_rng"),
        ("counter", "state:ntokens_seen"),
    ),
)
def test_replay_detects_semantic_state_mismatch(corruption: str, expected: str) -> None:
    module, counter = _BufferModule(), _Counter(0)
    replayer = SDCReplayer(SDCReplayer.Config(), modules=[module], device=CPU, scalar_state=_scalar_state(counter))
    calls = 0

    def execute() -> torch.Tensor:
        nonlocal calls
        calls += 1
        loss = module.weight.square().sum()
        loss.backward()
        if calls == 2:
            if corruption == "buffer":
                module.counter.add_(1)
            elif corruption == "cpu_rng":
                torch.rand(1)
            elif corruption == "python_rng":
                random.random()
            else:
                counter.value += 1
        return loss

    with pytest.raises(SDCReplayMismatch, match=expected):
        replayer.run_fwd_bwd(execute, step=9)


@pytest.mark.parametrize(
    ("num_steps", "expected_checked"),
    [(1, [True, False, False, False]), (3, [True, True, True, False]), (-1, [True, True, True, True])],
)
def test_schedule_checks_first_num_steps_and_rearms_on_reset(num_steps: int, expected_checked: list[bool]) -> None:
    replayer = _replayer([], num_steps=num_steps)
    calls = 0

    def execute() -> torch.Tensor:
        nonlocal calls
        calls += 1
        return torch.tensor(1.0)

    checked = []
    for index in range(len(expected_checked)):
        calls_before = calls
        replayer.run_fwd_bwd(execute, step=index)
        checked.append(calls - calls_before == 2)  # a checked step executes twice (reference plus one replay)
        assert replayer.steps_since_reset == index + 1
    assert checked == expected_checked

    replayer.reset_schedule()
    assert replayer.steps_since_reset == 0
    calls_before = calls
    replayer.run_fwd_bwd(execute, step=99)
    assert calls - calls_before == 2


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="num_steps"):
        SDCReplayer.Config(num_steps=0)
    with pytest.raises(ValueError, match="num_replays"):
        SDCReplayer.Config(num_replays=0)


def test_empty_tensor_hash_uses_zero_sentinel() -> None:
    digest = _device_digest(torch.empty(0), fallback=False)

    assert digest.dtype == torch.uint64
    assert digest.item() == 0


def test_complex_tensor_hash_uses_real_view() -> None:
    value = torch.tensor([1 + 2j, 3 + 4j], dtype=torch.complex64)

    digest = _device_digest(value, fallback=False)
    expected = torch.hash_tensor(torch.view_as_real(value))

    torch.testing.assert_close(digest, expected)
    assert digest.dtype == torch.uint64


def _signature(digests: list[int]) -> _Signature:
    sig = _Signature()
    for name, digest in zip(("loss", "gradient:0:weight"), digests, strict=True):
        sig.add_device(name, repr(((), "torch.float32", "cpu")), torch.tensor(digest, dtype=torch.uint64))
    sig.seal(CPU)
    return sig


def test_signature_digest_comparison_is_batched() -> None:
    reference, candidate = _signature([1, 2]), _signature([1, 3])

    with patch("client_shim.torch_sdc.torch.equal") as equal:
        mismatch = reference.differs(candidate)

    assert bool(mismatch.item())
    equal.assert_not_called()
    assert not bool(reference.differs(_signature([1, 2])).item())


@pytest.fixture
def one_rank(tmp_path: Any) -> Iterator[None]:
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_state_provider_restores_dtensor_local_shards(one_rank: None) -> None:
    mesh = init_device_mesh("cpu", (1,))
    module = _BufferModule()
    module.weight = torch.nn.Parameter(distribute_tensor(module.weight.detach(), mesh, [Replicate()]))
    module.counter = distribute_tensor(module.counter, mesh, [Replicate()])
    module.weight.grad = distribute_tensor(torch.zeros(1), mesh, [Replicate()])
    replayer = _replayer([module])
    state = replayer._snapshot()

    module.counter.to_local().add_(5)
    module.weight.grad.to_local().add_(6)
    replayer._restore(state)

    torch.testing.assert_close(module.counter.to_local(), torch.zeros(1))
    torch.testing.assert_close(module.weight.grad.to_local(), torch.zeros(1))


def test_a_dtensor_step_is_signed_by_its_local_shards(one_rank: None) -> None:
    """Hashing a DTensor itself raises (no sharding strategy for aten.hash_tensor); its shard is signed."""
    mesh = init_device_mesh("cpu", (1,))
    module = _BufferModule()
    module.weight = torch.nn.Parameter(distribute_tensor(module.weight.detach(), mesh, [Replicate()]))
    module.counter = distribute_tensor(module.counter, mesh, [Replicate()])
    replayer = _replayer([module])

    def execute() -> torch.Tensor:
        loss = module.weight.square().sum()
        loss.backward()
        return loss

    replayer.run_fwd_bwd(execute, step=1)
    assert module.weight.grad is not None


def test_remote_mismatch_is_fatal_on_a_locally_matching_rank() -> None:
    """torch.distributed stubbed as in TorchTitan's test (tests/test_torch_sdc.py runs it on two real ranks)."""
    replayer = _replayer([])

    def report_global_mismatch(tensor: torch.Tensor, **kwargs: Any) -> None:
        tensor.fill_(1)

    def gather_remote_details(output: list[Any], local_details: Any, **kwargs: Any) -> None:
        output[:] = [(0, "loss"), local_details]

    signature = _Signature()
    signature.seal(CPU)
    with (
        patch("torch.distributed.is_initialized", return_value=True),
        patch("torch.distributed.get_rank", return_value=1),
        patch("torch.distributed.get_world_size", return_value=2),
        patch("torch.distributed.all_reduce", side_effect=report_global_mismatch),
        patch("torch.distributed.all_gather_object", side_effect=gather_remote_details),
        pytest.raises(SDCReplayMismatch, match="rank=0"),
    ):
        no = torch.tensor(False)
        replayer._agree(2, 1, [signature, signature], [no, no])


# --- what issue 12 found missing ---


class _Seen(torch.nn.Module):
    """A buffer rebound in forward and an optional one that forward fills."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
        self.register_buffer("seen", torch.zeros(()))
        self.register_buffer("cache", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = self.seen + x.shape[0]  # a new tensor object each call
        if self.cache is None:
            self.cache = x.detach().sum(0)
        return (self.weight * x).sum()


def test_a_reassigned_buffer_and_a_filled_none_buffer_are_restored_by_identity() -> None:
    module = _Seen()
    original_seen = module.seen
    replayer = SDCReplayer(SDCReplayer.Config(num_steps=-1, num_replays=2), modules=[module], device=CPU)
    x = torch.ones(3, 2)

    def execute() -> torch.Tensor:
        loss = module(x)
        loss.backward()
        return loss

    state = replayer._snapshot()
    execute()
    assert module.seen is not original_seen and module.cache is not None
    replayer._restore(state)
    assert module.seen is original_seen and float(module.seen) == 0.0
    assert module.cache is None
    module.weight.grad = None

    for step in range(1, 4):  # no false alarm, and only the last run's effects stay
        replayer.run_fwd_bwd(execute, step=step)
        module.weight.grad = None
        assert float(module.seen) == 3.0 * step


def test_without_torch_hash_tensor_the_replayer_refuses_unless_the_fallback_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(torch, "hash_tensor")
    with pytest.raises(RuntimeError, match=r"SDC replay requires torch\.hash_tensor\."):
        _replayer([_BufferModule()])
    module = _BufferModule()
    replayer = SDCReplayer(SDCReplayer.Config(), modules=[module], device=CPU, hash_fallback=True)

    def execute() -> torch.Tensor:
        loss = module.weight.square().sum()
        loss.backward()
        if replayer.replay == 1:
            module.weight.grad.add_(1)
        return loss

    with pytest.raises(SDCReplayMismatch, match="gradient:0:weight"):
        replayer.run_fwd_bwd(execute, step=1)


def test_one_host_synchronisation_per_checked_step() -> None:
    module = torch.nn.Linear(4, 2)
    replayer = SDCReplayer(SDCReplayer.Config(num_steps=2, num_replays=3), modules=[module], device=CPU)

    def execute() -> torch.Tensor:
        loss = module(torch.ones(3, 4)).sum()
        loss.backward()
        return loss

    for step in range(1, 5):
        replayer.run_fwd_bwd(execute, step=step)
        module.zero_grad()
    assert (replayer.checked_steps, replayer.host_syncs) == (2, 2)
