"""Silent-data-corruption replay for PyTorch training loops, after TorchTitan's SDC replayer (peers.md §1),
reporting to sanitizerd's sdccheck.

    replayer = SDCReplayer(SDCReplayer.Config(num_steps=-1, num_replays=1), modules=[model],
                           scalars={"ntokens_seen": ScalarStateAccessor(get, set)}, replica_group="dp")
    for step in range(1, steps + 1):
        loss = replayer.run_fwd_bwd(lambda: forward_backward(batch), step)   # raises SDCReplayMismatch
        optimizer.step(); optimizer.zero_grad()

A checked step snapshots Python, CPU and accelerator RNG, the registered buffers and the caller's scalars, runs
the forward/backward (the reference), then restores and re-runs it ``num_replays`` times; each run's signature
(loss, RNG states, buffers, gradients, state) must equal the reference's. Gradients are not snapshotted: the
step must start with none pending (``None`` or zeros), as in TorchTitan. Only the last run's effects stay.

Every signature goes to the daemon when the process is attached (``client_shim.attach``), where sdccheck sees
every rank; the check itself runs here too, so it works with no daemon. Ranks agree through torch.distributed
(an all-reduce of the mismatch flag, then an all-gather of who and what), and **every** rank raises
``SDCReplayMismatch`` naming the lowest mismatching rank. With ``replica_group`` set, the gradients after the
data-parallel all-reduce are also sent for sdccheck's cross-replica check.

Hashing uses ``torch.hash_tensor`` (XOR of the elements as 64-bit words; order-insensitive, so some
permutations collide). RNG states (CPU byte tensors) get a real hash (BLAKE2b) instead, unlike TorchTitan:
the XOR of a generator state's bytes keeps 8 bits of it, and misses a generator that drew one number more.
Where ``torch.hash_tensor`` is missing, the same XOR is computed with numpy.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from client_shim import attach
from client_shim.transport import ClientError
from sanitizerd.protocol.messages import SignatureEntry
from sanitizerd.protocol.replay import first_difference


class SDCReplayMismatch(RuntimeError):
    def __init__(self, step: int, local_step: int, replay: int, rank: int, signature_mismatch: str) -> None:
        super().__init__(
            f"SDC replay mismatch: step={step}, local_step={local_step}, replay={replay}, rank={rank}, "
            f"signature={signature_mismatch!r}"
        )
        self.step, self.local_step, self.replay = step, local_step, replay
        self.rank, self.signature_mismatch = rank, signature_mismatch


class ScalarStateAccessor(NamedTuple):
    """A caller-owned scalar (a token counter) that the replay restores and signs."""

    get: Callable[[], Any]
    set: Callable[[Any], None]


def hash_tensor(tensor: torch.Tensor) -> int:
    """The tensor's uint64 digest: ``torch.hash_tensor`` where it exists, the same XOR reduction otherwise."""
    local = tensor.detach()
    if local.numel() == 0:
        return 0
    if local.is_complex():
        local = torch.view_as_real(local)  # RoPE caches
    if local.dtype == torch.uint8 and local.device.type == "cpu":
        # RNG states are CPU byte tensors. An XOR of their bytes keeps 8 bits of a 5 KB state, and even as
        # 64-bit words the generator's two position counters move together and cancel out. They are small:
        # hash them properly.
        return _state_digest(local.contiguous().numpy().tobytes())
    if hasattr(torch, "hash_tensor"):
        return int(torch.hash_tensor(local).item()) & 0xFFFFFFFFFFFFFFFF
    return _xor_hash(local)


def _xor_hash(tensor: torch.Tensor) -> int:
    """torch.hash_tensor's mode 0 without it: each element widened to 64 bits (float to float64, integer to
    int64), its bits taken as uint64, all XORed."""
    wide = tensor.to(torch.float64 if tensor.is_floating_point() else torch.int64).cpu().contiguous()
    return int(np.bitwise_xor.reduce(wide.numpy().view(np.uint64).ravel()))


