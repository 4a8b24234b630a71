"""sqlite_round: the double SQLite's round(x, 1) gives, checked against decimal arithmetic; grouped_stats: the group-by's statistics."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from kview.analysis.summary_stats import grouped_stats, sqlite_round, stats_aggs

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


def test_grouped_stats_on_the_nvtx_ranges_of_a_real_trace():
    from kview.analysis import nvtx_ranges as nv
    from kview.trace import open_trace

    trace = open_trace(ROOT / "sample_traces" / "lm-small_ctx256_train_torch.sqlite", use_cache=False)
    r = nv.labelled(trace).select("name_code", "style", (pl.col("end") - pl.col("start")).alias("dur"))
    want = r.group_by(["name_code", "style"]).agg(stats_aggs("dur"))
    assert (want["num"] == 1).sum() > 10_000 and (want["num"] > 1).sum() >= 10  # both kinds of group
    _same_groups(grouped_stats(r, ["name_code", "style"], "dur"), want, ["name_code", "style"])
