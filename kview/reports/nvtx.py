"""nvtx_sum, nvtx_pushpop_sum, nvtx_startend_sum, nvtx_kern_sum and nvtx_gpu_proj_sum."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import polars as pl

from kview.analysis import containment
from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import LAUNCH_COLUMNS, call_keys, calls_by_search, launch_calls
from kview.analysis.summary_stats import (
    grouped_apart,
    grouped_stats,
    one_row_stats,
    order_like_sqlite,
    percent_of_total,
    sqlite_round,
    texts_in_row_order,
)
from kview.io.schema import pid_of, tid_of
from kview.io.sqlite_source import return_freed_memory
from kview.reports.base import Report, empty
from kview.trace import Trace

NO_NVTX = "does not contain NV Tools Extension (NVTX) data"
HEADERS = {
    "total": "Total Time (ns)",
    "num": "Instances",
    "avg": "Avg (ns)",
    "med": "Med (ns)",
    "min": "Min (ns)",
    "max": "Max (ns)",
    "stddev": "StdDev (ns)",
}


def _range_summary(trace: Trace, name: str, title: str, styles: tuple[str, ...], with_style: bool) -> Report:
    if not trace.has("NVTX_EVENTS"):
        return empty(name, title, NO_NVTX)
    r = nv.labelled(trace).filter(pl.col("style").is_in(list(styles)))
    # after the ranges: their read, where it is every NVTX row, tells it without a scan of its own
    hi = trace.nvtx_max_timestamp
    r = r.select(
        "name_code", "style", (pl.col("end").fill_null(pl.lit(hi, dtype=pl.Int64)) - pl.col("start")).alias("dur")
    )
    table = nv.names(trace)
    # the ranges' other columns go before the sort, which holds the names twice (`order_like_sqlite`)
    _let_go(trace, nv.labelled_ranges)
    g, several = _groups(r, ["name_code", "style"] if with_style else ["name_code"])
    del r
    # the code is in no column of the report: not gathered into its order
    g = nv.with_names(trace, g, table=table).drop("name_code")
    del table
    keys = ["name", "style"] if with_style else ["name"]
    g = order_like_sqlite(g, keys, ["total"], [True], by_slices=True)
    cols = [pl.col("Time (%)"), *[pl.col(k).alias(v) for k, v in HEADERS.items()]]
    if with_style:
        cols.append(pl.col("style").alias("Style"))
    cols.append(pl.col("name").alias("Range"))
    return Report(name, title, _with_stats(g, several).select(cols))


def _groups(r: pl.DataFrame, keys: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(groups, several) of the ranges `r` (`keys`, dur): one row per group, its keys, total and
    its row of `several` (the statistics of the groups of several ranges); NULL for a group of one
    range, whose every statistic is its duration, made once the rows are in order (`_with_stats`)
    instead of a column of millions per statistic gathered into it."""
    several, ones = grouped_apart(r, keys, "dur")
    groups = several.select(*keys, "total", pl.int_range(pl.len(), dtype=pl.UInt32).alias("several"))
    if ones is not None:
        one = ones.select(*keys, pl.col("dur").alias("total"), pl.lit(None, pl.UInt32).alias("several"))
        groups = pl.concat([groups, one])
    return groups, several


def _with_stats(g: pl.DataFrame, several: pl.DataFrame) -> pl.DataFrame:
    """`g` (keys, total, its row of `several` or none) with Time (%) and the statistics, rounded
    as nsys rounds them. A group of one range has its duration as avg, med, min and max, and
    0 as stddev; rounding such a whole number to a tenth gives the number itself (below 2**48),
    so then only Time (%) and the few aggregated groups are rounded."""
    stats = ["avg", "med", "stddev"]
    top = g["total"].abs().max()
    if top is not None and int(top) < 2**48:  # type: ignore[arg-type]
        several, stats = sqlite_round(several, stats), []
    at = g["several"]
    mine = at.is_not_null().arg_true()  # the rows of aggregated groups, and theirs in `several`
    theirs = at.gather(mine)
    made = []
    # every group's statistics as a group of one range's, in several's types, with the few
    # aggregated values written in: one pass over the rows, where a when/then over a gather of
    # `several` was three. Each column made alone is the only holder of its values, so they are
    # written in place; made together, a frame held each and the written one was a copy.
    for e in one_row_stats(pl.col("total")):
        c = e.meta.output_name()
        if c == "total":
            continue
        col = g.select("total", e.cast(several.schema[c])).to_series(1)  # beside total: as many rows
        made.append(col.scatter(mine, several[c].gather(theirs)) if mine.len() else col)
        del col
    g = g.select(
        percent_of_total().alias("Time (%)"),
        "total",
        *made,
        *[c for c in g.columns if c not in ("total", "several")],
    )
    return sqlite_round(g, ["Time (%)", *stats])


