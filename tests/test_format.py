"""The one way durations, bars and short kernel names are drawn (kview.notation), checked
against plain-Python drawings of the same rules on real tables."""

from __future__ import annotations

import polars as pl
import pytest

from kview.analysis.layers import layer_times
from kview.notation import EIGHTHS, FULL, SHADES, bar, fmt_ns, short_names, stacked_bar
from kview.reports import cuda_gpu_kern_sum
from kview.trace import open_trace

from conftest import SAMPLES

LM = str(SAMPLES / "lm-small_ctx256_train_nsys.sqlite")
BERT = str(SAMPLES / "bert-2l_seq128_train_torch.json.gz")


def stacked_reference(rows: list[list[float]], width: int) -> list[str]:
    """Each segment ends where the row's running total, scaled to `width`, rounds to."""
    top = max((sum(r) for r in rows), default=0)
    out = []
    for r in rows:
        text, used = "", 0.0
        for i, v in enumerate(r):
            used += v / top * width if top else 0
            text += SHADES[i] * max(round(used) - len(text), 0)
        out.append(text)
    return out


@pytest.mark.parametrize("path", [LM, BERT])
@pytest.mark.parametrize("width", [24, 30, 40])
def test_stacked_bar_equals_a_row_by_row_drawing(path, width):
    df = layer_times(open_trace(path, use_cache=False))
    subs = [c for c in df.columns if c not in ("Layer", "Forward (ns)", "Backward (ns)", "Total (ns)", "GPU ops")]
    for parts in (["Forward (ns)", "Backward (ns)"], subs):
        drawn = df.select(stacked_bar(parts, width=width))[:, 0].to_list()
        assert drawn == stacked_reference(df.select(parts).rows(), width)
        top = max(range(df.height), key=lambda i: sum(df.row(i, named=True)[p] for p in parts))
        assert len(drawn[top]) == width  # the largest row fills the width


def test_share_bar_has_the_share_in_eighths_of_a_cell():
    k = cuda_gpu_kern_sum(open_trace(LM, use_cache=False)).frame
    total = k["Total Time (ns)"].sum()
    drawn = k.select(bar(pl.col("Total Time (ns)") / total, width=10))[:, 0].to_list()
    for text, t in zip(drawn, k["Total Time (ns)"].to_list()):
        eighths = round(t / total * 80)
        assert text == FULL * (eighths // 8) + EIGHTHS[eighths % 8]
    assert pl.DataFrame({"f": [None, float("nan"), 0.0]}).select(bar(pl.col("f")))[:, 0].to_list() == ["", "", ""]


def test_fmt_ns_three_significant_digits_below_100_units_one_decimal_above():
    assert [
        fmt_ns(v)
        for v in (
            None,
            870,
            999,
            1_000,
            12_345,
            312_050,
            1_500_000,
            99_940_000,
            162_230_000,
            2_040_000_000,
            5_000_000_000_000,
        )
    ] == [
        "-",
        "870 ns",
        "999 ns",
        "1 µs",
        "12.3 µs",
        "312.1 µs",
        "1.5 ms",
        "99.9 ms",
        "162.2 ms",
        "2.04 s",
        "5,000.0 s",
    ]


def test_short_names_drop_template_arguments_and_parameters_only():
    names = cuda_gpu_kern_sum(open_trace(LM, use_cache=False)).frame["Name"]
    short = short_names(names)
    assert short.len() == names.len() and short.name == names.name
    for full, s in zip(names.to_list(), short.to_list()):
        assert len(s) <= len(full)
        if "<" not in full and "(" not in full:
            assert s == full.removeprefix("void ")
        # what is left outside the elisions is the full name's text, in order
        head = s.split("<…>")[0].split("(…)")[0]
        assert full.removeprefix("void ").startswith(head)
    assert short_names(
        pl.Series(
            "k", ["void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>>(int, T2, T3)"]
        )
    ).to_list() == ["at::native::vectorized_elementwise_kernel<…>"]


def test_one_grouping_of_digits_for_the_terminal_table_and_the_explorer():
    """A terminal table groups the digits of a cell's text (`grouped`), the explorer formats the
    value (`fmt_cell`): the same figures read the same, and a size to the byte and a span to the
    µs say the digits Python's own grouping says. Values from the sample's kernel summary."""
    from kview.notation import exact_bytes, fixed, fmt_cell, grouped, human_ms

    frame = cuda_gpu_kern_sum(open_trace(LM, use_cache=False)).frame
    totals = frame["Total Time (ns)"].to_list()
    averages = frame["Avg (ns)"].to_list()
    assert len(totals) > 10 and any(t >= 1_000_000 for t in totals)
    for t in totals + [-t for t in totals]:
        assert grouped(str(t)) == fmt_cell(t) == format(t, ",")
    for a in averages:
        assert grouped(fixed([a], 1)[0]) == fmt_cell(a) == format(a, ",.1f")
        assert grouped(fixed([-a], 3)[0]) == fmt_cell(-a, 3)
    assert [grouped(v) for v in ("nan", "inf", "-inf")] == ["nan", "inf", "-inf"]
    assert fixed([None, 2.5], 2) == [None, "2.50"]
    total = sum(totals)
    assert exact_bytes(total).endswith(f" ({total:,} B)")
    assert human_ms(total, 3) == f"{total / 1e6:,.3f} ms"
