"""sdccheck: replay signatures against their reference (TorchTitan's message) and data-parallel replicas
against each other; unit tests of the checker, then real ranks (client processes) of one job on a real daemon."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import msgspec
import pytest

from sanitizerd.detectors import sdccheck
from sanitizerd.detectors.sdccheck import SdcCheck
from sanitizerd.findings.render import render_text
from sanitizerd_protocol import RemoteProtocolError
from sanitizerd_protocol.connection import decode_body
from sanitizerd_protocol.messages import (
    MAX_REPLICA_RANKS,
    MAX_SIGNATURE_ENTRIES,
    ReplicaOutcome,
    Signature,
    SignatureEntry,
)
from sanitizerd_protocol.replay import first_difference
from tests.conftest import ROOT, RunningDaemon, program_env, sanitizerd


def entries(**digests: int) -> list[SignatureEntry]:
    """Entries in order, named by keyword: ``rng_cpu`` is ``rng:cpu``, ``gradient_0_w`` is ``gradient:0:w``,
    ``state_python_rng`` is ``state:python_rng``."""
    out = []
    for key, digest in digests.items():
        kind, _, rest = key.partition("_")
        name = f"state:{rest}" if kind == "state" else ":".join(key.split("_"))
        out.append(SignatureEntry(name=name, schema="((4,), 'torch.float32', 'cpu')", digest=digest))
    return out


BASE = {"loss": 1, "rng_cpu": 2, "gradient_0_weight": 3, "gradient_0_bias": 4, "state_python_rng": 5}


class TestReplay:
    def test_equal_replays_are_clean(self) -> None:
        check = SdcCheck()
        assert check.add(Signature(step=1, replay=0, entries=entries(**BASE)), rank=0) == []
        assert check.add(Signature(step=1, replay=1, entries=entries(**BASE)), rank=0) == []
        assert check.counts == {0: 2}

    def test_first_differing_gradient_is_named_in_torchtitans_words(self) -> None:
        check = SdcCheck()
        check.add(Signature(step=3, local_step=1, replay=0, entries=entries(**BASE)), rank=2)
        bad = entries(**{**BASE, "gradient_0_bias": 99, "state_python_rng": 98})
        (found,) = check.add(Signature(step=3, local_step=1, replay=1, entries=bad), rank=2)
        assert found.kind == "sdc_mismatch"
        assert found.text == "SDC replay mismatch: step=3, local_step=1, replay=1, rank=2, signature='gradient:0:bias'"

    def test_tensors_before_state_and_schema_before_digest(self) -> None:
        ref = entries(**BASE)
        assert first_difference(ref, entries(**{**BASE, "state_python_rng": 0})) == "state:python_rng"
        reshaped = [*ref[:2], SignatureEntry(name="gradient:0:weight", schema="((8,),)", digest=3), *ref[3:]]
        assert first_difference(ref, reshaped) == "tensor schema divergence"
        assert first_difference(ref, [*ref, SignatureEntry(name="state:ntokens_seen")]) == "state schema divergence"

    def test_a_replay_without_its_reference_is_not_compared(self) -> None:
        check = SdcCheck()
        check.add(Signature(step=1, replay=0, entries=entries(**BASE)), rank=0)
        assert check.add(Signature(step=2, replay=1, entries=entries(loss=7)), rank=0) == []


class TestBounds:
    """Ranks, replica groups and entries are the client's words: what one job's state holds is bounded."""

    def test_open_steps_make_room_oldest_first_and_a_reference_past_the_bound_is_said_once(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(sdccheck, "MAX_HELD_ENTRIES", 10)
        check = SdcCheck()
        grads = entries(gradient_0_weight=1, gradient_0_bias=2)
        for step in range(4):  # replicas that never complete: 4 steps x 2 gradients held
            check.add(Signature(step=step, phase="post_all_reduce", replica_group="dp", replicas=2, entries=grads), 0)
        assert check.held == 8
        check.add(Signature(step=9, replay=0, entries=entries(**BASE)), rank=1)  # 5 entries: two oldest steps go
        assert check.held == 9 and sorted(check.open_steps["dp"]) == [(2, 0), (3, 0)]
        big = entries(**{f"gradient_{i}_w": i for i in range(11)})
        (cut,) = check.add(Signature(step=10, replay=0, entries=big), rank=2)
        assert cut.kind == "internal_error" and "step 10 of rank 2" in cut.text
        assert check.add(Signature(step=11, replay=0, entries=big), rank=3) == []  # said once
        assert check.held <= 10 and 2 not in check.references

    def test_replica_groups_are_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(sdccheck, "MAX_GROUPS", 3)
        check = SdcCheck()
        for group in range(10):
            sig = Signature(
                step=1, phase="post_all_reduce", replica_group=f"g{group}", replicas=2, entries=entries(gradient_0_w=1)
            )
            check.add(sig, rank=0)
        assert list(check.open_steps) == ["g7", "g8", "g9"] and check.held == 3

    def test_replicas_listing_entries_in_another_order_agree(self) -> None:
        """Each rank's digests are looked up by name, once: the order of entries does not matter."""
        check = SdcCheck()
        forward = entries(**{f"gradient_{i}_w": i for i in range(2000)})
        for rank, listed in ((0, forward), (1, forward[::-1])):
            found = check.add(
                Signature(step=1, phase="post_all_reduce", replica_group="dp", replicas=2, entries=listed), rank
            )
        assert found == []

    def test_a_signature_of_too_many_entries_is_refused_at_decode(self) -> None:
        body = msgspec.msgpack.encode(
            {"type": "signature", "step": 1, "entries": [{"name": "loss"}] * (MAX_SIGNATURE_ENTRIES + 1)}
        )
        with pytest.raises(RemoteProtocolError) as info:
            decode_body(body)
        assert info.value.reason == "bad_packet"


