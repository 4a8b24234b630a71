"""The Efficiency view (key 9) shows the tables of `kview efficiency`, names the GPU and its peaks,
and the Overview's tensor-core finding points at it."""

from __future__ import annotations

from test_tui import explorer, loaded, screen_text

from kview.analysis import efficiency as eff
from kview.trace import open_trace
from kview.tui.app import KviewApp

from conftest import SAMPLES

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"


async def test_efficiency_view_cycles_the_tables_of_kview_efficiency():
    trace = open_trace(LM, use_cache=False)
    app = explorer(str(LM))
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("9")
        assert app.query_one("#tabs").active == "efficiency"
        table = app.query_one("#efficiency-table")
        assert table.frame.equals(eff.by_step(trace))
        text = screen_text(app)
        assert "H200 SXM (NVIDIA H200, by name): FP32 67 · TF32 494.5" in text and "4,800 GB/s" in text
        await pilot.press("t")
        assert table.frame.equals(eff.by_group(trace, "Layer"))
        await pilot.press("t", "t", "t")
        assert table.frame.equals(eff.tensor_core_candidates(trace))
        assert "FP32 GEMMs that ran on CUDA cores" in screen_text(app)
        findings = app.view("overview").data.document.frame("findings")["Finding"].to_list()
        assert eff.finding(trace) in findings and "key 9" in eff.finding(trace)


async def test_compare_g_shows_the_regression_gate(tmp_path):
    """Two traces: `g` in Compare shows `kview diff A B --gate 5` as the gate sees it (every gated
    item, the regressed first), the last trace against the first; `g` again goes back."""
    import lzma
    import shutil

    from kview.analysis.gate import SCOPES, gate

    from conftest import FIXTURES

    paths = []
    for r in (1, 0):  # the fast rank as the baseline, the rank that waited 43x longer as the new run
        p = tmp_path / f"ddp_nsys.rank{r}.sqlite"
        with lzma.open(FIXTURES / "capture" / f"ddp_nsys.rank{r}.sqlite.xz") as src, open(p, "wb") as dst:
            shutil.copyfileobj(src, dst)
        paths.append(p)
    want = gate(
        open_trace(paths[0], use_cache=False), open_trace(paths[1], use_cache=False), dict.fromkeys(SCOPES, 5.0)
    )
    app = KviewApp([str(p) for p in paths], use_cache=False)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("5", "g")
        await loaded(pilot)
        table = app.query_one("#compare-table")
        assert table.frame.equals(want.items) and want.regressed.height > 0
        text = screen_text(app)
        assert f"{want.regressed.height} of {want.checked} items regressed past 5%" in text
        assert "--gate 5 (exit 1)" in text
        await pilot.press("g")
        await loaded(pilot)
        assert "Range" in table.frame.columns
