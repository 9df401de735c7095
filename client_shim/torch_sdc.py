"""Silent-data-corruption replay for PyTorch training loops, after TorchTitan's SDC replayer (peers.md §1),
reporting to sanitizerd's sdccheck. TorchTitan's constructor works as is:

    replayer = SDCReplayer(SDCReplayer.Config(num_steps=-1, num_replays=1), modules=[model], device=device,
                           scalar_state={"ntokens_seen": ScalarStateAccessor(get, set)}, replica_group="dp")
    for step in range(1, steps + 1):
        loss = replayer.run_fwd_bwd(lambda: forward_backward(batch), step=step)   # raises SDCReplayMismatch
        optimizer.step(); optimizer.zero_grad()

A checked step snapshots Python, CPU and accelerator RNG, the registered buffers (each by identity: a buffer
reassigned in forward gets its original tensor back, a ``None`` buffer is ``None`` again) and the caller's
scalars, runs the forward/backward (the reference), then restores and re-runs it ``num_replays`` times; each
run's signature (loss, RNG states, buffers, gradients, state) must equal the reference's. Gradients are not
snapshotted: the step must start with none pending (``None`` or zeros), as in TorchTitan. Only the last run's
effects stay. DTensors (FSDP2, tensor parallelism) are signed and restored by their local shard.

Digests stay on the device: each run's tensor digests are one stacked tensor, compared with the reference's
in one operation; the flags of every replay (and of the pending-gradient check) are all-reduced in one
collective on the process group's device, and the checked step reads the result back to the host once
(``host_syncs`` counts these reads). Every signature goes to the daemon when the process is attached
(``client_shim.attach``), where sdccheck sees every rank; the check itself runs here too, so it works with no
daemon. When any rank mismatched, **every** rank raises ``SDCReplayMismatch`` naming the lowest mismatching
rank. With ``replica_group`` set, the gradients after the data-parallel all-reduce are also sent for
sdccheck's cross-replica check.

Hashing uses ``torch.hash_tensor`` (XOR of the elements as 64-bit words; order-insensitive, so some
permutations collide); without it the replayer refuses to start, as TorchTitan's does, unless
``hash_fallback=True`` asks for the same XOR computed with numpy (on the host: slow on an accelerator). RNG
states (CPU byte tensors, on the host anyway) get a real hash (BLAKE2b) instead, unlike TorchTitan: the XOR of
a generator state's bytes keeps 8 bits of it, and misses a generator that drew one number more.
"""

from __future__ import annotations

import hashlib
import random
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from client_shim import attach
from client_shim.transport import ClientError
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.messages import SignatureEntry
from sanitizerd_protocol.replay import first_difference

_MASK = 0xFFFFFFFFFFFFFFFF


class SDCReplayMismatch(RuntimeError):
    def __init__(self, step: int, local_step: int, replay: int, rank: int, signature_mismatch: str | None) -> None:
        super().__init__(
            "SDC replay mismatch: "
            f"step={step}, local_step={local_step}, replay={replay}, rank={rank}, signature={signature_mismatch!r}"
        )
        self.step, self.local_step, self.replay = step, local_step, replay
        self.rank, self.signature_mismatch = rank, signature_mismatch


class SDCReplicaMismatch(RuntimeError):
    """Raised on every rank of the replica group when its replicas' gradients after the data-parallel
    all-reduce differ (``on_replica_mismatch="raise"``). ``ranks`` are the replicas outside the majority; with
    no majority (two replicas, or an even split) every replica is named, none blamed."""

    def __init__(self, step: int, ranks: list[int], majority: bool) -> None:
        who = (
            f"ranks {ranks} disagree with the other replicas"
            if majority
            else f"replicas {ranks} disagree and none has a majority"
        )
        super().__init__(f"SDC replica mismatch: step={step}, {who} after the gradient all-reduce")
        self.step, self.ranks, self.majority = step, ranks, majority


class ScalarStateAccessor(NamedTuple):
    """A caller-owned scalar (a token counter) that the replay restores and signs."""

    get: Callable[[], Any]
    set: Callable[[Any], None]


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (hashing a DTensor has no sharding strategy), any other tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def hash_tensor(tensor: torch.Tensor) -> int:
    """The tensor's uint64 digest as a Python int (reads it back to the host: tests and tools only)."""
    local = local_tensor(tensor).detach()
    if local.dtype == torch.uint8 and local.device.type == "cpu":
        return _rng_digest(local)
    return int(_device_digest(local, fallback=not hasattr(torch, "hash_tensor")).item()) & _MASK


