"""The NVTX range tree aggregated by path: for every distinct path of ranges, the number of
instances, their CPU time, the GPU time of the kernels launched inside them (any thread) and
the kernel count.

PyTorch op markers are kept, named by their op only (`aten::linear`, not its seq/op_id/sizes),
so millions of unique marker strings collapse into a few thousand paths. Paths get integer ids
level by level (parent path id, label code), so no per-range path string is ever built.

Ranges of a thread without user ranges (the autograd engine's `evaluate_function: XBackward0`)
hang under the user range the main thread had open when they began (`backward_pass`), the
phase whose GPU time they are part of, instead of as top-level rows beside it.

A path's GPU time counts every GPU op launched while one of its instances was open, each op
once (the instances' windows are merged), so `path_ops` lists exactly the ops behind the
number: the Kernels view opened from a range shows that count and that time.
"""

from __future__ import annotations

from typing import TypeGuard

import numpy as np
import polars as pl

from kview.analysis import containment
from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import ELIDED, PATH_HEAD, PATH_TAIL
from kview.analysis.gpu_time import gpu_time_in, launch_timeline, merge_intervals
from kview.analysis.summary_stats import at_once, even_bounds, in_slices, small_blocks
from kview.derived import derived, frames
from kview.trace import Trace

SCHEMA = {
    "path_id": pl.Int64,
    "parent_id": pl.Int64,
    "Depth": pl.Int64,
    "Name": pl.String,
    "Path": pl.String,
    "Instances": pl.UInt32,
    "CPU (ns)": pl.Int64,
    "GPU (ns)": pl.Int64,
    "GPU ops": pl.Int64,
    "_first_start": pl.Int64,
    "_first_end": pl.Int64,
    "_first_tid": pl.Int64,
}
LEVEL_ROWS = 1 << 18  # ranges of a level _path_ids keys (and numbers) on one thread at a time
LEVEL_THREADS = 8
WINDOWS = pl.Schema({"path_id": pl.Int64, "start": pl.Int64, "end": pl.Int64})