def _state_digest(value: object) -> int:
    data = value if isinstance(value, bytes) else repr(value).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _schema(tensor: torch.Tensor) -> str:
    return repr((tuple(tensor.shape), str(tensor.dtype), str(tensor.device)))


def _accelerator() -> Any | None:
    """The accelerator module with RNG state (torch.npu on Ascend, torch.cuda elsewhere), if one is in use."""
    for name in ("npu", "cuda"):
        module = getattr(torch, name, None)
        if module is not None and hasattr(module, "is_available") and module.is_available():
            return module
    return None


class SDCReplayer:
    @dataclass(kw_only=True)
    class Config:
        num_steps: int = 1  # steps checked from the start and after every reset_schedule(); -1: every step
        num_replays: int = 1

        def __post_init__(self) -> None:
            if self.num_steps != -1 and self.num_steps < 1:
                raise ValueError("sdc_replayer.num_steps must be -1 or at least 1.")
            if self.num_replays < 1:
                raise ValueError("sdc_replayer.num_replays must be at least 1.")

    def __init__(
        self,
        config: SDCReplayer.Config,
        *,
        modules: Sequence[torch.nn.Module],
        scalars: Mapping[str, ScalarStateAccessor] | None = None,
        replica_group: str = "",
        replicas: int = 0,
        report: bool = True,
    ) -> None:
        self.config = config
        self.modules = list(modules)
        self.scalars = dict(scalars or {})
        self.replica_group = replica_group
        self.replicas = replicas or (dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1)
        self.report = report
        self._steps_since_reset = 0
        self.replay = 0  # the run in progress: 0 the reference, 1.. the replays (for tests and fault injection)

    # --- schedule ---
    @property
    def steps_since_reset(self) -> int:
        return self._steps_since_reset

    def reset_schedule(self) -> None:
        """Check the next ``num_steps`` steps again (call it after loading a checkpoint)."""
        self._steps_since_reset = 0

    def run_fwd_bwd(self, execute: Callable[[], torch.Tensor], step: int) -> torch.Tensor:
        """Run one forward/backward; on a checked step, (1 + num_replays) of them, compared. Unchecked steps cost
        nothing but the call."""
        if self.config.num_steps == -1 or self._steps_since_reset < self.config.num_steps:
            loss = self._run_checked(execute, step)
        else:
            loss = execute()
        self._steps_since_reset += 1
        return loss

    def _run_checked(self, execute: Callable[[], torch.Tensor], step: int) -> torch.Tensor:
        local_step = self._steps_since_reset + 1
        baseline = self._snapshot()
        self.replay = 0
        loss = execute()
        reference = self._signature(loss)
        self._send(step, local_step, 0, reference)
        for replay in range(1, self.config.num_replays + 1):
            self._restore(baseline)
            self.replay = replay
            loss = execute()
            candidate = self._signature(loss)
            self._send(step, local_step, replay, candidate)
            self._raise_if_mismatch(step, local_step, replay, first_difference(reference, candidate))
        self.replay = 0
        if self.replica_group:
            gradients = [e for e in self._signature(loss) if e.name.startswith("gradient:")]
            self._send(step, local_step, 0, gradients, phase="post_all_reduce")
        return loss

    # --- state ---
    def _parameters(self) -> list[tuple[int, str, torch.nn.Parameter]]:
        seen: set[int] = set()
        out = []
        for i, module in enumerate(self.modules):
            for name, param in module.named_parameters():
                if id(param) not in seen:  # shared parameters once
                    seen.add(id(param))
                    out.append((i, name, param))
        return out

    def _snapshot(self) -> dict[str, Any]:
        accelerator = _accelerator()
        grads = {}
        for _, _, param in self._parameters():
            if param.grad is not None and bool(param.grad.detach().ne(0).any()):
                raise RuntimeError(
                    "SDC replay needs a step to start with no pending gradients (None or zeros): "
                    "call optimizer.zero_grad() before it"
                )
            grads[id(param)] = param.grad
        return {
            "python": random.getstate(),
            "cpu": torch.get_rng_state(),
            "accelerator": accelerator.get_rng_state_all() if accelerator is not None else [],
            "buffers": [
                [(buf, None if buf is None else buf.detach().clone()) for _, buf in m.named_buffers()]
                for m in self.modules
            ],
            "grads": grads,
            "scalars": {name: accessor.get() for name, accessor in self.scalars.items()},
        }

    def _restore(self, baseline: dict[str, Any]) -> None:
        random.setstate(baseline["python"])
        torch.set_rng_state(baseline["cpu"])
        accelerator = _accelerator()
        if accelerator is not None:
            accelerator.set_rng_state_all(baseline["accelerator"])
        with torch.no_grad():
            for module_buffers in baseline["buffers"]:
                for buf, saved in module_buffers:
                    if buf is not None and saved is not None:
                        buf.copy_(saved)
        for _, _, param in self._parameters():
            entry = baseline["grads"].get(id(param))
            if entry is None:
                param.grad = None
            else:  # re-attach the entry tensor, zeroed in place, so its storage stays where it was
                param.grad = entry
                entry.detach().zero_()
        for name, accessor in self.scalars.items():
            accessor.set(baseline["scalars"][name])

    def _signature(self, loss: torch.Tensor) -> list[SignatureEntry]:
        entries = [SignatureEntry(name="loss", schema=_schema(loss), digest=hash_tensor(loss))]
        cpu = torch.get_rng_state()
        entries.append(SignatureEntry(name="rng:cpu", schema=_schema(cpu), digest=hash_tensor(cpu)))
        accelerator = _accelerator()
        for i, state in enumerate(accelerator.get_rng_state_all() if accelerator is not None else []):
            entries.append(
                SignatureEntry(name=f"rng:accelerator:{i}", schema=_schema(state), digest=hash_tensor(state))
            )
        for i, module in enumerate(self.modules):
            for name, buf in module.named_buffers():
                entries.append(_tensor_entry(f"buffer:{i}:{name}", buf))
        for i, name, param in self._parameters():
            entries.append(_tensor_entry(f"gradient:{i}:{name}", param.grad))
        entries.append(SignatureEntry(name="state:python_rng", schema="tuple", digest=_state_digest(random.getstate())))
        for name, accessor in self.scalars.items():
            value = accessor.get()
            entries.append(
                SignatureEntry(name=f"state:{name}", schema=type(value).__name__, digest=_state_digest(value))
            )
        return entries

    # --- agreement and reporting ---
    def _raise_if_mismatch(self, step: int, local_step: int, replay: int, mismatch: str | None) -> None:
        """Every rank raises when any rank mismatched, naming the lowest mismatching rank (TorchTitan's rule)."""
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if dist.is_available() and dist.is_initialized():
            flag = torch.tensor([int(mismatch is not None)], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if not int(flag.item()):
                return
            gathered: list[tuple[int, str] | None] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, (rank, mismatch) if mismatch is not None else None)
            first = next(item for item in gathered if item is not None)
            raise SDCReplayMismatch(step, local_step, replay, first[0], first[1])
        if mismatch is not None:
            raise SDCReplayMismatch(step, local_step, replay, rank, mismatch)

    def _send(
        self, step: int, local_step: int, replay: int, entries: list[SignatureEntry], *, phase: str = "replay"
    ) -> None:
        if not self.report:
            return
        client = attach.client()
        if client is None:
            return
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else -1
        try:
            client.signature(
                step, [(e.name, e.schema, e.digest) for e in entries], local_step=local_step, replay=replay,
                rank=rank, phase=phase, replica_group=self.replica_group, replicas=self.replicas,
            )  # fmt: skip
        except (ClientError, OSError) as exc:
            attach.detach(str(exc))


def _tensor_entry(name: str, tensor: torch.Tensor | None) -> SignatureEntry:
    if tensor is None:
        return SignatureEntry(name=f"{name}:none", schema=repr(((), "none", "none")), digest=0)
    return SignatureEntry(name=name, schema=_schema(tensor), digest=hash_tensor(tensor))
