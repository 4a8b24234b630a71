"""Which intervals hold which, on threads where they need not nest (start/end NVTX ranges).

Both questions here are one question about rows put in an order: for each asking row q, the
earlier rows p (p < q in that order) whose key y[p] >= y[q]. With the rows in (thread, start)
order and y the rank of (thread, end), those are the intervals of q's thread that start no
later and end no earlier: the ones that hold it. Answered for all rows together by a merge
sort of the rows by falling y, one numpy pass per level (log2 of the rows): at the pass that
merges two blocks of 2**L rows, each row of the right block meets the rows of the left block
(each pair p < q meets once, at the highest bit where their places differ), and the left rows
with y >= y[q] are those the merge puts before q. No pass depends on how deep or how overlapped
the intervals are, and none holds more than a few arrays of the rows (and, for
`earlier_holders`, of the pairs it returns), where a join of each interval with every other of
its thread holds the square of the thread's rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

NONE = np.iinfo(np.int64).max  # earlier_min: no earlier row holds this one


def _merges(y: np.ndarray, rows: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Per pass: (level, the rows (increasing places in `y`'s order) sorted by (block of
    2**(level + 1) places, falling y; the left half's first among equal y), the permutation of
    the last pass's order that gives it, and whether each is of the block's left half)."""
    span = int(y.max(initial=0)) + 1
    order = rows.astype(np.int64, copy=True)
    yo = y[order]
    for level in range(int(order[-1]).bit_length() if len(order) else 0):
        # each half is sorted by falling y already (rows in place order at the first pass), and
        # a stable sort keeps the left half first among equal y: a merge of runs
        key = (order >> (level + 1)) * span + (span - 1 - yo)
        perm = np.argsort(key, kind="stable")
        del key
        order, yo = order[perm], yo[perm]
        yield level, order, perm, ((order >> level) & 1) == 0


def _block_base(order: np.ndarray, level: int, counts: np.ndarray) -> np.ndarray:
    """Per place of `order` (a pass's): `counts` (a running count along it) as it stood before
    the first place of the place's block."""
    block = order >> (level + 1)
    head = np.ones(len(order), dtype=bool)
    head[1:] = block[1:] != block[:-1]
    starts = np.flatnonzero(head)
    return counts[starts][np.cumsum(head) - 1]


