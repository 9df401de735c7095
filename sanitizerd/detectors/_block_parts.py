"""Where each access sits among its block's sync nodes, worked out when its block is complete (issue 13).

Placing an access in the happens-before model (``racecheck.Kernel``) needs, on its own (block, pipe) chain, the
last sync node before it, the last PIPE_S node before it (its issuer), and the pipe_barrier marks before it. All
three depend only on the block's own program, so they are counted as soon as a block is complete rather than
searched for at kernel_end among every node of the kernel: per access, the number of nodes of its pipe before it
in its block (its segment; the model's node is the chain's first node plus that count, less one), of PIPE_S nodes
before it, and of barrier marks on its pipe before it. The node rules are ``_happens_before.make_nodes``'s: a
pipe_barrier(PIPE_ALL) puts a node on every busy pipe, and an access's own pipe is always busy.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.detectors._happens_before import (
    _ALL_PIPES,
    _IS_FLAG_WAIT,
    _IS_ONE_NODE,
    _IS_OWN_PIPE_WAIT,
    scalar_to_cal,
)
from sanitizerd_protocol.records import EventKind, Pipe

_S, _S_CAL, _ALL = int(Pipe.S), int(Pipe.S_CAL), int(Pipe.ALL)
_MEMBER = np.zeros(256, dtype=bool)  # pipes on which pipe_barrier(PIPE_ALL) puts a node when they are busy
_MEMBER[_ALL_PIPES] = True


def node_pipe(kind: np.ndarray, pipe: np.ndarray, dst_pipe: np.ndarray) -> np.ndarray:
    """The pipe of a one-node sync event's node (``make_nodes``'s rules); -1 for the others."""
    out = scalar_to_cal(pipe.astype(np.int64))
    out = np.where(_IS_FLAG_WAIT[kind], dst_pipe, out)
    out = np.where(_IS_OWN_PIPE_WAIT[kind], pipe, out)
    out = np.where(kind == EventKind.SOFT_SET, _S_CAL, out)
    return np.where(_IS_ONE_NODE[kind], out, -1)


def place(
    kind: np.ndarray,
    block_start: np.ndarray,
    sync_pipe: np.ndarray,
    sync_dst: np.ndarray,
    access_pipe: np.ndarray,
    access_serial: np.ndarray,
    native: object | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For complete blocks (events ``kind`` in program order, one block after the other, each starting where
    ``block_start`` is set; the sync events' ``sync_pipe`` and ``sync_dst``, and the accesses' ``access_pipe`` and
    ``access_serial``, in the same order): per access, the sync nodes of its pipe before it in its block, the
    PIPE_S nodes before it, the barrier marks on its pipe before it, and msSanitizer's pipeSerialNo (a running
    count of distinct instructions on its pipe, of which only differences within a (block, pipe) are used).
    ``native``: the compiled module (sanitizerd/native/_racecheck.c), which counts them in one pass."""
    columns = (kind, block_start, sync_pipe, sync_dst, access_pipe, access_serial)
    if native is not None and kind.size and block_start[0] and tuple(c.dtype for c in columns) == _PLACE_DTYPES:
        return _place_native(native, *columns)
    is_sync = kind >= EventKind.SET_FLAG
    is_access = kind <= EventKind.WRITE
    syncs_before = np.cumsum(is_sync)  # per event: sync events up to it (the same as before it, for an access)
    start_at = np.flatnonzero(block_start)
    block = np.cumsum(block_start) - 1
    # Per access: sync events before it in the range, and before its block's start.
    before = syncs_before[is_access]
    start_syncs = (syncs_before - is_sync)[start_at][block[is_access]]
    del syncs_before, block
    sk = kind[is_sync]
    one = node_pipe(sk, sync_pipe, sync_dst)
    every = (sk == EventKind.PIPE_BARRIER) & (sync_pipe == _ALL)
    sync_all = sk == EventKind.SOFT_SYNC_ALL
    mark = ((sk == EventKind.PIPE_BARRIER) & (sync_pipe != _ALL)) | (sk == EventKind.CROSS_SET)
    mark_pipe = scalar_to_cal(sync_pipe.astype(np.int64))
    del sk

    def counted(per_sync: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per access (of ``rows``), how many of its block's sync events before it ``per_sync`` marks."""
        running = np.concatenate(([0], np.cumsum(per_sync, dtype=np.int64)))
        if rows is None:
            return running[before] - running[start_syncs]
        return running[before[rows]] - running[start_syncs[rows]]

    issued = counted((one == _S) | every | sync_all)  # a PIPE_ALL barrier's and a SyncAll's waiting half
    pipe = scalar_to_cal(access_pipe.astype(np.int64))
    seg = np.zeros(pipe.size, dtype=np.int64)
    barriers = np.zeros(pipe.size, dtype=np.int64)
    pipe_index = np.zeros(pipe.size, dtype=np.int64)
    for p in np.unique(pipe).tolist():
        on = np.flatnonzero(pipe == p)
        seg[on] = counted((one == p) | (every & _MEMBER[p]) | (sync_all & (p == _S_CAL)), on)
        barriers[on] = counted(mark & (mark_pipe == p), on)
        serial = access_serial[on]
        new = np.ones(on.size, dtype=np.int64)
        new[1:] = serial[1:] != serial[:-1]
        pipe_index[on] = np.cumsum(new)
    return seg, issued, barriers, pipe_index


# The columns' dtypes the compiled loop reads (HeldColumns'); any other goes to numpy's path, never cast.
_PLACE_DTYPES = tuple(np.dtype(t) for t in (np.uint8, bool, np.uint8, np.uint8, np.uint8, np.uint64))
_TABLES = np.concatenate([t.astype(np.uint8) for t in (_IS_ONE_NODE, _IS_FLAG_WAIT, _IS_OWN_PIPE_WAIT, _MEMBER)])
_CONSTANTS = (
    _S, _S_CAL, _ALL, int(EventKind.SET_FLAG), int(EventKind.WRITE), int(EventKind.PIPE_BARRIER),
    int(EventKind.SOFT_SYNC_ALL), int(EventKind.CROSS_SET), int(EventKind.SOFT_SET),
)  # fmt: skip


def _place_native(
    native: object,
    kind: np.ndarray,
    block_start: np.ndarray,
    sync_pipe: np.ndarray,
    sync_dst: np.ndarray,
    access_pipe: np.ndarray,
    access_serial: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``place`` in one pass (the compiled loop), with the same node rules: the tables it reads are this module's."""
    m = access_pipe.size
    out = tuple(np.empty(m, dtype=np.int64) for _ in range(4))
    native.place(  # type: ignore[attr-defined]
        *(np.ascontiguousarray(c) for c in (kind, block_start, sync_pipe, sync_dst, access_pipe, access_serial)),
        _TABLES, _CONSTANTS, *out,
    )  # fmt: skip
    return out  # type: ignore[return-value]