def _device_digest(local: torch.Tensor, *, fallback: bool) -> torch.Tensor:
    """A 0-d uint64 digest on the tensor's own device, no host synchronisation (unless ``fallback``)."""
    if local.numel() == 0:
        return torch.zeros((), dtype=torch.uint64, device=local.device)
    if local.is_complex():
        local = torch.view_as_real(local)  # RoPE caches
    if fallback:
        return torch.tensor(_xor_hash(local), dtype=torch.uint64, device=local.device)
    return torch.hash_tensor(local)


def _xor_hash(tensor: torch.Tensor) -> int:
    """torch.hash_tensor's mode 0 without it: each element widened to 64 bits (float to float64, integer to
    int64), its bits taken as uint64, all XORed."""
    wide = tensor.to(torch.float64 if tensor.is_floating_point() else torch.int64).cpu().contiguous()
    return int(np.bitwise_xor.reduce(wide.numpy().view(np.uint64).ravel()))


def _rng_digest(state: torch.Tensor) -> int:
    # RNG states are CPU byte tensors. An XOR of their bytes keeps 8 bits of a 5 KB state, and even as 64-bit
    # words the generator's two position counters move together and cancel out. They are small: hash them.
    return _state_digest(state.contiguous().numpy().tobytes())


def _state_digest(value: object) -> int:
    data = value if isinstance(value, bytes) else repr(value).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _schema(tensor: torch.Tensor) -> str:
    return repr((tuple(tensor.shape), str(tensor.dtype), str(tensor.device)))


_NONE_SCHEMA = repr(((), "none", "none"))


def _classes(table: torch.Tensor) -> torch.Tensor:
    """For each replica (a row of digests), the index of the first replica holding the same row: all zeros when
    they agree; equal values name the sides of a split. On the device."""
    same = (table.unsqueeze(0) == table.unsqueeze(1)).all(-1)
    return same.to(torch.int64).argmax(1)  # argmax takes the first maximum: the first equal row


def _replicated(module: torch.nn.Module) -> Any | None:
    """The DistributedDataParallel that composable ``replicate`` made for ``module`` (at its first forward), if any."""
    try:
        from torch.distributed._composable.replicate import replicate
    except ImportError:
        return None
    state = replicate.state(module)
    ref = getattr(state, "_ddp_weakref", None) if state is not None else None
    return ref() if ref is not None else None


def _accelerator() -> Any | None:
    """The accelerator module with RNG state (torch.npu on Ascend, torch.cuda elsewhere), if one is in use."""
    for name in ("npu", "cuda"):
        module = getattr(torch, name, None)
        if module is not None and hasattr(module, "is_available") and module.is_available():
            return module
    return None


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def group_device(group: Any = None) -> torch.device:
    """The device the process group's collectives take: the CPU where a backend serves it (gloo), else the
    device its backend serves (``cuda`` for NCCL, ``npu`` for HCCL); the CPU outside torch.distributed."""
    if not _distributed():
        return torch.device("cpu")
    from torch.distributed import distributed_c10d as c10d

    pg = group or c10d._get_default_group()
    devices = getattr(pg, "_device_types", None)  # the devices its backends are registered for, in order
    if devices:
        kinds = [d.type if isinstance(d, torch.device) else str(d) for d in devices]
        kind = "cpu" if "cpu" in kinds else kinds[0]
        if kind == "cpu":
            return torch.device("cpu")
        module = getattr(torch, kind, None)
        if module is not None and hasattr(module, "is_available") and module.is_available():
            return torch.device(kind, module.current_device())
        return torch.device(kind)  # a backend for a device this build lacks: hashing there will say so
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return c10d._get_pg_default_device(pg)


@dataclass
class _Buffer:
    module: torch.nn.Module
    name: str
    original: torch.Tensor | None
    value: torch.Tensor | None


