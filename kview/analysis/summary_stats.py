"""Summary statistics exactly as `nsys stats` computes, rounds and names them.

nsys runs SQL with its own aggregates: avg() over integers is an exact integer sum divided
as doubles, stdev is the sample deviation (0 for fewer than two values), median of an even
count is the mean of the two middle values. round(x, 1) in SQLite rounds the exact binary
value half away from zero, which differs from IEEE half-even and from naive x*10 rounding on
values such as 0.15; `sqlite_round` reproduces it: vectorized, with an exact Decimal fix-up
only for the rare rows that sit on a tie.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import ROUND_HALF_UP, Decimal
from typing import TypeVar, cast

import polars as pl

T = TypeVar("T")


def stats_aggs(value: str, prefix: str = "") -> list[pl.Expr]:
    """total, num, avg, med, min, max, stddev of `value` within a group (nulls ignored)."""
    v = pl.col(value)
    n = v.count()
    return [
        v.sum().alias(f"{prefix}total"),
        n.alias(f"{prefix}num"),
        pl.when(n > 0).then(v.sum().cast(pl.Float64) / n.cast(pl.Float64)).alias(f"{prefix}avg"),
        v.median().alias(f"{prefix}med"),
        v.min().alias(f"{prefix}min"),
        v.max().alias(f"{prefix}max"),
        pl.when(n >= 2).then(v.cast(pl.Float64).std(ddof=1)).otherwise(0.0).alias(f"{prefix}stddev"),
    ]


def one_row_stats(v: pl.Expr, prefix: str = "") -> list[pl.Expr]:
    """stats_aggs of a group of one row whose value is `v` (not null): that value as total,
    avg, med, min and max, num 1, stddev 0."""
    return [
        v.alias(f"{prefix}total"),
        pl.lit(1).alias(f"{prefix}num"),
        v.cast(pl.Float64).alias(f"{prefix}avg"),
        v.cast(pl.Float64).alias(f"{prefix}med"),
        v.alias(f"{prefix}min"),
        v.alias(f"{prefix}max"),
        pl.lit(0.0).alias(f"{prefix}stddev"),
    ]


def grouped_stats(
    frame: pl.DataFrame,
    keys: list[str],
    value: str,
    prefix: str = "",
    extra: dict[str, tuple[pl.Expr, pl.Expr]] | None = None,
) -> pl.DataFrame:
    """`frame.group_by(keys).agg(*extra aggregations, *stats_aggs(value, prefix))`, rows in no set
    order. `extra`: column -> (its aggregation, what it is for a group of one row, whose columns
    are then not null).

    Where nearly every group is one row (a dense trace names each op range apart: 5.6M groups of
    5.7M rows), a hash group-by with a median and a deviation per group costs seconds; a group of
    one row has its value as every statistic, so only the groups of several rows are aggregated.
    Keys must be integers or enums (their codes); other keys take the plain group-by.
    """
    extra = extra or {}
    several, ones = grouped_apart(frame, keys, value, prefix, extra)
    if ones is None:
        return several
    ones = ones.select(*keys, *(one.alias(c) for c, (_, one) in extra.items()), *one_row_stats(pl.col(value), prefix))
    return pl.concat([several, ones.cast(several.schema)])


def grouped_apart(
    frame: pl.DataFrame,
    keys: list[str],
    value: str,
    prefix: str = "",
    extra: dict[str, tuple[pl.Expr, pl.Expr]] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(several, ones): `grouped_stats`'s groups of several rows aggregated, and its groups of
    one row as they are, `frame`'s rows (no column NULL), their value each of their statistics;
    ones is None where every group was aggregated (keys not integers or too wide to combine)."""
    extra = extra or {}
    aggs = [*(a.alias(c) for c, (a, _) in extra.items()), *stats_aggs(value, prefix)]
    if not all(frame[k].dtype.is_integer() or isinstance(frame[k].dtype, pl.Enum) for k in keys):
        return frame.group_by(keys).agg(aggs), None
    import numpy as np  # deferred with sqlite_round's: the small kernel summary never needs it

    # one integer per key tuple, each key's codes shifted into its own bits (63 at most: signed
    # integers, which the count by bins below takes as they are, not copied into its type)
    combined = np.empty(frame.height, dtype=np.int64)
    # each key's bits made in one array, in place: a fresh array per step is fresh pages, each a
    # fault (dense_x25's nvtx_kern_sum: 5 keys of 2.4M rows, four arrays a key); the first key's
    # made where they stay
    part = None
    shift = 0
    for k in keys:
        x = frame[k].to_physical()
        lo, hi = x.min(), x.max()
        if lo is None:  # every key NULL: one group
            x, lo, hi = x.fill_null(0), 0, 0
        elif x.null_count():  # NULL is a key of its own (its rows are aggregated: see `alone`)
            x, hi = x.fill_null(hi + 1), hi + 1  # type: ignore[operator]
        span = int(hi) - int(lo)  # type: ignore[arg-type]
        bits = max(span.bit_length(), 1)
        if shift + bits > 63 or int(hi) >= 2**63:  # type: ignore[arg-type]
            return frame.group_by(keys).agg(aggs), None
        if not shift:
            np.subtract(x.to_numpy(), int(lo), out=combined, dtype=np.int64, casting="unsafe")  # type: ignore[arg-type]
        else:
            part = np.empty(frame.height, dtype=np.int64) if part is None else part
            np.subtract(x.to_numpy(), int(lo), out=part, dtype=np.int64, casting="unsafe")  # type: ignore[arg-type]
            part <<= shift
            combined |= part
        shift += bits
    del part
    if frame.height and int(combined.max()) < 4 * frame.height:  # dense codes: count by bins
        # which counts are one, then each row's: the gather reads a byte per bin, not eight (a
        # dense trace's 11M bins: 11 MB, where the counts are 90 MB and each row's a cache miss)
        single = pl.Series((np.bincount(combined) == 1)[combined])
    else:
        # the values that repeat, from a sorted copy, then one look-up of each row among those
        # few: polars' is_unique hashes every row into a table of its own (dense_x25's
        # nvtx_kern_sum, 4.7M keys: 0.4 -> 0.2 CPU s, and 0.15 GB off the report's peak)
        s = np.sort(combined)
        repeats = s[1:][s[1:] == s[:-1]]
        del s
        single = ~pl.Series(combined).is_in(pl.Series(repeats).implode())
        del repeats
    # a NULL alone is no value (sum 0, count 0): such a group is aggregated
    alone = frame.select(pl.all_horizontal(single, *(pl.col(c).is_not_null() for c in frame.columns))).to_series()
    del single
    # grouped by their one integer: a hash of one column, not of a row encoding of every key
    # (dense_x25's nvtx_kern_sum: 2.3M rows, 5 keys; less CPU, and less memory on every core)
    key = "_grouped_stats_key"
    several = (
        frame.filter(~alone)
        .with_columns(pl.Series(key, combined).filter(~alone))
        .group_by(key)
        .agg(*(pl.col(k).first() for k in keys), *aggs)
        .drop(key)
    )
    del combined
    return several, frame.filter(alone)


