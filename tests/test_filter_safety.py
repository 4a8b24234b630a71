"""Hostile filters: backslashes reach the regex, patterns are checked by the engine that runs
them (polars' Rust regex), and 2,000 terms cost linear time."""

from __future__ import annotations

import re
import signal

import polars as pl
import pytest

from kview.analysis import filters
from kview.analysis.attribution import attribute
from kview.trace import open_trace

from conftest import SAMPLES
from in_process import kview_here

TRAIN = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"


@pytest.fixture(scope="module")
def table():
    return attribute(open_trace(TRAIN, use_cache=False))


def test_backslashes_reach_the_regex(table):
    got = filters.apply(table, r"layer:^layer_\d+:ffn_sublayer")  # whole segments
    want = [x for x in table["Layer"].to_list() if re.search(r"(?i)^layer_\d+:ffn_sublayer(:|$)", x)]
    assert got.height == len(want) > 12 * 10
    assert sorted(got["Layer"].to_list()) == sorted(want)
    assert filters.tokens(r'layer:"a\d b" x\y') == [r"layer:a\d b", r"x\y"]


@pytest.mark.parametrize(
    "pattern,why",
    [
        ("(?=gemm)", "look-around, including look-ahead and look-behind, is not supported"),
        ("a{", "unclosed counted repetition"),
        (r"(gemm)\1", "backreferences are not supported"),
    ],
)
@pytest.mark.parametrize("field", ["", "layer:", "kernel:"])
def test_patterns_python_accepts_but_the_engine_rejects(pattern, why, field):
    re.compile(pattern)  # Python has no complaint
    with pytest.raises(filters.FilterError, match=re.escape(f"bad regular expression {pattern!r}: {why}")):
        filters.parse(field + pattern)


def test_pattern_the_engine_accepts_and_python_rejects(table):
    with pytest.raises(re.error):
        re.compile("xmma(?i)_GEMM")  # Python: global flags only at the start
    got = filters.apply(table, "xmma(?i)_GEMM")
    want = [n for n in table["Kernel"].to_list() if re.search("(?i)xmma_gemm", n)]
    assert sorted(got["Kernel"].to_list()) == sorted(want) and want


def test_cli_names_the_filter_as_the_side_that_failed():
    r = kview_here("kernels", str(TRAIN), "--filter", "dir:bprop (?=gemm)")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        "kview: --filter: bad regular expression '(?=gemm)': look-around, including look-ahead "
        "and look-behind, is not supported\n"
    )
    r = kview_here("layers", str(TRAIN), "--pattern", "layer_(?!1)")
    assert r.returncode == 2 and r.stderr.startswith("kview: bad layer pattern 'layer_(?!1)': look-around")
    assert len(r.stderr.splitlines()) == 1


def esc(name: str) -> str:
    """A literal for the Rust engine (Python's re.escape also escapes spaces, which it rejects)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", name)


def test_two_thousand_terms_linear_and_right(table):
    names = table["Kernel"].unique().sort().to_list()
    keep = names[0]
    terms = [f'-kernel:"^{esc(n)}$"' for n in names[1:]] + [f"-nomatch{i}" for i in range(2000 - len(names) + 1)]
    assert len(terms) == 2000

    def hung(*_):
        raise AssertionError("2,000 filter terms took more than 60 s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)  # a guard against the quadratic blow-up (120 s before), not a benchmark
    try:
        got = filters.apply(table, " ".join(terms))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert got.height == table.filter(pl.col("Kernel") == keep).height > 0
    assert set(got["Kernel"]) == {keep}