class TestReplicas:
    def test_the_rank_that_disagrees_after_all_reduce_is_named(self) -> None:
        check = SdcCheck()
        good = entries(loss=1, gradient_0_weight=3, gradient_0_bias=4)
        bad = entries(loss=1, gradient_0_weight=3, gradient_0_bias=5)
        found = []
        for rank, sent in enumerate((good, good, bad, good)):
            sig = Signature(step=1, phase="post_all_reduce", replica_group="dp", replicas=4, entries=sent)
            found += check.add(sig, rank=rank)
        assert [(f.kind, f.replay.rank, f.replay.signature) for f in found] == [
            ("sdc_replica_mismatch", 2, "gradient:0:bias")
        ]
        assert "differs from 3 of 3 other replica(s)" in found[0].text

    def test_two_replicas_that_disagree_are_both_named_and_neither_blamed(self) -> None:
        check = SdcCheck()
        found = []
        for rank, digest in ((0, 3), (1, 5)):
            sig = Signature(step=2, phase="post_all_reduce", replica_group="dp", replicas=2,
                            entries=entries(loss=1, gradient_0_w=digest))  # fmt: skip
            found += check.add(sig, rank=rank)
        (finding,) = found
        assert (finding.kind, finding.replay.ranks, finding.replay.signature) == (
            "sdc_replica_mismatch",
            [0, 1],
            "gradient:0:w",
        )
        assert "ranks=[0, 1]" in finding.text and "the 2 replicas disagree ([0] vs [1])" in finding.text
        assert "which one is wrong cannot be told" in finding.text

    def test_an_even_split_has_no_majority_either(self) -> None:
        check = SdcCheck()
        found = []
        for rank, digest in enumerate((3, 5, 5, 3)):
            sig = Signature(step=1, phase="post_all_reduce", replica_group="dp", replicas=4,
                            entries=entries(gradient_0_w=digest))  # fmt: skip
            found += check.add(sig, rank=rank)
        (finding,) = found
        assert finding.replay.ranks == [0, 1, 2, 3]
        assert "the 4 replicas split with no majority ([0, 3] vs [1, 2])" in finding.text

    def test_nothing_is_judged_before_every_replica_reported(self) -> None:
        check = SdcCheck()
        sig = Signature(
            step=1, phase="post_all_reduce", replica_group="dp", replicas=3, entries=entries(gradient_0_w=1)
        )
        assert check.add(sig, rank=0) == []
        other = Signature(
            step=1, phase="post_all_reduce", replica_group="dp", replicas=3, entries=entries(gradient_0_w=2)
        )
        assert check.add(other, rank=1) == []


def verdict(step: int, ranks: list[int], classes: list[int], name: str = "gradient:0:w") -> ReplicaOutcome:
    return ReplicaOutcome(ranks=ranks, classes=classes, signature=name if any(classes) else "")


def post(step: int, rank_entries: list[SignatureEntry], outcome: ReplicaOutcome | None, replicas: int = 4) -> Signature:
    return Signature(
        step=step, phase="post_all_reduce", replica_group="dp", replicas=replicas, entries=rank_entries,
        outcome=outcome,
    )  # fmt: skip