def _rows_of(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of each of `wanted` in `ids` (distinct integers), -1 where it is not there."""
    if ids.size == 0:
        return np.full(wanted.size, -1, dtype=np.int64)
    lo, hi = int(ids.min()), int(ids.max())
    if lo >= 0 and hi < 4 * ids.size + 1024:  # ids about as many as the rows: a table indexed by id
        row = np.full(hi + 1, -1, dtype=np.int64)
        row[ids] = np.arange(ids.size, dtype=np.int64)
        inside = (wanted >= 0) & (wanted <= hi)
        return np.where(inside, row[np.where(inside, wanted, 0)], -1)
    order = np.argsort(ids, kind="stable")
    at = np.minimum(np.searchsorted(ids, wanted, sorter=order), ids.size - 1)
    found = order[at]
    return np.where(ids[found] == wanted, found, -1)


def _number_level(
    rows: np.ndarray, prev_depth: object, of: tuple[np.ndarray, np.ndarray, np.ndarray, int], out: tuple, next_id: int
) -> int:
    """_path_ids' numbering of one level, the ranges `rows` (`prev_depth`: the level before's
    depth, None at the first): their path ids from `next_id` and their parents' written into
    `out` (pid, parent_pid); `of`: (up, depth, lc, labels). Its count of paths."""
    up, depth, lc, labels = of
    pid, parent_pid = out
    ppid = np.empty(rows.size, dtype=np.int64)
    key = np.empty(rows.size, dtype=np.int64)

    def keyed(lo: int, hi: int) -> None:
        for a, b in small_blocks(lo, hi):
            if prev_depth is None:
                ppid[a:b] = -1
            else:
                p = up[rows[a:b]]
                safe = np.maximum(p, 0)
                ppid[a:b] = np.where((p >= 0) & (depth[safe] == prev_depth), pid[safe], -1)
            np.multiply(ppid[a:b] + 1, labels, out=key[a:b])
            key[a:b] += lc[rows[a:b]]
            key[a:b] += 1

    def put(lo: int, hi: int) -> None:
        for a, b in small_blocks(lo, hi):
            pid[rows[a:b]] = number[a:b] + next_id
            parent_pid[rows[a:b]] = ppid[a:b]

    # the gathers and scatters in slices on threads (the numbering, one sort, stays whole): they
    # were one core's 0.5 s of the dense trace's 5.7M ranges
    bounds = even_bounds(rows.size, -(-rows.size // LEVEL_ROWS))
    in_slices(keyed, bounds, LEVEL_THREADS)
    keys, number = np.unique(key, return_inverse=True)
    number = number.reshape(-1)
    in_slices(put, bounds, LEVEL_THREADS)
    return int(keys.size)


def _path_ids(r: pl.DataFrame, up: np.ndarray | None = None) -> tuple[pl.Series, pl.Series]:
    """(pid, parent_pid) of every range of `r` (id, parent, depth, lc), in its rows' order: an
    integer per distinct path of labels from the root, numbered level by level (ascending
    depth) in the order (parent's path, label), nulls first. A parent counts where it is in the
    level before; elsewhere (or absent) the range starts a path as a root does. `up`: the row
    of each range's parent (-1: none) where the caller knows it, else searched by id.

    Every range is handled once, by row: the levels are slices of one stable sort by depth, and
    a level's paths are the distinct (parent's path, label) keys of one integer, so the cost
    follows the number of ranges, not ranges times depth, and no frame is joined on ids."""
    n = r.height
    depth = r["depth"].to_numpy()
    lc = r["lc"].fill_null(-1).to_numpy()
    if up is None:
        up = _rows_of(r["id"].to_numpy(), r["parent"].fill_null(-1).to_numpy())
    pid = np.full(n, -1, dtype=np.int64)
    parent_pid = np.full(n, -1, dtype=np.int64)
    if n and 0 <= int(depth.min()) and int(depth.max()) < 1 << 16:
        # depths are small: a stable sort of 8 or 16-bit integers is numpy's radix sort (a
        # third of int64's time), and the levels' sizes are counts of each depth
        by_depth = np.argsort(depth.astype(np.uint8 if int(depth.max()) < 1 << 8 else np.uint16), kind="stable")
        sizes = np.bincount(depth)
        cuts = np.cumsum(sizes[sizes > 0])[:-1]
    else:
        by_depth = np.argsort(depth, kind="stable")
        d = depth[by_depth]
        cuts = np.flatnonzero(d[1:] != d[:-1]) + 1
    labels = int(lc.max()) + 2 if n else 1  # lc + 1 in 0 .. labels - 1: one key (parent path, label)
    next_id = 0
    prev_depth = None
    for rows in np.split(by_depth, cuts) if n else ():
        next_id += _number_level(rows, prev_depth, (up, depth, lc, labels), (pid, parent_pid), next_id)
        prev_depth = depth[rows[0]]
    return (
        pl.Series("pid", pid, dtype=pl.Int64),
        pl.Series("parent_pid", parent_pid, dtype=pl.Int64).set(pl.Series(parent_pid < 0), None),
    )


def _path_text(head: tuple, tail: tuple, n: int) -> str:
    gap = n - len(head) - len(tail)
    return " > ".join(head + ((f"{ELIDED} {gap} levels",) if gap else ()) + tail)


def texts_from_parents(deepest: object) -> TypeGuard[int]:
    """Whether each Path of a tree whose deepest level is `deepest` is its parent's Path, " > "
    and its Name (no path leaves a level out): `child_path`."""
    return isinstance(deepest, int) and deepest < PATH_HEAD + PATH_TAIL


def child_path(parent: pl.Expr) -> pl.Expr:
    """The Path of a row (its `Name`) under a path whose Path is `parent`, where
    texts_from_parents holds."""
    return pl.concat_str([parent, pl.lit(" > "), pl.col("Name")])


def _path_texts(g: pl.DataFrame) -> pl.Series:
    """`Path` of each row of `g` (pid, parent_pid, depth, Name; sorted by pid, parents first):
    its names from the root joined by ` > `; a path deeper than PATH_HEAD + PATH_TAIL levels
    shows its outer and inner levels and how many it leaves out (as the Kernels view)."""
    deepest = g["depth"].max()
    if texts_from_parents(deepest):
        # no path leaves a level out: a path's text is its parent's, ` > ` and its name, made
        # a level at a time (a million paths on the dense trace; a loop over them took 3 s)
        levels: list[pl.DataFrame] = []
        for d in range(deepest + 1):
            level = g.filter(pl.col("depth") == d)
            if levels:
                level = level.join(
                    levels[-1].rename({"pid": "parent_pid", "Path": "_parent"}),
                    on="parent_pid",
                    how="left",
                    maintain_order="left",
                )
                text = (
                    pl.when(pl.col("parent_pid").is_null())
                    .then(pl.col("Name"))
                    .otherwise(child_path(pl.col("_parent")))
                )
            else:
                text = pl.col("Name")
            levels.append(level.select("pid", text.alias("Path")))
        made = pl.concat(levels)
        if made.height == g.height and made["pid"].equals(g["pid"]):  # levels numbered in depth order
            return made["Path"]
    chain: dict[int, tuple] = {}
    for pid, parent, name in g.select("pid", "parent_pid", "Name").iter_rows():
        head, tail, n = chain[parent] if parent is not None else ((), (), 0)
        chain[pid] = (
            (head + (name,), (), n + 1) if len(head) < PATH_HEAD else (head, (tail + (name,))[-PATH_TAIL:], n + 1)
        )
    return pl.Series("Path", [_path_text(*chain[p]) for p in g["pid"].to_list()], dtype=pl.String)


def path_table(trace: Trace) -> pl.DataFrame:
    """One row per distinct path of ranges (SCHEMA), parents before children."""
    return paths_and_windows(trace)[0]


@derived(key="nvtx_tree.children", version="2", persist=True)
def children_order(trace: Trace) -> pl.DataFrame:
    """The rows of `path_table` as the tree lists them: by parent (the top level first), a
    parent's children most GPU time first, ties in path order (`row`: the row of path_table,
    `parent_id`: its parent, -1 at the top). A node's children are one slice of it (two
    binary searches), so showing a level of a million-path tree sorts nothing; kept in the frame
    cache beside the tree."""
    return tree_order(path_table(trace))


def tree_order(paths: pl.DataFrame) -> pl.DataFrame:
    """`children_order` of the table `paths` (path_table's parent_id and GPU (ns), its other
    columns left out or not)."""
    return (
        paths.select(
            pl.int_range(pl.len(), dtype=pl.UInt32).alias("row"),
            pl.col("parent_id").fill_null(-1),
            "GPU (ns)",
        )
        .sort(["parent_id", "GPU (ns)", "row"], descending=[False, True, False])
        .drop("GPU (ns)")
    )


def path_windows(trace: Trace) -> pl.DataFrame:
    """The merged windows of each path's instances (path_id, start, end), sorted by path and
    start: what a path's GPU time counts."""
    return paths_and_windows(trace)[1]


