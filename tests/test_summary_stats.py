"""sqlite_round: the double SQLite's round(x, 1) gives, checked against decimal arithmetic; grouped_stats: the group-by's statistics; order_like_sqlite: SQLite's own ORDER BY after GROUP BY."""

from __future__ import annotations

import sqlite3
from decimal import ROUND_HALF_UP, Decimal

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kview.analysis.summary_stats as summary_stats
from kview.analysis.summary_stats import grouped_stats, order_like_sqlite, percent_of_total, sqlite_round, stats_aggs

from conftest import ROOT


def _decimal_round(x: float, digits: int) -> float:
    # SQLite: round half away from zero on the decimal value, then the nearest double
    return float(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
            st.integers(min_value=-(10**9), max_value=10**9).map(lambda n: n / 20),  # ties: x.x5
        ),
        min_size=1,
        max_size=50,
    ),
    st.sampled_from([1, 2]),
)
def test_sqlite_round_equals_decimal_rounding(values, digits):
    got = sqlite_round(pl.DataFrame({"v": values}), ["v"], digits)["v"].to_list()
    assert got == [_decimal_round(v, digits) for v in values]


def test_sqlite_round_keeps_nulls_and_non_finite():
    df = pl.DataFrame({"v": [None, float("inf"), float("-inf"), 7866.24, 7866.25, -0.04]})
    got = sqlite_round(df, ["v"])["v"].to_list()
    assert got[:3] == [None, float("inf"), float("-inf")]
    assert str(got[3]) == "7866.2"  # not 7866.200000000001
    assert got[4] == 7866.3  # an exact tie rounds away from zero
    assert str(got[5]) == "-0.0"


def test_sqlite_round_a_slice_per_thread_equals_decimal_rounding(monkeypatch):
    """A large frame's column is rounded a slice per thread: every value as decimal arithmetic
    rounds it, ties and the values beside a slice's edge included (at a test's size)."""
    values = [n / 20 for n in range(-2000, 2000)] + [7866.24, 7866.25, -0.04, 1e12 / 3, -1e9 / 7]
    monkeypatch.setattr(summary_stats, "ROUND_APART", 2)
    df = pl.DataFrame({"v": values, "w": [None if i % 7 == 0 else v for i, v in enumerate(values)]})
    got = sqlite_round(df, ["v", "w"])
    assert got["v"].to_list() == [_decimal_round(v, 1) for v in values]
    assert got["w"].to_list() == [None if i % 7 == 0 else _decimal_round(v, 1) for i, v in enumerate(values)]