def earlier_min(y: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per row q (in the rows' order): the smallest of `value` (non-negative) over the rows
    p < q with y[p] >= y[q]; NONE where there is none."""
    n = len(y)
    best = np.full(n, NONE, dtype=np.int64)
    top = int(value.max(initial=0)) + 1
    vo = value.astype(np.int64, copy=True)
    for level, order, perm, left in _merges(y, np.arange(n, dtype=np.int64)):
        vo = vo[perm]
        # the smallest left value so far within each block (right rows count as `top`): a
        # running minimum once every earlier block is lifted above this one
        lift = (order >> (level + 1)) * (top + 1)
        run = np.minimum.accumulate(np.where(left, vo, top) - lift)
        run += lift
        del lift
        right = np.flatnonzero(~left)
        got = run[right]
        hit = got < top
        q = order[right[hit]]
        best[q] = np.minimum(best[q], got[hit])  # a row is on the right once a pass
    return best


class TooMany(Exception):
    """earlier_holders' pairs would pass its limit: `counts`, the pairs of each asking row (in
    `asks`' order), counted without making them."""

    def __init__(self, counts: np.ndarray):
        self.counts = counts
        super().__init__(f"{int(counts.sum()):,} pairs")


def earlier_holders(
    y: np.ndarray, points: np.ndarray, asks: np.ndarray, limit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Every (asking row q, point p) with p < q and y[p] >= y[q]: `points` and `asks` are
    increasing rows of `y`'s order, none in both. Grouped by pass, not sorted. Past `limit`
    pairs, TooMany, once the rest are counted (no pass's pairs are made past it)."""
    rows = np.concatenate([points, asks]).astype(np.int64, copy=False)
    is_point = np.zeros(len(rows), dtype=bool)
    is_point[: len(points)] = True
    at = np.argsort(rows, kind="stable")
    rows, po = rows[at], is_point[at]
    del at, is_point
    qs, ps = [], []
    count = np.zeros(len(y), dtype=np.int64)
    total, over = 0, False
    for level, order, perm, left in _merges(y, rows):
        po = po[perm]
        held = left & po  # the left half's points, in falling y within each block
        before = np.cumsum(held)
        base = _block_base(order, level, before - held)
        ask = np.flatnonzero(~left & ~po)
        width = (before - base)[ask]  # the left points the merge put before each right ask
        ask, width = ask[width > 0], width[width > 0]
        count[order[ask]] += width
        total += int(width.sum())
        over = over or (limit is not None and total > limit)
        if len(ask) and not over:
            # each ask's holders: the block's left points from the first, `width` of them
            first = base[ask]
            step = np.ones(int(width.sum()), dtype=np.int64)
            head = np.cumsum(width) - width
            step[head[1:]] = first[1:] - (first[:-1] + width[:-1] - 1)
            step[0] = first[0]
            qs.append(np.repeat(order[ask], width))
            ps.append(order[held][np.cumsum(step)])
    if over:
        raise TooMany(count[asks])
    if not qs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(qs), np.concatenate(ps)


def thread_end_rank(tid: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The dense rank of each (thread, end): of two rows in (thread, start) order, the earlier
    one's rank is at least the later one's exactly when both are on one thread and the earlier
    one ends no earlier (the key of the functions above)."""
    by_end = np.lexsort((end, tid))
    new = np.ones(len(tid), dtype=np.int64)
    new[1:] = (tid[by_end][1:] != tid[by_end][:-1]) | (end[by_end][1:] != end[by_end][:-1])
    rank = np.empty(len(tid), dtype=np.int64)
    rank[by_end] = np.cumsum(new)
    return rank


def tightest_holders(tid: np.ndarray, start: np.ndarray, end: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per row: the row of its parent, -1 for none, where intervals of a thread may overlap.

    nsys's parent is the interval of the same thread that holds the child (starts no later, ends
    no earlier) with the smallest (c.start - p.start) + (p.end - c.end): the shortest one. Of
    equally short ones the one that starts last is taken, and of two with equal bounds only the
    one with the smaller id holds the other: intervals with the same bounds are then a chain in
    id order, as a push/pop nesting makes them, and none is a parent of its own parent (nsys
    breaks its ties in the order rows come, where two ranges with the same bounds can name each
    other, and neither is then at any level). An interval that holds another comes before it in
    (thread, start, longer first, id) order: the parents are the shortest earlier intervals that
    end no earlier (earlier_min). A range named twice (its domain created on two threads) is two
    rows of one id: neither is the other's parent, each has the first one's."""
    order = np.lexsort((ids, -end, start, tid))
    # the rows of one id are next to each other in this order
    twin = np.flatnonzero(ids[order][1:] == ids[order][:-1]) + 1
    if twin.size:
        run = np.arange(len(order))
        run[twin] = 0
        head = np.empty(len(order), dtype=np.int64)
        head[order] = order[np.maximum.accumulate(run)]  # per row: the first row of its id
        keep = np.ones(len(ids), dtype=bool)
        keep[order[twin]] = False
        kept = np.flatnonzero(keep)
        once = tightest_holders(tid[keep], start[keep], end[keep], ids[keep])
        of_kept = np.where(once >= 0, kept[np.maximum(once, 0)], -1)  # in rows of all
        return of_kept[(np.cumsum(keep) - 1)[head]]
    n = len(ids)
    y = thread_end_rank(tid, end)
    # each interval's place among all by length, then latest start, then largest id: the
    # smallest place among an interval's holders is its parent
    by_length = np.lexsort((-ids, -start, end - start))
    place = np.empty(n, dtype=np.int64)
    place[by_length] = np.arange(n, dtype=np.int64)
    best = earlier_min(y[order], place[order])
    parent = np.full(n, -1, dtype=np.int64)
    found = best != NONE
    parent[order[found]] = by_length[best[found]]
    return parent


def ancestry(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, by its `parent` rows (-1 at a root; no cycle): how many ancestors it has, and the
    row of its root (its own at a root). Pointer jumping: each round adds the count up to the
    row's farthest known ancestor and jumps there, so the rounds are log2 of the depth."""
    level = (parent >= 0).astype(np.int64)
    up = parent.astype(np.int64, copy=True)
    top = np.where(up >= 0, up, np.arange(len(up), dtype=np.int64))  # the ancestor `level` rows up
    todo = np.flatnonzero(up >= 0)
    while todo.size:
        above = up[todo]
        level[todo] += level[above]
        top[todo] = top[above]
        up[todo] = up[above]
        todo = todo[up[todo] >= 0]
    return level, top