def path_ops(trace: Trace, path_id: int) -> pl.Series:
    """Idx of every GPU op path `path_id`'s GPU time counts."""
    return ops_in_windows(path_windows(trace), launch_timeline(trace), path_id)


def ops_in_windows(windows: pl.DataFrame, timeline: pl.DataFrame, path_id: int) -> pl.Series:
    """Idx of the ops of `timeline` (Idx, t sorted) launched inside a window of `path_id`."""
    pids = windows["path_id"].to_numpy()
    a, b = np.searchsorted(pids, path_id, side="left"), np.searchsorted(pids, path_id, side="right")
    t = timeline["t"].to_numpy()
    lo = np.searchsorted(t, windows["start"].to_numpy()[a:b], side="left")
    hi = np.searchsorted(t, windows["end"].to_numpy()[a:b], side="right")
    n = hi - lo
    # the positions lo[i] .. hi[i]-1 of every window, without a loop: a running index that jumps
    # at each window's first position (the windows are disjoint, so no op comes twice)
    keep = n > 0
    lo, n = lo[keep], n[keep]
    steps = np.ones(int(n.sum()), dtype=np.int64)
    if steps.size:
        starts = np.concatenate([[0], np.cumsum(n)[:-1]])
        steps[starts] = lo - np.concatenate([[0], lo[:-1] + n[:-1] - 1])
    return timeline["Idx"].gather(np.cumsum(steps)).alias("Idx")