def nvtx_sum(trace: Trace) -> Report:
    return _range_summary(trace, "nvtx_sum", "NVTX Range Summary", ("PushPop", "StartEnd"), True)


def nvtx_pushpop_sum(trace: Trace) -> Report:
    return _range_summary(trace, "nvtx_pushpop_sum", "NVTX Push/Pop Range Summary", ("PushPop",), False)


def nvtx_startend_sum(trace: Trace) -> Report:
    return _range_summary(trace, "nvtx_startend_sum", "NVTX Start/End Range Summary", ("StartEnd",), False)


def _api_of(trace: Trace, ops: pl.DataFrame, how: Literal["inner", "left"]) -> pl.DataFrame:
    """Join GPU ops to the runtime call that launched them (same correlation id and process)."""
    r = launch_calls(trace.columns("runtime", LAUNCH_COLUMNS))
    keys = call_keys(ops, r)
    if keys is None:
        return ops.join(r, on=["correlation", "global_pid"], how=how)
    r = r.drop("correlation", "global_pid")
    found = calls_by_search(keys[0].to_numpy(), keys[1].to_numpy())
    if found is not None and not set(ops.columns) & set(r.columns):
        at, hit = found
        if how == "inner":
            if not hit.all():
                ops, at = ops.filter(pl.Series(hit)), at[hit]
            return ops.hstack(r.select(pl.all().gather(pl.Series(at))).get_columns())
        rows = pl.select(pl.when(pl.Series(hit)).then(pl.Series(at))).to_series()  # null: no call
        return ops.hstack(r.select(pl.all().gather(rows)).get_columns())
    # one integer key: a join on two columns costs 0.9 CPU s where this one costs 0.55 (dense_x25)
    r = r.with_columns(keys[1])
    return ops.with_columns(keys[0]).join(r, on="_call", how=how, maintain_order="left").drop("_call")


def _let_go(trace: Trace, *tables: Callable[..., Any], frames: tuple[str, ...] = ()) -> None:
    """Forget these derived tables and frames of a trace opened for this report alone
    (`Trace.one_command`), once it has made all it asks of them: else they stay beside the
    report's groups and its sort to the end (the NVTX ranges 0.3 GB and their nesting 0.15 GB
    on dense_x25)."""
    if trace.one_command:
        trace.store.drop(*tables)
        trace.let_go(*frames)
        return_freed_memory()


def _calls(joined: pl.DataFrame) -> pl.DataFrame:
    """(call_id, global_tid, start, end) of the CPU call behind each row of `joined` that has one."""
    if not joined["r_start"].null_count():  # every row (an inner join): no filtered copy
        return joined.select("call_id", "global_tid", pl.col("r_start").alias("start"), pl.col("r_end").alias("end"))
    return joined.filter(pl.col("r_start").is_not_null()).select(
        "call_id", "global_tid", pl.col("r_start").alias("start"), pl.col("r_end").alias("end")
    )


def _ranges_over_calls(trace: Trace, joined: pl.DataFrame) -> pl.DataFrame:
    return nv.enclosing(nv.projection_ranges(trace), _calls(joined), nv.projection_nesting(trace))