def _exact_round(x: float, digits: int) -> float:
    q = Decimal(1).scaleb(-digits)
    return float(Decimal(x).quantize(q, rounding=ROUND_HALF_UP))


def sqlite_round(df: pl.DataFrame, cols: list[str], digits: int = 1) -> pl.DataFrame:
    """Round float columns like SQLite's round(x, digits).

    SQLite's result is the double nearest to the rounded decimal (m / 10**digits as text,
    parsed). IEEE division is correctly rounded, so numpy's m / 10**digits is that same double;
    polars computes `m / 10` as `m * 0.1`, which would print 7866.2 as 7866.200000000001.
    """
    # deferred: the kernel summary of a large trace groups with stats_aggs and rounds its few rows
    # one by one (kview.quick_stats), without numpy's import
    import numpy as np

    scale = 10**digits
    out = []
    n = df.height
    # the scratch columns made once for every column: a fresh array of a large frame's rows is
    # fresh pages from the system, each page a fault (most of this step's time)
    y, frac = np.empty(n), np.empty(n)
    # a large frame's rows a slice per thread (numpy releases the GIL): one after another they
    # were one core's work (nvtx_sum's Time (%) of 5.6M names: 0.15-0.2 s)
    parts = 1 if n < ROUND_APART else ROUND_THREADS
    bounds = even_bounds(n, parts)
    for c in cols:
        col = df[c].cast(pl.Float64)
        x = col.to_numpy()  # NULL as NaN
        q = np.empty(n)  # the result's own array: the Series made of it shares it

        def rounded_part(at: int, end: int, x: np.ndarray = x, q: np.ndarray = q) -> np.ndarray:
            """q's rows at:end; where a row of them looks like a tie (its number in the frame)."""
            xs, ys, qs, fs = x[at:end], y[at:end], q[at:end], frac[at:end]
            # each column once through numpy: polars' own arithmetic on it allocated a column
            # per step; in place where numpy allows
            with np.errstate(invalid="ignore"):
                np.abs(xs, out=ys)
                ys *= scale
                np.add(ys, 0.5, out=qs)
                np.floor(qs, out=qs)
                qs /= scale
                np.negative(qs, out=qs, where=xs < 0)
                finite = np.isfinite(xs)
                if not finite.all():
                    np.copyto(qs, xs, where=~finite)
                np.floor(ys, out=fs)
                np.subtract(ys, fs, out=fs)
                return np.flatnonzero(fs == 0.5) + at

        tie = np.concatenate(in_slices(rounded_part, bounds, ROUND_THREADS))
        if tie.size:  # exact decision for the few values that look like ties
            q[tie] = [_exact_round(v, digits) for v in x[tie].tolist()]
        rounded = pl.Series(c, q, dtype=pl.Float64)
        if col.null_count():
            rounded = rounded.zip_with(col.is_not_null(), col)
        out.append(rounded)
    return df.with_columns(out)