def _merged_by_groups(windows: pl.DataFrame) -> pl.DataFrame:
    """`merge_intervals` by path itself, for the windows the sweep below does not take."""
    return merge_intervals(windows, ["path_id"]).sort(["path_id", "start"]).select(list(WINDOWS)).cast(WINDOWS)


def _merge(windows: pl.DataFrame) -> pl.DataFrame:
    """Union of [start, end] per path_id (touching windows merge), sorted by path and start:
    `merge_intervals` by path, as numpy sorts of (path, start) and (path, end) keys. The
    starts and the ends are sorted apart: in a path, the k-th start is at most the k-th end,
    and the union has a gap after the k-th end exactly where that end comes before the
    (k+1)-th start (every window begun by then has ended). Two plain sorts of integers are
    ~5x faster than a sort of rows by two keys (np.lexsort), and nothing is gathered."""
    if windows.height == 0 or windows.select(pl.any_horizontal(pl.all().is_null().any())).item():
        return _merged_by_groups(windows)
    pid, s, e = (windows[c].to_numpy() for c in ("path_id", "start", "end"))
    if (e < s).any():  # a window ending before it starts: merge_intervals' own (order-dependent) answer
        return _merged_by_groups(windows)
    lo = int(s.min())
    bits = max(int(e.max()) - lo, 1).bit_length()
    if int(pid.min()) < 0 or int(pid.max()).bit_length() + bits > 62:  # keys would not fit an Int64
        return _merged_by_groups(windows)
    # key: the path above the time from the earliest start; made in place (a million-row array
    # is ~10k fresh pages, each a page fault)
    starts = np.left_shift(pid, bits, dtype=np.int64)
    ends = np.subtract(e, lo, dtype=np.int64)
    ends |= starts
    starts |= np.subtract(s, lo, dtype=np.int64)
    at_once([starts.sort, ends.sort], 2)  # two cores' sorts (numpy's sort releases the GIL)
    path = starts >> bits
    starts &= (1 << bits) - 1
    ends &= (1 << bits) - 1
    starts += lo
    ends += lo
    new = np.empty(len(path), dtype=bool)  # a merged window starts here
    new[0] = True
    np.not_equal(path[1:], path[:-1], out=new[1:])
    new[1:] |= ends[:-1] < starts[1:]
    if new.all():  # nothing merges (the usual case): the sorted keys are the windows
        return pl.DataFrame({"path_id": path, "start": starts, "end": ends}, schema=WINDOWS)
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(path) - 1]
    return pl.DataFrame({"path_id": path[first], "start": starts[first], "end": ends[last]}, schema=WINDOWS)


def _preorder(other: pl.DataFrame) -> bool:
    """Whether the ranges `other` (global_tid, start, parent) are each thread's in preorder:
    the threads one after another, each beginning with a root, starts ascending in each."""
    tid, start = pl.col("global_tid"), pl.col("start")
    new_thread = tid != tid.shift(1)
    return bool(
        other.select(
            (tid.diff() >= 0).all()
            & (pl.col("parent").is_null() | ~new_thread.fill_null(True)).all()
            & ((start.diff() >= 0) | new_thread.fill_null(True)).all()
        ).item()
    )


