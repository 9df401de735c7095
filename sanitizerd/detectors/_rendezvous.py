"""Who releases whom across blocks: cross-core flags, soft syncs, mstx cross-core flags (reference §2.2).

Given a kernel's cross-block sync nodes in arrival order, this works out for every waiting node the publishing
nodes it waits for (its *sources*), or that nothing ever releases it. The matching does not depend on when
things run: each protocol is a FIFO per key, and a barrier-like group releases its k-th wait entry once every
member has made its k-th set. Sync kernels are few per kernel, so this is plain Python over them, linear in
them: a group's targets are listed only when a round completes, never per set (a SyncAll over thousands of
blocks would make that quadratic).

FFTS modes (``CROSS_SET.mode``):
- 0: every block of the setter's type (AIV or AIC) sets the flag; the k-th sets of all of them release the
  k-th wait of each.
- 1: the two vector sub-blocks of one AI core (AIV ``2j`` and ``2j+1``) release each other.
- 2: AIV and AIC of one AI core: an AIC set releases its sub-blocks (AIV ``2c``, ``2c+1``, or ``c`` with one
  sub-block per core); the AIC is released once each of its sub-blocks has set.
- 4: as 2, for ``set_intra_block``/``wait_intra_block``, in a flag space of its own.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from sanitizerd_protocol.records import BlockType, EventKind

_AIV, _AIC = int(BlockType.AIV), int(BlockType.AIC)


@dataclass(slots=True)
class Matching:
    """``sources[node]``: the nodes whose publication releases ``node``; ``stuck``: waits nothing releases;
    ``free``: waits that release themselves (an mstx "is more" wait with nothing pending, a first GET_BUF)."""

    sources: dict[int, list[int]] = field(default_factory=dict)
    stuck: list[int] = field(default_factory=list)
    free: list[int] = field(default_factory=list)


def match_cross(
    node: np.ndarray,
    kind: np.ndarray,
    block_type: np.ndarray,
    block_id: np.ndarray,
    flag: np.ndarray,
    mode: np.ndarray,
    sub_blocks: np.ndarray,
    address: np.ndarray,
    is_wait: np.ndarray,
    present: set[tuple[int, int]],
) -> Matching:
    """Match cross-block syncs. Arrays are per sync node, in arrival order; ``present`` holds the
    (block type, block id) pairs that sent events in this kernel (the members of mode-0 and SyncAll groups)."""
    entries: dict[tuple, list[tuple[int, list[int]]]] = defaultdict(list)  # wait key -> (order, sources)
    waits: dict[tuple, list[int]] = defaultdict(list)
    members: dict[int, list[int]] = defaultdict(list)  # block type -> sorted ids present
    for btype, bid in sorted(present):
        members[btype].append(bid)
    groups = _Groups()
    result = Matching()
    mstx = _Fifo(result)
    for i in range(node.size):
        n, k, bt, bid = int(node[i]), int(kind[i]), int(block_type[i]), int(block_id[i])
        f, m = int(flag[i]), int(mode[i])
        if k == EventKind.CROSS_WAIT:
            waits[("intra" if m == 4 else "ffts", f, bt, bid)].append(n)
        elif k == EventKind.CROSS_SET:
            space = "intra" if m == 4 else "ffts"
            for group_key, targets, size in _ffts_targets(bt, bid, m, int(sub_blocks[i]), members):
                groups.add((space, f, *group_key), (bt, bid), n, i, targets, size, entries, (space, f))
        elif k == EventKind.SOFT_SET:
            entries[("ib", int(flag[i]), bt, bid)].append((i, [n]))
        elif k == EventKind.SOFT_WAIT:
            waits[("ib", int(flag[i]), bt, int(address[i]))].append(n)
        elif k == EventKind.SOFT_SYNC_ALL:
            if is_wait[i]:
                waits[("softall", 0, bt, bid)].append(n)
            else:
                used = int(address[i])
                ids = members[bt]
                size = bisect_left(ids, used) if used else len(ids)  # the first ``used`` blocks, or all
                targets = ((bt, b) for b in ids[:size])
                groups.add(("softall", bt, used), (bt, bid), n, i, targets, size, entries, ("softall", 0))
        elif k in (EventKind.MSTX_CROSS_SET, EventKind.MSTX_CROSS_WAIT):
            mstx.event((int(address[i]), f), n, k == EventKind.MSTX_CROSS_WAIT, bool(m & 1))
    for key, queue in waits.items():
        released = sorted(entries.get(key, []), key=lambda entry: entry[0])
        for j, wait in enumerate(queue):
            if j < len(released):
                result.sources[wait] = released[j][1]
            else:
                result.stuck.append(wait)
    mstx.finish()
    return result


def _ffts_targets(
    bt: int, bid: int, mode: int, sub: int, members: dict[int, list[int]]
) -> list[tuple[tuple, Iterable[tuple[int, int]], int]]:
    """For one FFTS set: (group key, the blocks a completed round of the group releases, the group's size). A
    round completes when each member of the group has set once more."""
    sub = 2 if sub >= 2 else 1
    if mode == 0:  # every block of the type: listed only if this set completes a round
        return [(("all", bt), ((bt, b) for b in members[bt]), len(members[bt]))]
    if mode == 1:
        first = bid - bid % 2
        pair = [b for b in (first, first + 1) if b in members[bt]] if sub == 2 else [bid]
        return [(("pair", bt, pair[0]), [(bt, b) for b in pair], len(pair))]
    if mode in (2, 4):
        if bt == _AIC:  # the cube releases each of its vector sub-blocks on its own
            subs = [2 * bid, 2 * bid + 1] if sub == 2 else [bid]
            return [(("cube", bid, v), [(_AIV, v)], 1) for v in subs]
        core = bid // 2 if sub == 2 else bid
        return [(("vec", core, sub), [(_AIC, core)], sub)]
    return []


class _Groups:
    """Rounds of barrier-like groups: the k-th set of every member makes the k-th release."""

    def __init__(self) -> None:
        self.sets: dict[tuple, dict[tuple[int, int], list[int]]] = defaultdict(lambda: defaultdict(list))
        self.released: dict[tuple, int] = defaultdict(int)
        self.ahead: dict[tuple, int] = defaultdict(int)  # members that have made the next round's set

    def add(
        self,
        key: tuple,
        member: tuple[int, int],
        node: int,
        order: int,
        targets: Iterable[tuple[int, int]],
        size: int,
        entries: dict[tuple, list[tuple[int, list[int]]]],
        space: tuple,
    ) -> None:
        rounds = self.sets[key]
        rounds[member].append(node)
        k = self.released[key]
        if len(rounds[member]) == k + 1:
            self.ahead[key] += 1
        if len(rounds) < size or self.ahead[key] < len(rounds):
            return
        sources = [nodes[k] for nodes in rounds.values()]
        self.released[key] = k + 1
        self.ahead[key] = sum(1 for nodes in rounds.values() if len(nodes) > k + 1)  # once per round
        for btype, bid in targets:
            entries[(*space, btype, bid)].append((order, sources))


class _Fifo:
    """mstx cross-core flags: FIFO per (address, flag) in arrival order; an "is more" wait with nothing pending
    does not block."""

    def __init__(self, result: Matching) -> None:
        self.result = result
        self.pending: dict[tuple[int, int], deque[int]] = defaultdict(deque)
        self.waiting: dict[tuple[int, int], deque[int]] = defaultdict(deque)

    def event(self, key: tuple[int, int], node: int, wait: bool, more: bool) -> None:
        if not wait:
            if self.waiting[key]:
                self.result.sources[self.waiting[key].popleft()] = [node]
            else:
                self.pending[key].append(node)
        elif self.pending[key]:
            self.result.sources[node] = [self.pending[key].popleft()]
        elif more:
            self.result.free.append(node)
        else:
            self.waiting[key].append(node)

    def finish(self) -> None:
        for queue in self.waiting.values():
            self.result.stuck.extend(queue)