ROUND_APART = 1 << 18  # rows from which a column is rounded a slice per thread
ROUND_THREADS = 4


def percent_of_total(total: str = "total") -> pl.Expr:
    """Time (%) as nsys shows it: share of the listed rows' total, before rounding."""
    return pl.col(total).cast(pl.Float64) * 100.0 / pl.col(total).sum().cast(pl.Float64)


def order_like_sqlite(
    df: pl.DataFrame, group_keys: list[str], by: list[str], descending: list[bool], by_slices: bool = False
) -> pl.DataFrame:
    """ORDER BY after GROUP BY: ties keep the group order, which SQLite emits sorted by the keys.

    That is one order on `by`, then the group keys not in it (ascending, NULL first): the keys
    are unique per row, so a total order. Found from the key columns alone; the frame is
    gathered once, a column at a time (`gathered`).

    Text compared row against row is the cost (a dense trace's 5.6M distinct range names: their
    bytes lie in the order the names were made, so each comparison reads memory far from the
    last). Where `by` starts with numbers (a total), texts are compared only inside its ties:
    the rows are put in that order first, then sorted a slice of whole ties at a time with the
    slice's texts copied side by side (a copy of one slice at a time: bounded memory).
    Otherwise the texts are sorted alone first (one sort of a text column reads less than a
    sort comparing it only after other keys) and `by` sorted stably after.

    `by_slices`: where sorted a slice of ties at a time, the frame is gathered a slice at a time
    too: each slice's rows gathered once from the whole frame, then put in order within the
    slice, where a gather of the whole frame in the final order read each row's values far
    from the last one's again (nvtx_sum's 5.6M rows of four columns). The slices are held
    until each column is joined: for a frame of many columns (nvtx_gpu_proj_sum's fourteen)
    that raised the peak by 0.35 GB, where the gather makes one column at a time.
    """
    keys, desc, texts, lead = _sort_keys(df, group_keys, by, descending)
    if by_slices and texts and lead > 0 and df.height >= 2:
        return cast(pl.DataFrame, _by_ties(df, keys, desc, lead, texts, whole=True))
    return gathered(df, sqlite_order(df, group_keys, by, descending))