def _in_preorder(other: pl.DataFrame) -> pl.DataFrame:
    """`other` with the top-level range open at each range's start (`root`), its ranges in
    preorder (_preorder): the last root at or before its row."""
    return other.with_columns(pl.when(pl.col("parent").is_null()).then(pl.col("id")).forward_fill().alias("root"))


def _by_search(other: pl.DataFrame, roots: pl.DataFrame) -> pl.DataFrame:
    """`other` with `root` (as _in_preorder), its rows sorted by start, each root searched."""
    tops = roots.select("global_tid", pl.col("start").alias("tstart"), pl.col("id").alias("root")).sort("tstart")
    return other.sort("start").join_asof(
        tops, left_on="start", right_on="tstart", by="global_tid", strategy="backward", check_sortedness=False
    )


def _moved(other: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    """pos, new_depth and new_parent of the ranges of `other` (with `root`) whose root moves
    under a user range (`found`: root, new_parent, pdepth)."""
    return (
        other.select("pos", "id", "depth", "parent", "root")
        .join(found, on="root", how="inner")
        .select(
            "pos",
            (pl.col("depth") + pl.col("pdepth") + 1).alias("new_depth"),
            pl.when(pl.col("id") == pl.col("root"))
            .then(pl.col("new_parent"))
            .otherwise(pl.col("parent"))
            .alias("new_parent"),
        )
        .drop_nulls("new_depth")
    )


def _moved_in_preorder(
    other: pl.DataFrame, roots: pl.DataFrame, found: pl.DataFrame, at: np.ndarray
) -> tuple[np.ndarray, pl.Series, np.ndarray, pl.Series, np.ndarray]:
    """What `_moved(_in_preorder(other), found)` writes (`at`: the row of each found user
    range), where `other` is in preorder (_preorder) and each root is in `found` at most once:
    (pos, new_depth) of the moved ranges, and (pos, new_parent, the new parent's row) of the
    moved roots, the only ranges whose parent changes. A row's root is the last root at or
    before it, so the roots' index of every row is a running count of roots."""
    is_root = other["parent"].is_null().to_numpy()
    of_row = np.cumsum(is_root)
    of_row -= 1  # the preorder's first row is a root: never -1
    k = _rows_of(roots["id"].to_numpy(), found["root"].to_numpy())
    keep = (k >= 0) & found["pdepth"].is_not_null().to_numpy()
    k = k[keep]
    has = np.zeros(roots.height, dtype=bool)
    has[k] = True
    up_depth = np.zeros(roots.height, dtype=np.int64)
    up_depth[k] = found["pdepth"].fill_null(0).to_numpy()[keep]
    pos = other["pos"].to_numpy()
    depth = other["depth"]
    new_depth = up_depth[of_row]
    new_depth += depth.to_numpy()
    new_depth += 1
    if not has.all():  # the ranges under a root that moves (on dense_x25, every root moves)
        rows = np.flatnonzero(has[of_row])
        pos, new_depth = pos[rows], new_depth[rows]
    # roots' rows in `other` in order: the k-th root is `roots`' k-th row
    root_pos = other["pos"].to_numpy()[np.flatnonzero(is_root)[k]]
    new_parent = found["new_parent"].filter(pl.Series(keep)).cast(other.schema["parent"])
    return pos, pl.Series("new_depth", new_depth).cast(depth.dtype), root_pos, new_parent, at[keep]


def _repeats(moved: pl.DataFrame, n: int) -> bool:
    """Whether a row of the `n` ranges moves twice in `moved` (`_moved`: under two user ranges)."""
    pos = moved["pos"].to_numpy()
    return bool(pos.size) and int(np.bincount(pos, minlength=n).max()) > 1


def _uncrossed(nesting: nv.Nesting, tree: pl.DataFrame, crossing: np.ndarray) -> tuple[pl.DataFrame, np.ndarray]:
    """`tree` (nesting's frame) and the parents' rows with the ranges of the threads `crossing`
    (whose push/pop ranges do not nest: a range never popped crosses those around it) under
    their tightest enclosing range on their thread, nsys's parent, as the NVTX reports take
    them; depths follow. Their push/pop nesting's parents are not ranges around them."""
    spans = [nesting.threads[int(t)] for t in crossing]
    rows = np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in spans])
    part = tree.select("global_tid", "start", "end", "id")[rows]
    ids = part["id"].to_numpy()
    # a thread's rows are one span of the tree: its ranges' parents are among them
    parent = containment.tightest_holders(
        part["global_tid"].to_numpy(), part["start"].to_numpy(), part["end"].to_numpy(), ids
    )
    up = nesting.parent.astype(np.int64, copy=True)
    up[rows] = np.where(parent >= 0, rows[np.maximum(parent, 0)], -1)
    parent_id = pl.Series("parent", ids[np.maximum(parent, 0)], dtype=tree.schema["parent"])
    return tree.with_columns(
        tree["depth"].scatter(rows, pl.Series(containment.ancestry(parent)[0], dtype=tree.schema["depth"])),
        tree["parent"].scatter(rows, parent_id.set(pl.Series(parent < 0), None)),
    ), up