def _same_groups(got: pl.DataFrame, want: pl.DataFrame, keys: list[str]) -> None:
    assert got.schema == want.schema
    assert got.sort(keys).equals(want.sort(keys))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(min_value=-3, max_value=40)),
            st.sampled_from(["PushPop", "StartEnd"]),
            st.one_of(st.none(), st.integers(min_value=-(10**12), max_value=10**12)),
        ),
        max_size=80,
    )
)
def test_grouped_stats_equals_the_group_by(rows):
    # groups of one row (the usual NVTX op range) skip the aggregation: same values, same types
    df = pl.DataFrame(
        rows, schema={"k": pl.Int64, "style": pl.Enum(["PushPop", "StartEnd"]), "v": pl.Int64}, orient="row"
    )
    _same_groups(
        grouped_stats(df, ["k", "style"], "v", "p_"),
        df.group_by(["k", "style"]).agg(stats_aggs("v", "p_")),
        ["k", "style"],
    )
    # with further aggregations and their one-row forms (nvtx_gpu_proj_sum's, nvtx_kern_sum's)
    df = df.with_columns((pl.col("v") // 3).alias("w"))
    extra = {
        "n": (pl.len(), pl.lit(1, dtype=pl.UInt32)),
        "w_n": (pl.col("w").n_unique(), pl.lit(1, dtype=pl.UInt32)),
        "w_nulls": (pl.col("w").null_count(), pl.lit(0, dtype=pl.UInt32)),
        "w_sum": (pl.col("w").sum(), pl.col("w")),
        "w_avg": (pl.col("w").mean(), pl.col("w").cast(pl.Float64)),
    }
    _same_groups(
        grouped_stats(df, ["k", "style"], "v", extra=extra),
        df.group_by(["k", "style"]).agg(*(a.alias(c) for c, (a, _) in extra.items()), *stats_aggs("v")),
        ["k", "style"],
    )


def test_grouped_stats_with_codes_too_far_apart_to_count_by_bins():
    # codes spread over 2**40 values: the groups of one row are found by a sort, not by bins
    k = [0, 1 << 40, 5, 5, 1 << 40, 7, None, None, 3 << 38]
    df = pl.DataFrame(
        {"k": k, "style": ["PushPop"] * len(k), "v": [10, 20, 30, 31, 22, 40, 50, 60, 70]},
        schema={"k": pl.Int64, "style": pl.Enum(["PushPop", "StartEnd"]), "v": pl.Int64},
    )
    got = grouped_stats(df, ["k", "style"], "v")
    _same_groups(got, df.group_by(["k", "style"]).agg(stats_aggs("v")), ["k", "style"])
    assert got.sort("k", nulls_last=True)["num"].to_list() == [1, 2, 1, 1, 2, 2]


def test_grouped_stats_on_the_nvtx_ranges_of_a_real_trace():
    from kview.analysis import nvtx_ranges as nv
    from kview.trace import open_trace

    trace = open_trace(ROOT / "sample_traces" / "lm-small_ctx256_train_torch.sqlite", use_cache=False)
    r = nv.labelled(trace).select("name_code", "style", (pl.col("end") - pl.col("start")).alias("dur"))
    want = r.group_by(["name_code", "style"]).agg(stats_aggs("dur"))
    assert (want["num"] == 1).sum() > 10_000 and (want["num"] > 1).sum() >= 10  # both kinds of group
    _same_groups(grouped_stats(r, ["name_code", "style"], "dur"), want, ["name_code", "style"])


@pytest.mark.parametrize("shift,dtype", [(0, pl.Int64), (2**48, pl.Int64), (0, pl.Int32)])
def test_range_statistics_made_in_order_equal_the_rounded_group_by(shift, dtype):
    # nvtx_sum's groups of one range take their statistics from their total once in order: the
    # same values as grouped_stats' rounded, as read and with durations past the whole-number
    # rounding's bound (2**48 ns), where every value is rounded again; durations of another
    # type than Int64 take polars' scatter instead of numpy's arrays
    from kview.analysis import nvtx_ranges as nv
    from kview.reports.nvtx import _groups, _with_stats
    from kview.trace import open_trace

    trace = open_trace(ROOT / "sample_traces" / "lm-small_ctx256_train_torch.sqlite", use_cache=False)
    keys = ["name_code", "style"]
    r = nv.labelled(trace).select(*keys, (pl.col("end") - pl.col("start") + shift).cast(dtype).alias("dur"))
    stats = ["Time (%)", "avg", "med", "stddev"]
    want = sqlite_round(grouped_stats(r, keys, "dur").with_columns(percent_of_total().alias("Time (%)")), stats)
    groups, several = _groups(r, keys)
    assert groups["several"].null_count() > 10_000 and several.height >= 10  # both kinds of group
    got = _with_stats(groups, several)
    _same_groups(got.select(want.columns), want, keys)
    if shift:
        assert int(got["total"].max()) >= 2**48  # type: ignore[arg-type]


_TEXTS = st.one_of(st.none(), st.text(alphabet="ab\x00\u00e9", max_size=4))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(_TEXTS, st.integers(0, 2), st.one_of(st.none(), st.integers(0, 3))), max_size=40),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_order_like_sqlite_is_sqlites_order(rows, total_first, copied, by_slices):
    """The rows of a GROUP BY (name, style) ordered as SQLite orders them, by the total (ties in
    the keys' order) or by the name then the total; slices of two rows, so ties cross slices;
    the slices' texts copied side by side or sorted where they lie (`copied`); the frame
    gathered in that order whole or a slice at a time (`by_slices`)."""
    seen, unique = set(), []
    for name, style, total in rows:
        if (name, style) not in seen:
            seen.add((name, style))
            unique.append((name, style, total))
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (name TEXT, style INTEGER, total INTEGER)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", unique)
    order = "total DESC" if total_first else "name, total DESC"
    # SQLite's BINARY collation compares UTF-8 bytes, as a sort of polars' strings does
    got_sqlite = db.execute(
        f"SELECT name, style, total FROM (SELECT name, style, max(total) AS total FROM t "
        f"GROUP BY name, style) ORDER BY {order}"
    ).fetchall()
    frame = pl.DataFrame(unique, schema={"name": pl.String, "style": pl.Int64, "total": pl.Int64}, orient="row")
    frame = frame.with_row_index("row")  # a column of no key, which moves with its row
    by, descending = (["total"], [True]) if total_first else (["name", "total"], [False, True])
    slice_rows, side_by_side = summary_stats.SLICE_ROWS, summary_stats.SIDE_BY_SIDE_ROWS
    summary_stats.SLICE_ROWS = 2
    summary_stats.SIDE_BY_SIDE_ROWS = 0 if copied else side_by_side
    try:
        ordered = order_like_sqlite(frame, ["name", "style"], by, descending, by_slices=by_slices)
    finally:
        summary_stats.SLICE_ROWS, summary_stats.SIDE_BY_SIDE_ROWS = slice_rows, side_by_side
    assert ordered.drop("row").rows() == got_sqlite
    assert ordered.equals(frame[ordered["row"]])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-(2**62), 2**62), min_size=2, max_size=60),
    st.sampled_from([pl.Int64, pl.Int32, pl.UInt32]),
    st.booleans(),
)
def test_packed_order_is_a_stable_sort(values, dtype, descending):
    """One sort of values with row numbers in their low bits: the rows in polars' stable order
    and the values in that order, or None where value and row number do not fit 64 bits."""
    if dtype == pl.Int32:
        values = [v % 2**31 - 2**30 for v in values]
    elif dtype == pl.UInt32:
        values = [v % 2**32 for v in values]
    col = pl.Series("total", values, dtype=dtype)
    packed = summary_stats._packed_order(col, descending)
    fits = (max(values) - min(values)).bit_length() + (len(values) - 1).bit_length() <= 64
    assert (packed is not None) == fits
    if packed is not None:
        rows, sorted_values = packed
        stable = col.to_frame().select(pl.arg_sort_by("total", descending=descending, maintain_order=True))
        assert rows.to_list() == stable.to_series().to_list()
        assert sorted_values.dtype == dtype
        assert sorted_values.to_list() == col.sort(descending=descending).to_list()