def _sort_keys(
    df: pl.DataFrame, group_keys: list[str], by: list[str], descending: list[bool]
) -> tuple[list[str], list[bool], list[str], int]:
    """(the sort's columns: `by` then the other group keys; descending for each; those of them
    that are texts; how many lead before the first text)."""
    rest = [k for k in group_keys if k not in by]
    keys = [*by, *rest]
    # SQLite puts NULL first in ascending and last in descending order.
    desc = [*descending, *([False] * len(rest))]
    texts = [k for k in keys if df.schema[k] == pl.String]
    lead = next((i for i, k in enumerate(keys) if k in texts), len(keys))
    return keys, desc, texts, lead


def sqlite_order(df: pl.DataFrame, group_keys: list[str], by: list[str], descending: list[bool]) -> pl.Series:
    """The rows of `df` in `order_like_sqlite`'s order (their numbers), the frame not gathered."""
    keys, desc, texts, lead = _sort_keys(df, group_keys, by, descending)
    rest = keys[len(by) :]  # the group keys not in `by`, as _sort_keys put them after it
    if not texts or df.height < 2:
        return df.select(pl.arg_sort_by(keys, descending=desc, nulls_last=desc, maintain_order=True)).to_series()
    if lead > 0:
        return cast(pl.Series, _by_ties(df.select(keys), keys, desc, lead, texts))
    k = df.select(keys)
    if rest:  # the keys are unique per row: a total order
        first = k.select(pl.arg_sort_by(rest, nulls_last=False)).to_series()
        k = gathered(k.select(by), first).with_columns(first.alias("_row"))
    else:
        k = k.select(by).with_row_index("_row")
    return k.sort(by, descending=descending, nulls_last=descending, maintain_order=True)["_row"]


SLICE_ROWS = 1 << 18  # rows sorted at a time with their texts side by side
SIDE_BY_SIDE_ROWS = 1 << 16  # frames of fewer rows sort their texts where they lie


def _by_ties(
    keys: pl.DataFrame, names: list[str], desc: list[bool], lead: int, texts: list[str], whole: bool = False
) -> pl.Series | pl.DataFrame:
    """The order of `keys` on every column (`names`), found a slice of whole ties of the first
    `lead` (numeric) columns at a time, each slice's texts copied in its order first; `whole`:
    `keys` itself in that order, every column of it gathered a slice at a time."""
    if whole:  # a gather from one chunk: across chunks each row's chunk is looked up
        keys = pl.DataFrame([keys[c].rechunk() for c in keys.columns])
    packed = _packed_order(keys[names[0]], desc[0]) if lead == 1 and keys.height > SIDE_BY_SIDE_ROWS else None
    if packed is not None:
        first, lead_sorted = packed
        leading = lead_sorted.to_frame(names[0])
    else:
        first = keys.select(
            pl.arg_sort_by(names[:lead], descending=desc[:lead], nulls_last=desc[:lead], maintain_order=True)
        ).to_series()
        leading = gathered(keys.select(names[:lead]), first)
    # where a tie of the leading columns starts: a slice ends only there
    starts = leading.select(
        pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift(1)) for c in names[:lead]).arg_true()
    ).to_series()
    n = keys.height
    # a small frame's texts are sorted as they lie: copying them goes through pyarrow, whose
    # import alone (0.1 s) is more than a summary of a few hundred names costs
    copied = texts if n > SIDE_BY_SIDE_ROWS else []
    arrow = bool(copied) and _arrow_sorts(keys, names)
    # the leading columns' values in this order are known already: not gathered again
    known = names[:lead]
    taken = [c for c in (keys.columns if whole else names) if c not in known]
    bounds, at = [], 0
    while at < n:
        cut = int(starts.search_sorted(at + SLICE_ROWS))
        end = int(starts[cut]) if cut < starts.len() else n
        bounds.append((at, end))
        at = end

    def ordered(at: int, end: int) -> pl.Series | pl.DataFrame:
        rows = first.slice(at, end - at)
        part = keys.select(pl.col(c).gather(rows) for c in taken).hstack(leading.slice(at, end - at).get_columns())
        if arrow:
            order = _arrow_order(part, names, desc, copied)
        else:
            order = (
                part.with_columns(texts_in_row_order(pl.col(c)) for c in copied)
                .select(pl.arg_sort_by(names, descending=desc, nulls_last=desc, maintain_order=True))
                .to_series()
            )
        if whole:  # gathered within the slice, its rows' values near each other
            return part.select(pl.col(c).gather(order) for c in keys.columns)
        return rows.gather(order)

    parts = in_slices(ordered, bounds, threads=SORT_THREADS if arrow else 1)
    if whole:
        return _one_chunk_each(cast(list[pl.DataFrame], parts)) if parts else keys.clear()
    return pl.concat(cast(list[pl.Series], parts))