def _chain_roots(other: pl.DataFrame, up: np.ndarray) -> pl.DataFrame:
    """`other` (pos, id) with `root`: the id of the top-level range above each range by its
    parents' rows `up`, where the last root before a range in preorder need not be its own
    (ranges that cross)."""
    _, top = containment.ancestry(up)
    pos = other["pos"].to_numpy()
    return other.with_columns(other["id"].gather(_rows_of(pos, top[pos])).alias("root"))


def _placed(
    trace: Trace, tree: pl.DataFrame, up: np.ndarray | None = None, crossing: np.ndarray | None = None
) -> tuple[pl.DataFrame, np.ndarray | None]:
    """`tree` with the ranges of threads without user ranges moved under the user range open
    (in the same process) when their top-level range began; depths follow. With `up`, the
    row of each range's parent in `tree` (-1 at a root), also those rows after the move where
    they are known (else None): the path ids then need no search of the ranges' ids.
    `crossing`: threads whose parents are their tightest enclosing ranges (_uncrossed)."""
    user = tree["name_code"].is_in(nv.user_codes(trace)["name_code"].implode()).fill_null(False)
    users = tree.filter(user)
    user_threads = users["global_tid"].unique().implode()
    # the columns the move reads: a copy of most of five million ranges, not of every column
    other = (
        tree.select("id", "start", "global_tid", "depth", "parent")
        .with_row_index("pos")
        .filter(~pl.col("global_tid").is_in(user_threads))
    )
    roots = other.filter(pl.col("parent").is_null())
    if users.height == 0 or roots.height == 0:
        return tree, up
    found = nv.user_range_open_at(
        users, roots.select(pl.col("id").alias("call_id"), "global_tid", pl.col("start").alias("t"))
    )
    depth = tree["depth"]
    # the rows of the user ranges found: searched among the user ranges' ids (a few thousand
    # rows), not every range's
    user_rows = np.flatnonzero(user.to_numpy())
    at = _rows_of(users["id"].to_numpy(), found["id"].to_numpy())
    at = np.where(at >= 0, user_rows[np.maximum(at, 0)], -1)
    found = found.select(
        pl.col("call_id").alias("root"),
        pl.col("id").alias("new_parent"),
        pl.Series("pdepth", depth.to_numpy()[np.maximum(at, 0)], dtype=depth.dtype).set(pl.Series(at < 0), None),
    )
    chained = (
        crossing is not None
        and len(crossing) > 0
        and up is not None
        and bool(other["global_tid"].is_in(pl.Series(crossing, dtype=other.schema["global_tid"]).implode()).any())
    )
    fast = not chained and _preorder(other)
    if fast and found["root"].n_unique() == found.height:
        # each root under at most one user range: the moves by row, numpy gathers through the
        # index of each row's root among the roots (a join of the rows on their roots, and a
        # count of moves per row to find repeats, took 0.7 CPU s on dense_x25)
        pos, new_depth, root_pos, new_parent, new_up = _moved_in_preorder(other, roots, found, at)
        if up is not None:
            up = up.copy()
            up[root_pos] = new_up
        return tree.with_columns(depth.scatter(pos, new_depth), tree["parent"].scatter(root_pos, new_parent)), up
    if chained and up is not None:  # a range's root ends its chain of parents, not the last root before it
        moved = _moved(_chain_roots(other, up), found)
    else:
        moved = _moved(_in_preorder(other) if fast else _by_search(other, roots), found)
    repeated = _repeats(moved, tree.height)
    if fast and repeated:
        # a range under two user ranges: its rows repeat, in the order of the rows by start
        moved = _moved(_by_search(other, roots), found)
        repeated = _repeats(moved, tree.height)
    if repeated:
        twice = tree.select("id").gather(moved["pos"]).hstack(moved.drop("pos"))
        return (
            tree.join(twice, on="id", how="left", maintain_order="left")
            .with_columns(
                pl.coalesce("new_depth", "depth").alias("depth"),
                pl.when(pl.col("new_depth").is_not_null())
                .then(pl.col("new_parent"))
                .otherwise(pl.col("parent"))
                .alias("parent"),
            )
            .drop("new_depth", "new_parent")
        ), None
    # the moved rows' depths and parents written in place of theirs, by row (no join on ids)
    return tree.with_columns(
        depth.scatter(moved["pos"], moved["new_depth"]),
        tree["parent"].scatter(moved["pos"], moved["new_parent"]),
    ), None


