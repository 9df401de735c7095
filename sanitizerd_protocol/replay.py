"""Replay signatures, as both ends read them: the first difference between two signatures, in TorchTitan's
order (tensor schemas, tensor digests, state schemas, state values). The training process's replayer
(``client_shim.torch_sdc``) and the daemon's sdccheck name a mismatch with the same function."""

from __future__ import annotations

from collections.abc import Sequence

from sanitizerd_protocol.messages import SignatureEntry


def is_state(entry: SignatureEntry) -> bool:
    return entry.name.startswith("state:")


def first_difference(reference: Sequence[SignatureEntry], candidate: Sequence[SignatureEntry]) -> str | None:
    """The first thing that differs, or None when the signatures are equal."""
    for kind, picked in (("tensor", lambda e: not is_state(e)), ("state", is_state)):
        ref = [e for e in reference if picked(e)]
        cand = [e for e in candidate if picked(e)]
        if [(e.name, e.schema) for e in ref] != [(e.name, e.schema) for e in cand]:
            return f"{kind} schema divergence"
        for a, b in zip(ref, cand, strict=True):
            if a.digest != b.digest:
                return a.name
    return None