class TestGroupVerdict:
    """A job on many hosts: each daemon sees some ranks, and the ranks send the verdict of their own
    all-gather. It is judged at once, once per step, for every rank it names."""

    def test_the_disagreeing_rank_is_named_from_the_first_verdict_without_waiting_for_the_others(self) -> None:
        check = SdcCheck()
        outcome = verdict(1, [0, 1, 2, 3], [0, 0, 0, 3])
        (found,) = check.add(post(1, entries(gradient_0_w=7), outcome), rank=2)  # only ranks 2 and 3 are here
        assert (found.kind, found.replay.rank, found.replay.signature) == ("sdc_replica_mismatch", 3, "gradient:0:w")
        assert "differs from 3 of 3 other replica(s)" in found.text
        assert check.add(post(1, entries(gradient_0_w=8), outcome), rank=3) == []  # the same verdict: judged once
        assert (check.checked, check.open_replica_steps, check.describe_incomplete()) == (1, 0, "")

    def test_a_clean_verdict_is_a_checked_step(self) -> None:
        check = SdcCheck()
        assert check.add(post(5, entries(gradient_0_w=1), verdict(5, [0, 1], [0, 0]), replicas=2), rank=0) == []
        assert check.checked == 1 and check.open_replica_steps == 0

    def test_two_replicas_that_disagree_are_named_together(self) -> None:
        check = SdcCheck()
        (found,) = check.add(post(2, entries(gradient_0_w=1), verdict(2, [4, 5], [0, 1]), replicas=2), rank=5)
        assert found.replay.ranks == [4, 5] and "the 2 replicas disagree ([4] vs [5])" in found.text

    def test_an_even_split_names_the_sides(self) -> None:
        check = SdcCheck()
        (found,) = check.add(post(1, entries(gradient_0_w=1), verdict(1, [0, 1, 2, 3], [0, 1, 1, 0])), rank=0)
        assert "the 4 replicas split with no majority ([0, 3] vs [1, 2])" in found.text

    @pytest.mark.parametrize(
        "ranks, classes",
        [
            ([0, 1, 2, 3], [0, 0, 0]),  # lengths differ
            ([0, 1, 3, 3], [0, 0, 0, 0]),  # a rank twice
            ([0, 1, 2, 3], [0, 0, 1, 0]),  # rank 2's class is rank 1, which is in class 0
            ([0, 1, 2, 3], [0, 0, 3, 3]),  # a class after its member
            ([0, 1, 3, 4], [0, 0, 0, 0]),  # the sender (rank 2) is not in the group
            ([2], [0]),  # no group
        ],
    )
    def test_a_verdict_that_does_not_hold_together_is_set_aside_for_the_daemons_own_check(
        self, ranks: list[int], classes: list[int]
    ) -> None:
        check = SdcCheck()
        assert check.add(post(1, entries(gradient_0_w=1), ReplicaOutcome(ranks=ranks, classes=classes)), rank=2) == []
        assert check.checked == 0 and check.open_replica_steps == 1  # held for the other replicas, as with none

    def test_a_group_that_never_completes_here_is_said_to_be_incomplete(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(sdccheck, "MAX_OPEN_STEPS", 2)
        check = SdcCheck()
        for step in range(4):
            for rank in (2, 3):  # ranks 0 and 1 are on another host, and nobody sends a verdict
                assert check.add(post(step, entries(gradient_0_w=1), None), rank=rank) == []
        assert (check.incomplete, check.open_replica_steps) == (2, 2)  # the oldest given up, the rest open
        assert check.describe_incomplete().startswith(
            "the cross-replica check of 4 step(s) is incomplete: 'dp' heard from 2 of 4 replica(s) on this daemon"
        )

    def test_a_verdict_of_too_many_ranks_is_refused_at_decode(self) -> None:
        ranks = list(range(MAX_REPLICA_RANKS + 1))
        body = msgspec.msgpack.encode(
            {"type": "signature", "step": 1, "outcome": {"ranks": ranks, "classes": [0] * len(ranks)}}
        )
        with pytest.raises(RemoteProtocolError) as info:
            decode_body(body)
        assert info.value.reason == "bad_packet"


RANK = textwrap.dedent(
    """
    import sys
    from client_shim.client import Client
    socket, job, rank, bad_rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    c = Client(socket, job=job, rank=rank, world_size=4, device=rank)
    base = [("loss", "((), 'torch.float32', 'cpu')", 11), ("rng:cpu", "((5056,), 'torch.uint8', 'cpu')", 12),
            ("gradient:0:weight", "((4, 4), 'torch.float32', 'cpu')", 13), ("state:python_rng", "tuple", 14)]
    c.signature(1, base, local_step=1, replay=0)
    replay = [(n, s, d + 1 if (rank == bad_rank and n.startswith("gradient:")) else d) for n, s, d in base]
    c.signature(1, replay, local_step=1, replay=1)
    reduced = [e for e in base if e[0].startswith("gradient:")]
    if rank == bad_rank + 1:  # a different rank's all-reduced gradient is changed after the collective
        reduced = [(n, s, d ^ 0x80) for n, s, d in reduced]
    c.signature(1, reduced, phase="post_all_reduce", replica_group="dp", replicas=4)
    c.close()
    """
)


def run_ranks(daemon: RunningDaemon, job: str, bad_rank: int) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", RANK, str(daemon.socket), job, str(rank), str(bad_rank)], cwd=ROOT)
        for rank in range(4)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]