def nvtx_kern_sum(trace: Trace) -> Report:
    name, title = "nvtx_kern_sum", "NVTX Range Kernel Summary"
    for table, why in (
        ("NVTX_EVENTS", NO_NVTX),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "does not contain CUDA kernel data"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "does not contain CUDA API data"),
    ):
        if not trace.has(table):
            return empty(name, title, why)
    k = trace.columns("kernels", ["start", "end", "correlation", "global_pid", "name_id"]).with_row_index("kern_id")
    j = _api_of(trace, k, "left").with_row_index("call_id")
    _let_go(trace, frames=("runtime",))
    ranges, names = nv.projection_ranges(trace), nv.names(trace)
    del k
    try:
        combo = _kernels_in_ranges_by_row(trace, j, ranges)
        if combo is None:
            combo = _kernels_in_ranges_by_pairs(trace, j, ranges)
    except nv.TooManyPairs as e:
        return empty(name, title, str(e))
    # no table of the kernels or their calls held past this point: they would stay beside the
    # groups and their sort (0.5 GB on dense_x25)
    del j
    _let_go(trace, nv.projection_nesting, nv.projection_tree)
    gkeys = ["PID", "TID", "name_code", "style", "name_id"]
    combo = combo.select(
        pid_of(pl.col("global_tid")).alias("PID"),
        tid_of(pl.col("global_tid")).alias("TID"),
        "name_code",
        "style",
        "name_id",
        "id",
        "kern_id",
        "kdur",
    )
    del ranges
    _let_go(trace, nv.labelled_ranges, nv.labels, nv.projection_ranges)  # the names are held here
    one = pl.lit(1, dtype=pl.UInt32)
    g = grouped_stats(
        combo,
        gkeys,
        "kdur",
        extra={  # each with its value for one kernel in a range seen once
            "nvtx_inst_u": (pl.col("id").n_unique(), one),
            "nvtx_nulls": (pl.col("id").null_count(), pl.lit(0, dtype=pl.UInt32)),
            "Kern Inst": (pl.col("kern_id").n_unique(), one),
        },
    )
    del combo
    # count(DISTINCT x) ignores NULL; polars' n_unique counts it as a value.
    g = g.with_columns((pl.col("nvtx_inst_u") - (pl.col("nvtx_nulls") > 0).cast(pl.UInt32)).alias("NVTX Inst"))
    present = _names_present(g["name_code"], names)
    if present is None:
        g = nv.with_names(trace, g, table=names)
    # the report's names are copies: the table goes before they are sorted (0.6 GB on dense_x25)
    del names
    if present is not None:
        g = g.with_columns(_sorted_names(g["name_code"], *present))
        del present
    g = trace.with_strings(g, "name_id", "Kernel Name")
    g = sqlite_round(g, ["avg", "med", "stddev"])
    # the report's columns and the names' ranks only: the sort gathers every column it is given
    # (nvtx_inst_u, nvtx_nulls, num and both codes are 2.4M rows each on dense_x25)
    g = g.select(
        pl.col("name").alias("NVTX Range"),
        pl.col("style").alias("Style"),
        "PID",
        "TID",
        "NVTX Inst",
        "Kern Inst",
        pl.col("total").alias("Total Time (ns)"),
        pl.col("avg").alias("Avg (ns)"),
        pl.col("med").alias("Med (ns)"),
        pl.col("min").alias("Min (ns)"),
        pl.col("max").alias("Max (ns)"),
        pl.col("stddev").alias("StdDev (ns)"),
        "Kernel Name",
        *(["_range", _kernel_places(trace, g)] if "_range" in g.columns else []),
    )
    columns = g.columns[:13]
    if "_range" in g.columns:  # the names' places in text order stand in for the texts
        keys = ["PID", "TID", "_range", "Style", "_kernel"]
        by = ["_range", "PID", "TID", "Total Time (ns)"]
    else:
        keys = ["PID", "TID", "NVTX Range", "Style", "Kernel Name"]
        by = ["NVTX Range", "PID", "TID", "Total Time (ns)"]
    return Report(name, title, order_like_sqlite(g, keys, by, [False, False, False, True]).select(columns))


