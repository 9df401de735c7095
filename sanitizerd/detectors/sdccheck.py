"""sdccheck: silent data corruption found by deterministic replay (TorchTitan's SDC replayer; peers.md §1).

A job's ranks send replay signatures (``Signature`` messages): replay 0 of a (step, local step) is the
reference run, each later replay re-executes the same forward/backward from the restored state and must give
the same signature. A replay that differs is an ``sdc_mismatch``, named as TorchTitan names it: the first
differing entry, tensors before state, a schema change before a digest change.

Beyond TorchTitan, ranks that declare themselves data-parallel replicas (one ``replica_group``) send their
gradients after the all-reduce, which must be bit-identical on every replica: once all ``replicas`` ranks of a
group have sent a step, a rank whose gradient digests differ from the majority's is an ``sdc_replica_mismatch``;
replicas that split with no majority (two of them, say) make one finding that names them all and blames none.
The check sees every rank of a job that this daemon serves.

A job on many hosts has a daemon per host, each seeing only its own ranks; there the ranks compare their
digests through their own process group (an all-gather: client_shim.torch_sdc) and each sends the group's
verdict with its gradients (``Signature.outcome``). The first verdict of a (group, step) this daemon receives
is judged, for every rank it names, local or not, so that each host's run says what the job saw; the rest of
that step's verdicts only confirm it. A group that never reaches its ``replicas`` here, with no verdict from
the ranks, is counted as incomplete (``incomplete``, and ``describe_incomplete`` for the run's summary) instead
of staying silent.

Unlike the kernel detectors, this one is per job, not per session: state plus a function over signatures,
no I/O. The session layer turns what it returns into findings.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field

from sanitizerd_protocol.messages import ReplicaOutcome, Signature, SignatureEntry
from sanitizerd_protocol.model import Replay
from sanitizerd_protocol.replay import first_difference

# Post-all-reduce steps a replica group may have open (some replicas not heard from yet) before the oldest is
# given up: a rank that died must not make the daemon hold every later step.
MAX_OPEN_STEPS = 64
# Signature entries one job's state may hold (references and open steps), ranks it keeps a reference for, and
# replica groups it keeps steps for: rank and group are the client's words, so each is bounded. Past them the oldest
# open steps go first; a reference that still does not fit is not kept, and its replay is not compared (said once).
MAX_HELD_ENTRIES = 1 << 17
MAX_RANKS = 1 << 16
MAX_GROUPS = 256
# (group, step, local step) keys whose process-group verdict was judged, kept so that the other ranks' copies of
# the same verdict are not judged again.
MAX_JUDGED = 1024


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
    judged: OrderedDict[tuple[str, int, int], None] = field(default_factory=OrderedDict)
    checked: int = 0  # replica steps judged, here or by the job's process group
    incomplete: int = 0  # replica steps given up with fewer than their replicas heard and no group verdict
    short_of: dict[str, tuple[int, int]] = field(default_factory=dict)  # group -> (most ranks heard, replicas)

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
        if signature.outcome is not None and _valid(signature.outcome, rank):
            return self._group_verdict(signature, signature.outcome)
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
        wanted = max(signature.replicas, 2)
        if len(ranks) < wanted:
            heard, _ = self.short_of.get(signature.replica_group, (0, 0))
            self.short_of[signature.replica_group] = (max(heard, len(ranks)), wanted)
            if len(group) > MAX_OPEN_STEPS:
                self._drop_step(signature.replica_group, min(group))
            return []
        self._drop_step(signature.replica_group, key, complete=True)
        self.checked += 1
        return self._disagreeing(signature, ranks)

    def _drop_step(self, group_name: str, key: tuple[int, int] | None, *, complete: bool = False) -> None:
        """Forget one open step of a group (``key``), or the whole group (None), and the entries it held; a
        step forgotten before all its replicas were heard is counted incomplete."""
        group = self.open_steps.get(group_name, {})
        for step in [key] if key is not None else list(group):
            if step in group:
                self.incomplete += not complete
                self.held -= sum(len(entries) for entries in group.pop(step).values())
        if not group:
            self.open_steps.pop(group_name, None)

    @property
    def open_replica_steps(self) -> int:
        """Replica steps still waiting for replicas (incomplete, if the job's ranks are all gone)."""
        return sum(len(group) for group in self.open_steps.values())

    def describe_incomplete(self) -> str:
        """What the job's summary says of replica steps that were never compared (empty: none)."""
        steps = self.incomplete + self.open_replica_steps
        if not steps:
            return ""
        groups = ", ".join(
            f"{name!r} heard from {heard} of {wanted}" for name, (heard, wanted) in self.short_of.items()
        )
        return (
            f"the cross-replica check of {steps} step(s) is incomplete: {groups or 'a group'} replica(s) on this "
            "daemon, and no verdict from the job's process group (replicas on other hosts are compared only "
            "through it: client_shim.torch_sdc's SDCReplayer with a replica_group does)"
        )

    def _group_verdict(self, signature: Signature, outcome: ReplicaOutcome) -> list[SdcFinding]:
        """The job's process group compared its replicas: its verdict, judged once per (group, step)."""
        key = (signature.replica_group, signature.step, signature.local_step)
        if key in self.judged:
            return []
        self.judged[key] = None
        while len(self.judged) > MAX_JUDGED:
            self.judged.popitem(last=False)
        self.checked += 1
        # A step this daemon was also comparing itself is settled by the group's verdict.
        self._drop_step(signature.replica_group, (signature.step, signature.local_step), complete=True)
        sizes = Counter(outcome.classes)
        n = len(outcome.ranks)
        common, best = sizes.most_common(1)[0]
        if best == n:
            return []
        order = sorted(zip(outcome.ranks, outcome.classes, strict=True))
        if 2 * best <= n:
            return [self._no_majority(signature, [r for r, _ in order], outcome.signature, [c for _, c in order])]
        findings = []
        for rank, cls in order:
            if cls == common:
                continue
            replay = Replay(
                step=signature.step, local_step=signature.local_step, rank=rank, signature=outcome.signature,
                replica_group=signature.replica_group,
            )  # fmt: skip
            findings.append(
                SdcFinding("sdc_replica_mismatch", replay, self._replica_text(signature, replay, n - sizes[cls], n))
            )
        return findings

    @staticmethod
    def _replica_text(signature: Signature, replay: Replay, differing: int, replicas: int) -> str:
        return (
            f"SDC replica mismatch: step={signature.step}, local_step={signature.local_step}, rank={replay.rank}, "
            f"replica_group={signature.replica_group!r}, signature={replay.signature!r} differs from {differing} of "
            f"{replicas - 1} other replica(s)"
        )

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
            findings.append(
                SdcFinding("sdc_replica_mismatch", replay, self._replica_text(signature, replay, agree, len(order)))
            )
        return findings

    @staticmethod
    def _no_majority(
        signature: Signature, order: list[int], name: str, digests: list[int | None] | list[int]
    ) -> SdcFinding:
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


def _valid(outcome: ReplicaOutcome, rank: int) -> bool:
    """A verdict that can be judged: a group of two or more that names the sender once, each rank's class the
    index of a rank of its own class (the first: ``classes[classes[i]] == classes[i] <= i``). Another is set
    aside, and the daemon compares the gradients the rank sent as for a rank that sent no verdict."""
    n = len(outcome.ranks)
    if n < 2 or len(outcome.classes) != n or outcome.ranks.count(rank) != 1 or len(set(outcome.ranks)) != n:
        return False
    return all(0 <= c <= i and outcome.classes[c] == c for i, c in enumerate(outcome.classes))