def findings(daemon: RunningDaemon, job: str) -> list[dict]:
    result = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    return json.loads(result.stdout)


def test_four_ranks_one_corrupted_replay_and_one_disagreeing_replica(daemon: RunningDaemon) -> None:
    """Rank 2's replay differs from its reference: one sdc_mismatch naming step 1, rank 2 and a gradient entry;
    rank 3's all-reduced gradient differs from the other three replicas: named by the cross-replica check;
    every rank's signatures are counted."""
    run_ranks(daemon, "ddp-bad", bad_rank=2)
    found = sorted(findings(daemon, "ddp-bad"), key=lambda f: f["kind"])
    assert [f["kind"] for f in found] == ["sdc_mismatch", "sdc_replica_mismatch"]
    mismatch, replica = found
    assert mismatch["detail"] == (
        "SDC replay mismatch: step=1, local_step=1, replay=1, rank=2, signature='gradient:0:weight'"
    )
    assert (replica["replay"]["rank"], replica["replay"]["signature"]) == (3, "gradient:0:weight")
    sessions = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
    mine = [s for s in sessions if s["job"] == "ddp-bad"]
    assert sorted((s["rank"], s["signatures"]) for s in mine) == [(0, 3), (1, 3), (2, 3), (3, 3)]


def test_clean_ranks_have_no_finding(daemon: RunningDaemon) -> None:
    run_ranks(daemon, "ddp-clean", bad_rank=-5)
    assert findings(daemon, "ddp-clean") == []


def test_report_text() -> None:
    check = SdcCheck()
    check.add(Signature(step=1, replay=0, entries=entries(**BASE)), rank=0)
    (found,) = check.add(Signature(step=1, replay=1, entries=entries(**{**BASE, "loss": 0})), rank=0)
    from sanitizerd_protocol.model import make_finding

    finding = make_finding(found.kind, job="j", session=4, pid=9, device=1, detail=found.text, replay=found.replay)
    assert render_text([finding]).splitlines() == [
        "====== ERROR: SDC replay mismatch: step=1, local_step=0, replay=1, rank=0, signature='loss'",
        "======    in job j session 4 (pid 9) on device 1",
        "",  # every report ends with a blank line, as msSanitizer's do
    ]


TWO_REPLICAS = textwrap.dedent(
    """
    import os, sys
    from client_shim.client import Client
    socket, job, flip = os.environ["SANITIZERD_SOCKET"], os.environ["SANITIZERD_JOB"], int(sys.argv[1])
    clients = [Client(socket, job=job, rank=rank, world_size=2, device=rank) for rank in (0, 1)]
    for rank, c in enumerate(clients):
        digest = 13 ^ (flip if rank == 1 else 0)
        c.signature(1, [("gradient:0:w", "((4,), 'torch.float32', 'cpu')", digest)], phase="post_all_reduce",
                    replica_group="dp", replicas=2)
    for c in clients:
        c.close()
    """
)


@pytest.mark.parametrize(("flip", "status"), [(0, 0), (0x80, 1)])
def test_run_exits_non_zero_after_an_sdc_finding(daemon: RunningDaemon, flip: int, status: int) -> None:
    """A program that exits 0 after two replicas disagreed: `sanitizerd run` exits 1 without --error-exitcode, and
    the finding names both ranks; a clean one exits 0."""
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--", sys.executable, "-c", TWO_REPLICAS, str(flip), env=program_env()
    )
    assert result.returncode == status, result.stdout + result.stderr
    if flip:
        assert "ranks=[0, 1]" in result.stdout and "the 2 replicas disagree" in result.stdout
        job = re.findall(r"job (\S+):", result.stdout)[-1]
        (finding,) = findings(daemon, job)
        assert finding["replay"]["ranks"] == [0, 1]
