"""sdccheck: silent data corruption found by deterministic replay (TorchTitan's SDC replayer; peers.md §1).

A job's ranks send replay signatures (``Signature`` messages): replay 0 of a (step, local step) is the
reference run, each later replay re-executes the same forward/backward from the restored state and must give
the same signature. A replay that differs is an ``sdc_mismatch``, named as TorchTitan names it: the first
differing entry, tensors before state, a schema change before a digest change.

Beyond TorchTitan, ranks that declare themselves data-parallel replicas (one ``replica_group``) send their
gradients after the all-reduce, which must be bit-identical on every replica: once all ``replicas`` ranks of a
group have sent a step, a rank whose gradient digests differ from the majority's is an ``sdc_replica_mismatch``;
replicas that split with no majority (two of them, say) make one finding that names them all and blames none.
The check sees every rank of a job, which no single training process can.

Unlike the kernel detectors, this one is per job, not per session: state plus a function over signatures,
no I/O. The session layer turns what it returns into findings.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from sanitizerd.findings.model import Replay
from sanitizerd.protocol.messages import Signature, SignatureEntry
from sanitizerd.protocol.replay import first_difference

# Post-all-reduce steps a replica group may have open (some replicas not heard from yet) before the oldest is
# given up: a rank that died must not make the daemon hold every later step.
MAX_OPEN_STEPS = 64
# Signature entries one job's state may hold (references and open steps), ranks it keeps a reference for, and
# replica groups it keeps steps for: rank and group are the client's words, so each is bounded. Past them the oldest
# open steps go first; a reference that still does not fit is not kept, and its replay is not compared (said once).
MAX_HELD_ENTRIES = 1 << 17
MAX_RANKS = 1 << 16
MAX_GROUPS = 256


@dataclass(frozen=True, slots=True)
class SdcFinding:
    kind: str  # "sdc_mismatch" | "sdc_replica_mismatch"
    replay: Replay
    text: str


@dataclass(slots=True)
class SdcCheck:
    """One job's signatures: the latest reference per rank, the open post-all-reduce steps per replica group,
    and how many signatures each rank sent (so that a job that sent none is not taken for a clean one)."""

    references: dict[int, tuple[int, int, list[SignatureEntry]]] = field(default_factory=dict)
    open_steps: dict[str, dict[tuple[int, int], dict[int, list[SignatureEntry]]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    counts: Counter[int] = field(default_factory=Counter)
    held: int = 0  # entries in references and open steps
    refused: int = 0  # references not kept for want of room

    def add(self, signature: Signature, rank: int) -> list[SdcFinding]:
        if rank in self.counts or len(self.counts) < MAX_RANKS:
            self.counts[rank] += 1
        if signature.phase == "post_all_reduce":
            return self._replica(signature, rank)
        return self._replay(signature, rank)

    def _replay(self, signature: Signature, rank: int) -> list[SdcFinding]:
        step, local_step = signature.step, signature.local_step
        if signature.replay == 0:
            old = self.references.pop(rank, None)
            self.held -= len(old[2]) if old is not None else 0
            self._make_room(len(signature.entries))
            if self.held + len(signature.entries) > MAX_HELD_ENTRIES or len(self.references) >= MAX_RANKS:
                self.refused += 1
                if self.refused > 1:
                    return []
                replay = Replay(step=step, local_step=local_step, rank=rank, signature="")
                text = (
                    f"sdccheck holds its bound of {MAX_HELD_ENTRIES} signature entries and {MAX_RANKS} ranks for this "
                    f"job: the reference of step {step} of rank {rank} (and any later one that does not fit) is not "
                    "kept, and its replays are not compared"
                )
                return [SdcFinding("internal_error", replay, text)]
            self.references[rank] = (step, local_step, list(signature.entries))
            self.held += len(signature.entries)
            return []
        reference = self.references.get(rank)
        if reference is None or reference[:2] != (step, local_step):
            return []  # no reference for this step (sent before the daemon was there): nothing to compare with
        name = first_difference(reference[2], list(signature.entries))
        if name is None:
            return []
        replay = Replay(step=step, local_step=local_step, replay=signature.replay, rank=rank, signature=name)
        text = (
            f"SDC replay mismatch: step={step}, local_step={local_step}, replay={signature.replay}, rank={rank}, "
            f"signature={name!r}"
        )
        return [SdcFinding("sdc_mismatch", replay, text)]

    def _replica(self, signature: Signature, rank: int) -> list[SdcFinding]:
        if signature.replica_group not in self.open_steps and len(self.open_steps) >= MAX_GROUPS:
            self._drop_step(next(iter(self.open_steps)), None)  # the oldest group's steps make room
        group = self.open_steps[signature.replica_group]
        key = (signature.step, signature.local_step)
        ranks = group.setdefault(key, {})
        gradients = [e for e in signature.entries if e.name.startswith("gradient:")]
        self.held -= len(ranks.pop(rank, ()))
        if len(ranks) >= MAX_RANKS:
            return []
        self._make_room(len(gradients), keep=(signature.replica_group, key))
        ranks[rank] = gradients
        self.held += len(gradients)
        if len(ranks) < max(signature.replicas, 2):
            if len(group) > MAX_OPEN_STEPS:
                self._drop_step(signature.replica_group, min(group))
            return []
        self._drop_step(signature.replica_group, key)
        return self._disagreeing(signature, ranks)

    def _drop_step(self, group_name: str, key: tuple[int, int] | None) -> None:
        """Forget one open step of a group (``key``), or the whole group (None), and the entries it held."""
        group = self.open_steps.get(group_name, {})
        for step in [key] if key is not None else list(group):
            self.held -= sum(len(entries) for entries in group.pop(step, {}).values())
        if not group:
            self.open_steps.pop(group_name, None)

    def _make_room(self, entries: int, keep: tuple[str, tuple[int, int]] | None = None) -> None:
        """Open steps go, the oldest first, until ``entries`` more fit (the step being filled, ``keep``, stays)."""
        while self.held + entries > MAX_HELD_ENTRIES:
            steps = [(key, name) for name, group in self.open_steps.items() for key in group if (name, key) != keep]
            if not steps:
                return
            key, name = min(steps)
            self._drop_step(name, key)

    def _disagreeing(self, signature: Signature, ranks: dict[int, list[SignatureEntry]]) -> list[SdcFinding]:
        """Ranks whose gradients differ from what most replicas hold, each named by its first differing entry;
        when the first entry that differs has no strict majority, one finding for them all (``_no_majority``)."""
        order = sorted(ranks)
        names = [e.name for e in ranks[order[0]]]
        by_name = [{e.name: e.digest for e in ranks[r]} for r in order]  # one lookup per entry, whatever the order
        # Per entry: every rank's digest, and the one most replicas hold.
        digests = {name: [held.get(name) for held in by_name] for name in names}
        majority = {
            name: max(d, key=lambda value, d=d: (d.count(value), -d.index(value))) for name, d in digests.items()
        }
        split = next((name for name in names if len(set(digests[name])) > 1), None)
        if split is not None and 2 * digests[split].count(majority[split]) <= len(order):
            return [self._no_majority(signature, order, split, digests[split])]
        findings = []
        for k, rank in enumerate(order):
            name = next((name for name in names if digests[name][k] != majority[name]), None)
            if name is None:
                continue
            agree = len(order) - digests[name].count(digests[name][k])
            replay = Replay(
                step=signature.step, local_step=signature.local_step, rank=rank, signature=name,
                replica_group=signature.replica_group,
            )  # fmt: skip
            text = (
                f"SDC replica mismatch: step={signature.step}, local_step={signature.local_step}, rank={rank}, "
                f"replica_group={signature.replica_group!r}, signature={name!r} differs from {agree} of "
                f"{len(order) - 1} other replica(s)"
            )
            findings.append(SdcFinding("sdc_replica_mismatch", replay, text))
        return findings

    @staticmethod
    def _no_majority(signature: Signature, order: list[int], name: str, digests: list[int | None]) -> SdcFinding:
        """Replicas that split with no majority (two replicas, or two against two): nothing tells which side is
        wrong, so the finding names every rank, grouped by the value it holds, and blames none of them."""
        sides: dict[int | None, list[int]] = {}
        for rank, digest in zip(order, digests, strict=True):
            sides.setdefault(digest, []).append(rank)
        groups = " vs ".join("[" + ", ".join(map(str, ranks)) + "]" for ranks in sides.values())
        replay = Replay(
            step=signature.step, local_step=signature.local_step, rank=order[0], ranks=list(order), signature=name,
            replica_group=signature.replica_group,
        )  # fmt: skip
        what = "the 2 replicas disagree" if len(order) == 2 else f"the {len(order)} replicas split with no majority"
        text = (
            f"SDC replica mismatch: step={signature.step}, local_step={signature.local_step}, ranks={list(order)}, "
            f"replica_group={signature.replica_group!r}, signature={name!r}: {what} ({groups}); "
            "which one is wrong cannot be told"
        )
        return SdcFinding("sdc_replica_mismatch", replay, text)