def _one_chunk_each(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The frames `parts` one under the other, each column in one chunk, as `gathered` makes it
    (what reads it next works a chunk at a time), made a column at a time and each column's
    parts let go once it is (dropped from the frames of the list itself, which the caller
    holds): one copy of the frame held, and a column, not two copies."""
    columns = []
    for c in parts[0].columns:
        columns.append(pl.concat([p[c] for p in parts], rechunk=True))
        parts[:] = [p.drop(c) for p in parts]
    return pl.DataFrame(columns)


SORT_THREADS = 4  # slices sorted at once, each with its texts' copy (~30 MB on a dense trace)


def in_slices(each: Callable[[int, int], T], bounds: list[tuple[int, int]], threads: int) -> list[T]:
    """`each` of every slice's bounds, in their order, up to `threads` at once where the cores
    allow (a slice after another where they do not): numpy's and polars' work on a slice
    releases the GIL, and one slice after another was one core's work while the others waited
    (nvtx_sum's sort: 1.3 s on 16 cores)."""
    # deferred: the small kernel summary, which imports this module, never runs slices
    from kview.io.sqlite_source import read_threads

    workers = min(threads, read_threads(), len(bounds))
    if workers < 2:
        return [each(a, b) for a, b in bounds]
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(workers)
    try:
        return list(pool.map(each, *zip(*bounds)))
    finally:  # an error or Ctrl-C does not wait for the slices not yet begun
        pool.shutdown(wait=True, cancel_futures=True)


def even_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """The bounds of rows 0 .. n-1 cut into `parts` slices of nearly equal length (in_slices')."""
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def small_blocks(lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """The bounds of rows lo .. hi-1 in blocks of SMALL_ROWS: a thread's work on a slice, a
    block at a time, makes numpy temporaries of 64 KiB at most. What a thread frees stays at
    the top of its glibc arena (up to twice the mmap threshold, which grows to 32 MiB), and
    malloc_trim hands back no arena's top but the main one's: slice-sized temporaries kept
    0.1-0.2 GB in the explorer's worker through every later table (ResNet-50 x675, 16 threads)."""
    return ((a, min(a + SMALL_ROWS, hi)) for a in range(lo, hi, SMALL_ROWS))


SMALL_ROWS = 1 << 13


def at_once(tasks: list[Callable[[], T]], threads: int) -> list[T]:
    """The result of each of `tasks`, in their order, up to `threads` at once where the cores
    allow (as in_slices)."""
    return in_slices(lambda i, _: tasks[i](), [(i, i + 1) for i in range(len(tasks))], threads)


def _packed_order(col: pl.Series, descending: bool) -> tuple[pl.Series, pl.Series] | None:
    """(rows, values): the stable order of an integer column without NULLs and its values in
    that order, by one sort of the values with each row's number in their low bits (nvtx_sum's
    5.6M totals: 0.15 CPU s, polars' sort of the rows by them 0.7 s); None where value and row
    number do not fit 64 bits."""
    n = col.len()
    if not col.dtype.is_integer() or col.dtype == pl.UInt64 or col.null_count() or not 2 <= n <= 2**32:
        return None
    import numpy as np  # deferred with sqlite_round's: the small kernel summary never needs it

    lo, hi = int(col.min()), int(col.max())  # type: ignore[arg-type]
    shift = (n - 1).bit_length()
    if (hi - lo).bit_length() + shift > 64:
        return None
    x = col.cast(pl.Int64).to_numpy()
    # each value's distance from the first in the order (below 2**63: the row number takes a
    # bit at least), so that an ascending sort gives the order; in place where numpy allows (a
    # fresh large array is fresh pages, each a fault)
    key = (np.subtract(hi, x) if descending else np.subtract(x, lo)).view(np.uint64)
    key <<= np.uint64(shift)
    key |= np.arange(n, dtype=np.uint64)
    # numpy's sort of machine integers (vectorized) takes a quarter of the CPU of polars' (5.6M
    # keys: 0.3 -> 0.08 s), in place; the keys unique, any sort is stable
    key.sort()
    rows = key.astype(np.uint32)  # the low 32 bits: a row number and the value's lowest bits
    rows &= np.uint32((1 << shift) - 1)
    key >>= np.uint64(shift)
    values = key.view(np.int64)
    if descending:
        np.subtract(hi, values, out=values)
    else:
        values += lo
    return pl.Series(rows), pl.Series(values).cast(col.dtype)


def _arrow_sorts(keys: pl.DataFrame, names: list[str]) -> bool:
    """Whether Arrow's sort gives SQLite's order of `keys`: no NULL (Arrow places NULLs alike for
    every key, SQLite first ascending and last descending), and only integers, enums (by their
    codes, as polars sorts them) and texts (by their bytes, as SQLite's BINARY collation)."""
    schema = keys.schema
    return all(
        (schema[c].is_integer() or schema[c] == pl.String or isinstance(schema[c], pl.Enum))
        and not keys[c].null_count()
        for c in names
    )


def _arrow_order(part: pl.DataFrame, names: list[str], desc: list[bool], texts: list[str]) -> pl.Series:
    """A slice's order on every column, sorted by Arrow with its texts copied side by side. Arrow
    sorts on the first column and compares the next ones only within its ties, each text where
    it lies: half the CPU of polars' sort of the same slice, which first encodes every key of
    every row (nvtx_sum's 5.6M names on a dense trace: 1.2 -> 0.6 s)."""
    import pyarrow as pa  # type: ignore[import-untyped]  # deferred: only a large frame's texts are copied
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    columns = {
        c: part[c].to_arrow(compat_level=pl.CompatLevel.oldest()) if c in texts else part[c].to_physical().to_arrow()
        for c in names
    }
    keys = [(c, "descending" if d else "ascending") for c, d in zip(names, desc)]
    return pl.Series(pc.sort_indices(pa.table(columns), sort_keys=keys)).cast(pl.UInt32)


def gathered(frame: pl.DataFrame, rows: pl.DataFrame | pl.Series) -> pl.DataFrame:
    """`frame`'s rows in the order `rows` gives, a column at a time, each made one chunk first: a
    gather across chunks looks up each row's chunk (8x slower over the 48 chunks a group-by
    leaves), and one column at a time is the only copy held at once."""
    at = rows.to_series() if isinstance(rows, pl.DataFrame) else rows
    return pl.DataFrame([frame[c].rechunk().gather(at) for c in frame.columns])


def texts_in_row_order(texts: pl.Expr) -> pl.Expr:
    """`texts` with their bytes copied in row order (a gather of text keeps each value where it
    was), so a sort or a writer reads each value's bytes after the last one's. The copy goes
    through Arrow's older layout: offsets and one buffer of the rows' bytes."""
    return texts.map_batches(
        lambda s: pl.Series(s.name, s.to_arrow(compat_level=pl.CompatLevel.oldest()), dtype=pl.String),
        return_dtype=pl.String,
    )


# the statistics' column headers, as `nsys stats` names them
STAT_HEADERS = {
    "total": "Total Time (ns)",
    "num": "Instances",
    "avg": "Avg (ns)",
    "med": "Med (ns)",
    "min": "Min (ns)",
    "max": "Max (ns)",
    "stddev": "StdDev (ns)",
}


def strip_version_suffix(s: pl.Expr) -> pl.Expr:
    """nsys drops a 6-character `_vNNNN` suffix (cudaMemcpyAsync_v3020), and only that shape."""
    return pl.when(s.str.slice(-6, 2) == "_v").then(s.str.slice(0, s.str.len_chars() - 6)).otherwise(s)