def _kernels_in_ranges_by_pairs(trace: Trace, j: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """`_kernels_in_ranges_by_row`'s rows from the pairs' frame and joins, for any ranges."""
    pairs = _ranges_over_calls(trace, j)
    # only the columns the grouping reads
    calls = j.select("call_id", "kern_id", "name_id", "global_tid", (pl.col("end") - pl.col("start")).alias("kdur"))
    combo = _with_range_columns(calls.join(pairs, on="call_id", how="left"), ranges, ["name_code", "style"])
    return combo.select("kern_id", "name_id", "global_tid", "kdur", "id", "name_code", "style")


def _kernels_in_ranges_by_row(trace: Trace, j: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame | None:
    """`j`'s kernels left-joined to the (call, range) pairs, as kern_id, name_id, global_tid,
    kdur and the range's id, name_code and style (nulls for a kernel in no range): a row per
    pair, each kernel's in its row order, innermost range first, as the join gives them. Made
    by row from the nesting, without the pairs' frame and two joins; None where not every
    range is pushed and popped."""
    if not ranges.height or not ranges.select((pl.col("style") == "PushPop").all()).item():
        return None
    if len(nv.projection_nesting(trace).crossing_threads):
        return None
    src, row = _kernel_range_rows(nv.projection_nesting(trace), j)
    # the nesting is not needed for the gathers below (0.2 GB on dense_x25)
    _let_go(trace, nv.projection_nesting, nv.projection_tree)
    at = pl.select(pl.when(pl.Series(row >= 0)).then(pl.Series(np.maximum(row, 0)))).to_series()
    del row
    kernels = j.select("kern_id", "name_id", "global_tid", (pl.col("end") - pl.col("start")).alias("kdur"))
    return pl.DataFrame(
        [
            *kernels.select(pl.all().gather(src)).get_columns(),
            *ranges.select(pl.col("id", "name_code", "style").gather(at)).get_columns(),
        ]
    )


def _kernel_range_rows(nesting: nv.Nesting, j: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(row of `j`, row of the ranges or -1) of each row of the left join of `j`'s kernels to the
    ranges around their calls, in the join's order."""
    calls = _calls(j)
    at, found = nesting.around(nv.innermost_within_budget(nesting, calls))  # level by level, innermost first
    kern = calls["call_id"].to_numpy()[at]  # call_id is j's row number
    del calls
    # a new level starts where `at` stops rising (each level's calls are some of the last one's)
    level = np.zeros(len(at), dtype=np.int64)
    if len(at):
        level[np.flatnonzero(np.diff(at) <= 0) + 1] = 1
        np.cumsum(level, out=level)
    del at
    # each kernel's rows: one per range around its call, or one (of nulls) for none
    width = np.maximum(np.bincount(kern, minlength=j.height), 1)
    first = np.cumsum(width) - width
    # each pair's place made in one array and the inputs let go before the ranges' rows are
    # made: these arrays of every pair (4.7M on dense_x25) were the report's highest point
    place = first[kern]
    del kern, first
    place += level
    del level
    row = np.full(int(width.sum()), -1, dtype=np.int64)
    row[place] = nesting.rows(found)
    del place, found
    return np.repeat(np.arange(j.height, dtype=np.int64), width), row


def _names_present(codes: pl.Series, names: pl.DataFrame) -> tuple[pl.Series, pl.Series, int] | None:
    """(the distinct codes among `codes`, their names with the bytes copied side by side, the
    number of names), or None where the codes are not the names table's rows."""
    if not nv.codes_are_rows(names):
        return None
    n, codes = names.height, codes.drop_nulls()
    if codes.len() and (codes.min() < 0 or codes.max() >= n):  # type: ignore[operator]
        return None
    # by bins over the codes, in order already: a hash of 2.4M codes and a sort of the 1.8M
    # distinct ones cost several times as much (dense_x25)
    present = pl.Series(np.flatnonzero(np.bincount(codes.to_numpy(), minlength=n)), dtype=codes.dtype)
    return present, _texts_at(names["name"], present), n


def _texts_at(texts: pl.Series, rows: pl.Series) -> pl.Series:
    """`texts` at `rows` (ascending), their bytes copied side by side: gathered a chunk at a time,
    where a gather across chunks looks up each row's chunk and a rechunk first copies every
    text's view (dense_x25's 1.77M of 5.6M names in 46 chunks: 0.35-0.48 -> 0.21-0.33 CPU s)."""
    at = rows.to_numpy()
    ends = np.cumsum(texts.chunk_lengths())
    cuts = np.searchsorted(at, ends)
    parts, lo = [], 0
    for chunk, end, hi in zip(texts.get_chunks(), ends, cuts):
        if hi > lo:
            picked = chunk.gather(pl.Series(at[lo:hi] - (end - chunk.len())))
            # copied a slice at a time: a copy of every picked name at once went through a
            # second, Arrow's, beside it (0.2 GB on dense_x25, at the report's highest point)
            for s in range(0, picked.len(), COPY_ROWS):
                parts.append(pl.select(texts_in_row_order(pl.lit(picked.slice(s, COPY_ROWS)))).to_series())
            del picked
        lo = hi
    return pl.concat(parts).rechunk() if parts else texts.clear()


COPY_ROWS = 1 << 18  # names copied at a time


def _sorted_names(codes: pl.Series, present: pl.Series, texts: pl.Series, n: int) -> list[pl.Series]:
    """`name`, each code's name, and `_range`, its place in text order (equal texts equal), both
    null for a null code, from `_names_present`.

    The distinct names present are sorted once, and copied again in that order: the rows sort on
    the integer, where comparing their texts read 2.4M names lying far apart in the names table
    (dense_x25), and the sorted rows' names lie in row order for the writer, which copied them so
    slice by slice, and hold none of the table."""
    order = _text_order(texts)
    texts = pl.select(texts_in_row_order(pl.lit(texts).gather(order))).to_series()
    place = texts.ne_missing(texts.shift(1)).cum_sum()  # equal neighbours share a place
    at = np.zeros(n, dtype=np.int64)
    at[present.to_numpy()[order.to_numpy()]] = np.arange(present.len(), dtype=np.int64)
    row = pl.Series(at).gather(codes)
    return [texts.gather(row).alias("name"), place.gather(row).alias("_range")]


def _text_order(texts: pl.Series) -> pl.Series:
    """The rows of `texts` in their bytes' order (equal texts in any order). Each text is sorted
    with its row number after a NUL, which sorts below any byte a text holds past a shorter one's
    end: polars sorts the values for 0.8 of the CPU its arg_sort takes (dense_x25's 1.8M names,
    1.55 -> 1.25 CPU s). A text holding NUL itself, or a NULL, takes the arg_sort."""
    n = texts.len()
    if texts.null_count() or texts.str.contains("\x00", literal=True).any():
        return texts.arg_sort()
    width = len(str(max(n - 1, 0)))
    rows = pl.int_range(n, dtype=pl.UInt32).cast(pl.String).str.zfill(width)
    tagged = pl.select(pl.format("{}\x00{}", pl.lit(texts), rows)).to_series()
    return tagged.sort().str.slice(-width).cast(pl.UInt32).alias(texts.name)


def _kernel_places(trace: Trace, g: pl.DataFrame) -> pl.Series:
    """`_kernel`: the place of each row's kernel name (name_id) in text order among the few
    distinct ones, equal texts equal, null for none."""
    kernels = trace.with_strings(g.select(pl.col("name_id").drop_nulls().unique()), "name_id", "_text")
    kernels = kernels.select("name_id", pl.col("_text").rank("dense").alias("_kernel"))
    return g.select("name_id").join(kernels, on="name_id", how="left", maintain_order="left")["_kernel"]


def range_parents(trace: Trace, ranges: pl.DataFrame) -> pl.DataFrame:
    """id -> parent (tightest enclosing range on the same thread) and level (0 for roots)."""
    # threads with start/end ranges, or push/pop ones that do not nest, take the general path
    mixed_tids = pl.concat(
        [
            ranges.filter(pl.col("style") != "PushPop")["global_tid"],
            pl.Series("global_tid", nv.projection_nesting(trace).crossing_threads, dtype=ranges.schema["global_tid"]),
        ]
    ).unique()
    nested = ranges.filter(~pl.col("global_tid").is_in(mixed_tids.implode()))
    parts = []
    if nested.height:
        tree = nv.projection_tree(trace) if mixed_tids.len() == 0 else nv.nest(nested)
        parts.append(tree.select("id", "parent", pl.col("depth").alias("level")))
    mixed = ranges.filter(pl.col("global_tid").is_in(mixed_tids.implode()))
    if mixed.height:
        parts.append(_parents_swept(mixed))
    if not parts:
        return pl.DataFrame(schema={"id": pl.Int64, "parent": pl.Int64, "level": pl.Int64})
    return pl.concat([p.select("id", "parent", pl.col("level").cast(pl.Int64)) for p in parts])


def _parents_swept(r: pl.DataFrame) -> pl.DataFrame:
    """id, parent and level of ranges on threads where they may overlap (start/end ranges):
    nsys's tightest enclosing range (containment.tightest_holders), and each range's level the
    number of its ancestors."""
    ids = r["id"].to_numpy()
    parent = containment.tightest_holders(r["global_tid"].to_numpy(), r["start"].to_numpy(), r["end"].to_numpy(), ids)
    return pl.DataFrame(
        [
            r["id"],
            pl.Series("parent", ids[np.maximum(parent, 0)], dtype=r.schema["id"]).scatter(
                np.flatnonzero(parent < 0), None
            ),
            pl.Series("level", containment.ancestry(parent)[0], dtype=pl.Int64),
        ]
    )


def _with_nesting(trace: Trace, ranges: pl.DataFrame, proj: pl.DataFrame) -> pl.DataFrame:
    """`proj` (a row per range id) with the range's name_code, style, range_dur, its `level` in
    the nesting and `child_nb`, how many ranges of `proj` it is the parent of."""
    rows = _rows_of(ranges["id"], proj["id"])
    if (
        rows is None
        or not ranges.select((pl.col("style") == "PushPop").all()).item()
        or len(nv.projection_nesting(trace).crossing_threads)
    ):
        return _with_nesting_joined(trace, ranges, proj)
    # every range pushed and popped, each id once: its nesting's arrays answer by row, not by
    # joins of millions of ids against the whole tree
    nesting = nv.projection_nesting(trace)
    tree_rows = nesting.tree_rows(rows)
    parent = nesting.parent[tree_rows]
    has = parent >= 0
    children = np.bincount(parent[has], minlength=len(nesting.parent))
    return proj.with_columns(
        *ranges.select(
            pl.col("name_code").gather(rows),
            pl.col("style").gather(rows),
            (pl.col("end") - pl.col("start")).gather(rows).alias("range_dur"),
        ).get_columns(),
        pl.Series("level", nesting.depth[tree_rows], dtype=pl.Int64),
        pl.Series("child_nb", children[tree_rows], dtype=pl.UInt32),
    )


def _with_range_columns(frame: pl.DataFrame, ranges: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """`frame` with `columns` of the range its `id` names (nulls where `id` is null): read by row
    where the ranges' ids increase (each once), else a join."""
    ids = frame["id"]
    rows = _rows_of(ranges["id"], ids.drop_nulls())
    if rows is None:
        return frame.join(ranges.select("id", *columns), on="id", how="left")
    at = pl.Series("_row", rows)
    if ids.null_count():
        spread = pl.Series("_row", np.zeros(len(ids), dtype=np.int64)).scatter(ids.is_not_null().arg_true(), at)
        at = pl.select(pl.when(ids.is_not_null()).then(spread).alias("_row")).to_series()
    return frame.with_columns(ranges.select(pl.col(c).gather(at) for c in columns).get_columns())


def _rows_of(ids: pl.Series, wanted: pl.Series) -> np.ndarray | None:
    """The row of each of `wanted` in `ids`, or None unless `ids` increase strictly (each once)
    and hold every one wanted."""
    if ids.null_count() or wanted.null_count():
        return None
    have = ids.to_numpy()
    if len(have) and not bool(np.all(have[1:] > have[:-1])):
        return None
    want = wanted.to_numpy()
    rows = np.searchsorted(have, want)
    if len(want) and (rows.max() >= len(have) or not np.array_equal(have[rows], want)):
        return None
    return rows


def _with_nesting_joined(trace: Trace, ranges: pl.DataFrame, proj: pl.DataFrame) -> pl.DataFrame:
    tree = range_parents(trace, ranges)
    proj = proj.join(
        ranges.select("id", "name_code", "style", (pl.col("end") - pl.col("start")).alias("range_dur")),
        on="id",
        how="left",
    ).join(tree, on="id", how="left")
    children = proj.filter(pl.col("parent").is_not_null()).group_by("parent").agg(pl.len().alias("child_nb"))
    return proj.join(children.rename({"parent": "id"}), on="id", how="left").with_columns(
        pl.col("child_nb").fill_null(0)
    )


def _projection_by_pairs(trace: Trace, j: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Per range with GPU ops (`id`): proj_start, proj_dur, ops (distinct correlation ids), and
    _with_nesting's columns, from every (call, range) pair."""
    pairs = _ranges_over_calls(trace, j)
    # each pair's call by row (call_id is j's row number), and only the columns the projection
    # reads: a join copied every column of the calls for each of the pairs
    calls = j.select("start", "end", "correlation")
    proj = (
        pl.DataFrame([pairs["id"], *calls.select(pl.all().gather(pairs["call_id"])).get_columns()])
        .group_by("id")
        .agg(
            pl.col("start").min().alias("proj_start"),
            (pl.col("end").max() - pl.col("start").min()).alias("proj_dur"),
            pl.col("correlation").n_unique().alias("ops"),
        )
    )
    del calls, pairs
    return _with_nesting(trace, ranges, proj)


def _projection_by_row(trace: Trace, j: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame | None:
    """`_projection_by_pairs`' rows (less `id`, in the nesting's order) without the pairs: each
    GPU op counted at the innermost range around its call, then folded up the nesting level by
    level (every range above the innermost holds the call too). None where that does not
    apply: start/end ranges, ids that do not increase, nulls in the ops, a nesting deeper than
    Nesting.levels."""
    if not (ranges.height and j.height) or not ranges.select((pl.col("style") == "PushPop").all()).item():
        return None
    ids = ranges["id"]
    if ids.null_count() or not bool(np.all(np.diff(ids.to_numpy()) > 0)):
        return None  # pairs merge the ranges of one id; rows would keep them apart
    if j.select(pl.any_horizontal(pl.col("start", "end", "correlation").is_null().any())).item():
        return None
    nesting = nv.projection_nesting(trace)
    if nesting.levels is None or len(nesting.crossing_threads):
        return None
    calls = _calls(j)
    inner = nv.innermost_within_budget(nesting, calls)
    has = inner >= 0
    row, op = inner[has], calls["call_id"].to_numpy()[has]  # call_id is j's row number
    del calls, inner, has
    n = len(nesting.depth)
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(lo, row, j["start"].to_numpy()[op])
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(hi, row, j["end"].to_numpy()[op])
    # distinct correlation ids: an op whose id no other op shares counts one wherever it is;
    # the ops that share theirs are counted from their own pairs
    shared = _repeated(j["correlation"].to_numpy())[op]
    counts = np.int32 if j.height < (1 << 31) else np.int64  # per range, at most every op
    # by bins, not np.add.at: 0.19-0.26 -> 0.05 CPU s for 1.3M ops over 5.7M ranges
    count = np.bincount(row, minlength=n).astype(counts, copy=False)
    alone = np.bincount(row[~shared], minlength=n).astype(counts, copy=False)
    for value, fold in ((lo, np.minimum), (hi, np.maximum), (count, np.add), (alone, np.add)):
        nesting.fold_up(value, fold)
    tree_rows = np.flatnonzero(count > 0)
    del count
    ops = alone[tree_rows].astype(np.int64)
    first, last = lo[tree_rows], hi[tree_rows]
    del alone, lo, hi  # four arrays over every range: not held through the gathers below
    if shared.any():
        at, found = nesting.around(row[shared])
        many = (
            pl.DataFrame({"row": found, "c": j["correlation"].to_numpy()[op[shared]][at]})
            .group_by("row")
            .agg(pl.col("c").n_unique())
            .sort("row")
        )
        ops[np.searchsorted(tree_rows, many["row"].to_numpy())] += many["c"].to_numpy()
    # each range's children among these: its row's count in the sorted parents
    parents = np.sort(nesting.parent[tree_rows])
    children = np.searchsorted(parents, tree_rows, side="right") - np.searchsorted(parents, tree_rows, side="left")
    rows = pl.Series(nesting.rows(tree_rows))
    return pl.DataFrame(
        [
            pl.Series("proj_start", first, dtype=pl.Int64),
            pl.Series("proj_dur", last - first, dtype=pl.Int64),
            pl.Series("ops", ops, dtype=pl.UInt32),
            *ranges.select(
                pl.col("name_code").gather(rows),
                pl.col("style").gather(rows),
                (pl.col("end") - pl.col("start")).gather(rows).alias("range_dur"),
            ).get_columns(),
            pl.Series("level", nesting.depth[tree_rows], dtype=pl.Int64),
            pl.Series("child_nb", children, dtype=pl.UInt32),
        ]
    )


def _repeated(x: np.ndarray) -> np.ndarray:
    """Whether each value of `x` occurs more than once: one stable sort, which runs through ids
    that come nearly in order (0.22 -> 0.02 CPU s for polars' hash on 1.3M correlation ids)."""
    order = np.argsort(x, kind="stable")
    same = x[order[1:]] == x[order[:-1]]
    out = np.zeros(len(x), dtype=bool)
    out[order[1:][same]] = True
    out[order[:-1][same]] = True
    return out


def nvtx_gpu_proj_sum(trace: Trace) -> Report:
    name, title = "nvtx_gpu_proj_sum", "NVTX GPU Projection Summary"
    for table, why in (("NVTX_EVENTS", NO_NVTX), ("CUPTI_ACTIVITY_KIND_RUNTIME", "does not contain CUDA API data")):
        if not trace.has(table):
            return empty(name, title, why)
    cols = ["start", "end", "correlation", "global_pid"]
    ops = [
        trace.columns(key, cols)
        for key, t in (
            ("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"),
            ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
            ("memset", "CUPTI_ACTIVITY_KIND_MEMSET"),
        )
        if trace.has(t)
    ]
    if not ops:
        return empty(name, title, "does not contain GPU operation data")
    j = _api_of(trace, pl.concat(ops), "inner").with_row_index("call_id")
    del ops
    _let_go(trace, frames=("runtime",))
    ranges, names = nv.projection_ranges(trace), nv.names(trace)
    try:
        proj = _projection_by_row(trace, j, ranges)
        if proj is None:
            proj = _projection_by_pairs(trace, j, ranges)
    except nv.TooManyPairs as e:
        return empty(name, title, str(e))
    del j, ranges
    _let_go(trace, nv.labelled_ranges, nv.labels, nv.projection_ranges, nv.projection_nesting, nv.projection_tree)
    one = pl.lit(1, dtype=pl.UInt32)
    g = grouped_stats(
        proj.select("name_code", "style", "proj_dur", "range_dur", "ops", "level", "child_nb"),
        ["name_code", "style"],
        "proj_dur",
        prefix="p_",
        extra={  # each with its value for a range name seen once
            "Total Proj Time (ns)": (pl.col("proj_dur").sum(), pl.col("proj_dur")),
            "Total Range Time (ns)": (pl.col("range_dur").sum(), pl.col("range_dur")),
            "Range Instances": (pl.len(), one),
            "Total GPU Ops": (pl.col("ops").sum(), pl.col("ops")),
            "Avg GPU Ops": (pl.col("ops").mean(), pl.col("ops").cast(pl.Float64)),
            "Avg Range Lvl": (pl.col("level").mean(), pl.col("level").cast(pl.Float64)),
            "Avg Num Child": (pl.col("child_nb").mean(), pl.col("child_nb").cast(pl.Float64)),
        },
    )
    del proj  # not held beside the groups and their sort
    g = nv.with_names(trace, g, table=names)
    keys = ["name", "style"]
    g = sqlite_round(g, ["p_avg", "p_med", "p_stddev", "Avg GPU Ops", "Avg Range Lvl", "Avg Num Child"])
    g = order_like_sqlite(g, keys, ["Total Proj Time (ns)"], [True])
    return Report(
        name,
        title,
        g.select(
            pl.col("name").alias("Range"),
            pl.col("style").alias("Style"),
            "Total Proj Time (ns)",
            "Total Range Time (ns)",
            "Range Instances",
            pl.col("p_avg").alias("Proj Avg (ns)"),
            pl.col("p_med").alias("Proj Med (ns)"),
            pl.col("p_min").alias("Proj Min (ns)"),
            pl.col("p_max").alias("Proj Max (ns)"),
            pl.col("p_stddev").alias("Proj StdDev (ns)"),
            "Total GPU Ops",
            "Avg GPU Ops",
            "Avg Range Lvl",
            "Avg Num Child",
        ),
    )