def _per_path(r: pl.DataFrame, n: int) -> pl.DataFrame | None:
    """Per path id 0 .. n-1 of the ranges `r` (pid, parent_pid, lc, depth, start, end,
    global_tid), in path order: its parent's path, label and depth (one per path by its
    numbering), instances, CPU time and first instance (start, end, thread), by numpy counts
    and scatters indexed by path (a group-by and a sort of five million rows were ~1 CPU s on
    dense_x25). None where a null, a sum past 2**53 ns or a path with two instances at its
    first start leaves the answer to a group-by."""
    if n == 0 or any(r[c].null_count() for c in ("start", "end", "global_tid", "depth")):
        return None
    pid = r["pid"].to_numpy()
    start, end = r["start"].to_numpy(), r["end"].to_numpy()
    dur = end - start
    # float sums of integers: exact while every partial sum stays below 2**53
    if float(np.abs(dur).sum(dtype=np.float64)) >= 2.0**52:
        return None

    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, pid, start)
    rows = np.flatnonzero(start == first[pid])
    if rows.size != n:  # a path with two instances at its first start: the group-by's pick
        return None
    at = pid[rows]  # the path of each first instance: every path once

    def by_path(column: str) -> np.ndarray:
        """`column` of each path's first instance, by path: its parent, label and depth are any
        instance's (a path's worth of rows gathered, not every range's scattered)."""
        values = r[column].gather(rows).fill_null(-1).to_numpy()
        out = np.empty(n, dtype=values.dtype)
        out[at] = values
        return out

    parent, lc = by_path("parent_pid"), by_path("lc")
    return pl.DataFrame(
        {
            "pid": np.arange(n, dtype=np.int64),
            "parent_pid": pl.Series(parent, dtype=pl.Int64).set(pl.Series(parent < 0), None),
            "lc": pl.Series(lc, dtype=pl.Int64).set(pl.Series(lc < 0), None),
            "depth": by_path("depth"),
            "Instances": np.bincount(pid, minlength=n).astype(np.uint32),
            "CPU (ns)": np.bincount(pid, weights=dur, minlength=n).astype(np.int64),
            "_first_start": first,
            "_first_end": by_path("end"),
            "_first_tid": by_path("global_tid"),
        },
        schema={
            **r.select("pid", "parent_pid", "lc", "depth").schema,
            "Instances": pl.UInt32,
            "CPU (ns)": r.head(0).select(pl.col("end") - pl.col("start")).dtypes[0],
            "_first_start": r.schema["start"],
            "_first_end": r.schema["end"],
            "_first_tid": r.schema["global_tid"],
        },
    )