@dataclass
class _Snapshot:
    python: Any
    cpu: torch.Tensor
    accelerator: list[torch.Tensor]
    buffers: list[_Buffer]
    grads: list[tuple[torch.nn.Parameter, torch.Tensor | None]]
    scalars: dict[str, Any]
    pending: torch.Tensor  # 0-d bool on the device: some entry gradient was not zero


@dataclass
class _Signature:
    """One run's signature: names and schemas in order, host digests where the value lives on the host (RNG
    states, absent tensors, Python state), the rest one stacked uint64 tensor on the device."""

    names: list[str] = field(default_factory=list)
    schemas: list[str] = field(default_factory=list)
    host: list[int | None] = field(default_factory=list)  # None: the next row of `device`
    gradient_rows: list[int] = field(default_factory=list)  # the rows of `device` that are gradients
    device_rows: list[torch.Tensor] = field(default_factory=list)
    device: torch.Tensor | None = None

    def add_host(self, name: str, schema: str, digest: int) -> None:
        self.names.append(name), self.schemas.append(schema), self.host.append(digest & _MASK)

    def add_device(self, name: str, schema: str, digest: torch.Tensor) -> None:
        if name.startswith("gradient:"):
            self.gradient_rows.append(len(self.device_rows))
        self.names.append(name), self.schemas.append(schema), self.host.append(None)
        self.device_rows.append(digest)

    def seal(self, device: torch.device) -> None:
        rows = [d.to(device) for d in self.device_rows]
        self.device = torch.stack(rows) if rows else torch.zeros(0, dtype=torch.uint64, device=device)
        self.device_rows = []

    def differs(self, other: _Signature) -> torch.Tensor:
        """One device-side comparison (no host synchronisation) after a host comparison of what is there."""
        assert self.device is not None and other.device is not None
        if (self.names, self.schemas, self.host) != (other.names, other.schemas, other.host):
            return torch.ones((), dtype=torch.bool, device=self.device.device)
        return torch.ne(self.device, other.device).any()

    def entries(self, device_digests: list[int]) -> list[SignatureEntry]:
        rows = iter(device_digests)
        return [
            SignatureEntry(name=n, schema=s, digest=(next(rows) & _MASK) if h is None else h)
            for n, s, h in zip(self.names, self.schemas, self.host, strict=True)
        ]


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
        modules: Iterable[torch.nn.Module],
        device: torch.device | str | None = None,
        scalar_state: Mapping[str, ScalarStateAccessor] | None = None,
        scalars: Mapping[str, ScalarStateAccessor] | None = None,  # this project's older name of scalar_state
        replica_group: str = "",
        replicas: int = 0,
        report: bool = True,
        hash_fallback: bool = False,
        on_replica_mismatch: Literal["raise", "report"] = "raise",
        group: Any = None,
    ) -> None:
        if scalar_state is not None and scalars is not None:
            raise TypeError("give scalar_state or scalars, not both")
        if on_replica_mismatch not in ("raise", "report"):
            raise ValueError(f"on_replica_mismatch must be 'raise' or 'report', not {on_replica_mismatch!r}")
        self.config = config
        self.modules = list(dict.fromkeys(modules))
        self.group = group
        # Collectives go where the backend serves them: a CPU flag on NCCL/HCCL has no backend at all.
        self.device = torch.device(device) if device is not None else group_device(group)
        self.scalars = dict(scalar_state if scalar_state is not None else scalars or {})
        self.scalar_state = self.scalars
        self.replica_group = replica_group
        self.replicas = replicas or (dist.get_world_size(group) if _distributed() else 1)
        self.report = report
        self.on_replica_mismatch = on_replica_mismatch
        self._fallback = self._validate_hash_support(self.device, hash_fallback)
        self._steps_since_reset = 0
        self.replay = 0  # the run in progress: 0 the reference, 1.. the replays (for tests and fault injection)
        self.host_syncs = 0  # device-to-host reads this replayer made (one per checked step)
        self.replica_mismatches: list[SDCReplicaMismatch] = []  # what on_replica_mismatch="report" saw
        self.checked_steps = 0

    @staticmethod
    def _validate_hash_support(device: torch.device, fallback: bool) -> bool:
        """False when torch.hash_tensor serves ``device``; True when the numpy fallback was asked for."""
        if hasattr(torch, "hash_tensor"):
            try:
                torch.hash_tensor(torch.arange(3, dtype=torch.int64, device=device))
                return False
            except (RuntimeError, TypeError, NotImplementedError) as error:
                if not fallback:
                    raise RuntimeError("SDC replay requires torch.hash_tensor.") from error
                return True
        if not fallback:
            raise RuntimeError("SDC replay requires torch.hash_tensor.")
        return True

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
        local_step = self._steps_since_reset
        if self.config.num_steps == -1 or local_step < self.config.num_steps:
            loss = self._run_checked(execute, step, local_step + 1)
        else:
            loss = execute()
        self._steps_since_reset = local_step + 1
        return loss

    def _run_checked(self, execute: Callable[[], torch.Tensor], step: int, local_step: int) -> torch.Tensor:
        self.checked_steps += 1
        baseline = self._snapshot()
        self.replay = 0
        loss = execute()
        reference = self._signature(loss)
        # After the reference run: DDP made lazily by its first forward (composable replicate) is there too.
        rebuilding = self._ddp_before_bucket_rebuild()
        runs, flags = [reference], [baseline.pending]
        replay = 1
        while replay <= self.config.num_replays:
            self._restore(baseline)
            self.replay = replay
            loss = execute()
            candidate = self._signature(loss)
            if rebuilding and any(ddp._has_rebuilt_buckets for ddp in rebuilding):
                # DDP regroups its gradient buckets by the order the first backward produced them, in the
                # forward after it: this run's all-reduce summed in other chunks than the reference's, so
                # its gradients may differ in the last bit with no corruption. It becomes the reference.
                warnings.warn(
                    f"SDC replay, step {step}: DistributedDataParallel rebuilt its gradient buckets after the "
                    "reference run; the replay is taken as the reference and the step checked again",
                    RuntimeWarning,
                    stacklevel=3,
                )
                rebuilding = []
                reference = candidate
                runs = [reference]
                continue
            runs.append(candidate)
            flags.append(reference.differs(candidate))
            replay += 1
        self.replay = 0
        self._agree(step, local_step, runs, flags)
        return loss

    def _ddp_before_bucket_rebuild(self) -> list[Any]:
        """The data-parallel reducers of the modules whose buckets are still the initial ones: each
        DistributedDataParallel wrapper among them, and the one composable ``replicate`` keeps for a module (as
        TorchTitan's DDP does). A DDP wrapper around the modules that is not one of them is not seen: give it."""
        from torch.nn.parallel import DistributedDataParallel

        found = []
        for root in self.modules:
            for module in root.modules():
                ddp = module if isinstance(module, DistributedDataParallel) else _replicated(module)
                if ddp is not None and not getattr(ddp, "_has_rebuilt_buckets", True):
                    found.append(ddp)
        return found

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

    def _buffers(self) -> list[tuple[int, str, torch.nn.Module, str, torch.Tensor | None]]:
        """Every registered buffer slot, ``None`` ones included: (module index, qualified name, owner, name,
        value), each slot once."""
        seen: set[tuple[int, str]] = set()
        out = []
        for i, root in enumerate(self.modules):
            for prefix, module in root.named_modules(remove_duplicate=False):
                for name, buf in module._buffers.items():
                    if (id(module), name) not in seen:
                        seen.add((id(module), name))
                        out.append((i, f"{prefix}.{name}" if prefix else name, module, name, buf))
        return out

    def _snapshot(self) -> _Snapshot:
        accelerator = _accelerator()
        grads, pending = [], []
        for _, _, param in self._parameters():
            if param.grad is not None:
                pending.append(local_tensor(param.grad).detach().ne(0).any().to(self.device))
            grads.append((param, param.grad))
        return _Snapshot(
            python=random.getstate(),
            cpu=torch.get_rng_state(),
            accelerator=accelerator.get_rng_state_all() if accelerator is not None else [],
            buffers=[
                _Buffer(module, name, buf, None if buf is None else local_tensor(buf).detach().clone())
                for _, _, module, name, buf in self._buffers()
            ],
            grads=grads,
            scalars={name: accessor.get() for name, accessor in self.scalars.items()},
            # Checked at the step's one host synchronisation, not here: reading it now would be one more.
            pending=torch.stack(pending).any() if pending else torch.zeros((), dtype=torch.bool, device=self.device),
        )

    def _restore(self, baseline: _Snapshot) -> None:
        random.setstate(baseline.python)
        torch.set_rng_state(baseline.cpu)
        accelerator = _accelerator()
        if accelerator is not None:
            accelerator.set_rng_state_all(baseline.accelerator)
        with torch.no_grad():
            for saved in baseline.buffers:
                # The slot gets its original object back: forward may have rebound it (self.seen = self.seen + n)
                # or filled a None slot, and a copy into whatever is there now would leave the new object.
                saved.module._buffers[saved.name] = saved.original
                if saved.original is not None and saved.value is not None:
                    local_tensor(saved.original).copy_(saved.value)
        for param, entry in baseline.grads:
            if entry is None:
                param.grad = None
            else:  # re-attach the entry tensor, zeroed in place, so its storage stays where it was
                if param.grad is not entry:
                    param.grad = entry
                local_tensor(entry).detach().zero_()
        for name, accessor in self.scalars.items():
            accessor.set(baseline.scalars[name])

    def _signature(self, loss: torch.Tensor) -> _Signature:
        sig = _Signature()

        def add(name: str, tensor: torch.Tensor | None) -> None:
            if tensor is None:
                sig.add_host(f"{name}:none", _NONE_SCHEMA, 0)
                return
            local = local_tensor(tensor).detach()
            if local.dtype == torch.uint8 and local.device.type == "cpu" and name.startswith("rng:"):
                sig.add_host(name, _schema(local), _rng_digest(local))
            else:
                sig.add_device(name, _schema(local), _device_digest(local, fallback=self._fallback))

        add("loss", loss)
        add("rng:cpu", torch.get_rng_state())
        accelerator = _accelerator()
        for i, state in enumerate(accelerator.get_rng_state_all() if accelerator is not None else []):
            add(f"rng:accelerator:{i}", state)
        for i, qualified, _, _, buf in self._buffers():
            add(f"buffer:{i}:{qualified}", buf)
        for i, name, param in self._parameters():
            add(f"gradient:{i}:{name}", param.grad)
        sig.add_host("state:python_rng", "tuple", _state_digest(random.getstate()))
        for name, accessor in self.scalars.items():
            value = accessor.get()
            sig.add_host(f"state:{name}", type(value).__name__, _state_digest(value))
        sig.seal(self.device)
        return sig

    # --- agreement and reporting ---
    def _agree(self, step: int, local_step: int, runs: list[_Signature], flags: list[torch.Tensor]) -> None:
        """One collective and one host read for the whole checked step. The verdict is one integer, all-reduced
        with MAX on the group's device: 0 clean, ``n + 1 - r`` for a first mismatch at replay ``r`` of ``n`` (so
        the maximum names the earliest replay any rank failed), ``n + 1`` for pending gradients. It is read back
        with the local flags and, when reporting, every run's digests."""
        n = len(flags) - 1
        local = torch.stack([f.to(self.device) for f in flags]).to(torch.int64)
        weights = torch.arange(n + 1, 0, -1, dtype=torch.int64, device=self.device)  # n+1 (pending), n, .., 1
        verdict = (local * weights).max().reshape(1)
        if _distributed():
            dist.all_reduce(verdict, op=dist.ReduceOp.MAX, group=self.group)
        client = attach.client() if self.report else None
        parts = [verdict, local]
        table = self._replica_table(runs[-1])
        replicas = _classes(table) if table is not None else None
        if replicas is not None:
            parts.append(replicas)
        if client is not None:
            parts += [run.device.view(torch.int64) for run in runs if run.device is not None]
        values = torch.cat(parts).tolist()  # the step's one host synchronisation
        self.host_syncs += 1
        agreed, local_flags, digests = values[0], values[1 : n + 2], values[n + 2 :]
        outcome = None
        if replicas is not None and table is not None:
            classes, digests = digests[: replicas.numel()], digests[replicas.numel() :]
            outcome = m.ReplicaOutcome(
                ranks=dist.get_process_group_ranks(self.group or dist.group.WORLD),
                classes=classes,
                # The failure path: the entry's name is worth another read of the gathered table.
                signature=self._split_entry(runs[-1], table) if any(classes) else "",
            )
        if client is not None:
            self._send_all(client, step, local_step, runs, digests, clean=agreed == 0, outcome=outcome)
        if agreed == n + 1:
            raise RuntimeError(
                "SDC replay needs a step to start with no pending gradients (None or zeros): "
                "call optimizer.zero_grad() before it"
                + ("" if local_flags[0] else " (another rank had pending gradients)")
            )
        if agreed == 0:
            if outcome is not None:
                self._replica_verdict(step, outcome)
            return
        replay = n + 1 - agreed
        # The failure path: names are worth another read.
        mismatch = None
        if local_flags[replay]:
            mismatch = first_difference(self._entries(runs[0]), self._entries(runs[replay]))
        rank = dist.get_rank(self.group) if _distributed() else 0
        if _distributed() and dist.get_world_size(self.group) > 1:
            gathered: list[tuple[int, str | None] | None] = [None] * dist.get_world_size(self.group)
            dist.all_gather_object(gathered, (rank, mismatch) if local_flags[replay] else None, group=self.group)
            rank, mismatch = next(item for item in gathered if item is not None)
        raise SDCReplayMismatch(step, local_step, replay, rank, mismatch)

    def _replica_table(self, run: _Signature) -> torch.Tensor | None:
        """With a replica group: the final run's gradient digests all-gathered over the group, one row per
        replica, on the device (the replicas of a data-parallel group hold equal gradients after its
        all-reduce, on any number of hosts: no daemon sees them all, the group does)."""
        if not self.replica_group or not _distributed() or dist.get_world_size(self.group) < 2:
            return None
        assert run.device is not None
        mine = run.device.view(torch.int64)[run.gradient_rows].contiguous()
        gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(gathered, mine, group=self.group)
        return torch.stack(gathered)

    @staticmethod
    def _split_entry(run: _Signature, table: torch.Tensor) -> str:
        """The first gradient entry the replicas do not all hold alike (one more host read: failures only)."""
        differs = (table != table[:1]).any(0).tolist()
        names = [name for name in run.names if name.startswith("gradient:")]
        return next((name for name, d in zip(names, differs, strict=True) if d), "")

    def _replica_verdict(self, step: int, outcome: m.ReplicaOutcome) -> None:
        sizes = Counter(outcome.classes)
        common, best = sizes.most_common(1)[0]
        world = len(outcome.classes)
        if best == world:
            return
        majority = best * 2 > world
        ranks = sorted(r for r, c in zip(outcome.ranks, outcome.classes, strict=True) if c != common or not majority)
        error = SDCReplicaMismatch(step, ranks, majority)
        if self.on_replica_mismatch == "raise":
            raise error
        self.replica_mismatches.append(error)
        warnings.warn(str(error), RuntimeWarning, stacklevel=4)

    @staticmethod
    def _entries(run: _Signature) -> list[SignatureEntry]:
        assert run.device is not None
        return run.entries(run.device.view(torch.int64).tolist())

    def _send_all(
        self, client: Any, step: int, local_step: int, runs: list[_Signature], digests: list[int], *, clean: bool,
        outcome: m.ReplicaOutcome | None,
    ) -> None:  # fmt: skip
        rank = dist.get_rank() if _distributed() else -1
        offset = 0
        try:
            for replay, run in enumerate(runs):
                width = 0 if run.device is None else run.device.numel()
                entries = run.entries(digests[offset : offset + width])
                offset += width
                self._send(client, step, local_step, replay, rank, entries)
            if self.replica_group and clean:  # the cross-replica check is of a step that replayed clean
                gradients = [e for e in runs[-1].entries(digests[offset - width :]) if e.name.startswith("gradient:")]
                self._send(client, step, local_step, 0, rank, gradients, phase="post_all_reduce", outcome=outcome)
        except (ClientError, OSError) as exc:
            attach.detach(str(exc))

    def _send(
        self, client: Any, step: int, local_step: int, replay: int, rank: int, entries: list[SignatureEntry],
        *, phase: str = "replay", outcome: m.ReplicaOutcome | None = None,
    ) -> None:  # fmt: skip
        client.signature(
            step, [(e.name, e.schema, e.digest) for e in entries], local_step=local_step, replay=replay,
            rank=rank, phase=phase, replica_group=self.replica_group, replicas=self.replicas, outcome=outcome,
        )  # fmt: skip
