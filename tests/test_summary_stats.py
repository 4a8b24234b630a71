"""sqlite_round: the double SQLite's round(x, 1) gives, checked against decimal arithmetic."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from kview.analysis.summary_stats import sqlite_round


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