@derived(key="nvtx_tree", version="3", persist=True, codec=frames("paths", "windows"))
def paths_and_windows(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(path_table, path_windows): see those two. Kept in the frame cache: a reopen reads the
    tree back instead of nesting every range again."""
    empty = (pl.DataFrame(schema=SCHEMA), pl.DataFrame(schema=WINDOWS))
    if not trace.has("NVTX_EVENTS"):
        return empty
    nesting = nv.projection_nesting(trace)
    if len(nesting.depth) == 0:
        return empty
    tree = nesting.frame(["id", "start", "end", "global_tid", "style", "name_code"])
    up: np.ndarray | None = nesting.parent
    crossing = nesting.crossing_threads
    if len(crossing):
        tree, up = _uncrossed(nesting, tree, crossing)
    tree, up = _placed(trace, tree, up, crossing)
    distinct, short_of = nv.short_labels(trace)
    names = distinct["short"]  # by label code
    code = pl.col("name_code")
    lc = pl.lit(pl.Series(short_of, dtype=pl.Int64)).gather(pl.when(code.is_between(0, len(short_of) - 1)).then(code))
    r = tree.select("id", "parent", pl.col("depth").cast(pl.Int64), "start", "end", "global_tid", lc.alias("lc"))
    del tree
    r = r.with_columns(*_path_ids(r, up))
    del up
    paths_n = int(r["pid"].to_numpy().max()) + 1
    g = _per_path(r, paths_n)
    if g is None:
        g = (
            r.group_by("pid")
            .agg(
                pl.col("parent_pid").first(),
                pl.col("lc").first(),
                pl.col("depth").first(),
                pl.len().alias("Instances"),
                (pl.col("end") - pl.col("start")).sum().alias("CPU (ns)"),
                # the first instance, for the Timeline to show
                pl.col("start").min().alias("_first_start"),
                pl.col("end").sort_by("start").first().alias("_first_end"),
                pl.col("global_tid").sort_by("start").first().alias("_first_tid"),
            )
            .sort("pid")  # every path id once: a row's path id is its row
        )
    # a path's GPU time counts each op launched inside any of its instances once: the instances'
    # windows merged first (a range re-entered while open, or open on two threads at once), once
    # the counts are made and the ranges' other columns (0.25 GB on dense_x25) have gone
    ranges = r.select(pl.col("pid").alias("path_id"), "start", "end")
    del r
    windows = _merge(ranges)
    del ranges
    gpu, kern = gpu_time_in(trace, windows["start"].to_numpy(), windows["end"].to_numpy())
    # per path, indexed by path id (the paths are numbered 0 .. n-1): float sums of integers,
    # exact below 2**53 ns (a path's windows are disjoint: its GPU time is at most the trace's)
    at = windows["path_id"].to_numpy()
    gpu = np.bincount(at, weights=gpu, minlength=paths_n).astype(np.int64)
    kern = np.bincount(at, weights=kern, minlength=paths_n).astype(np.int64)
    g = g.with_columns(
        pl.Series("GPU (ns)", gpu, dtype=pl.Int64),
        pl.Series("GPU ops", kern, dtype=pl.Int64),
        names.gather(g["lc"]).alias("Name"),
    )
    g = g.with_columns(_path_texts(g.select("pid", "parent_pid", "depth", "Name")))
    paths = g.select(
        pl.col("pid").alias("path_id"),
        pl.col("parent_pid").alias("parent_id"),
        pl.col("depth").cast(pl.Int64).alias("Depth"),
        "Name",
        "Path",
        "Instances",
        "CPU (ns)",
        "GPU (ns)",
        "GPU ops",
        "_first_start",
        "_first_end",
        "_first_tid",
    )
    return paths, windows
