"""The Launches view (key 0) shows the tables of `kview launches`, and the Overview's finding
points at it."""

from __future__ import annotations

from test_tui import loaded, screen_text

from kview.analysis import critical_path as cp
from kview.analysis import launches as la
from kview.analysis.overview import launch_findings
from kview.trace import open_trace
from kview.tui.app import KviewApp

from conftest import KINETO

TRACE = KINETO / "trace_filter__sampled_rank-0.json.gz"


async def test_launches_view_cycles_the_tables_of_kview_launches():
    trace = open_trace(TRACE, use_cache=False)
    app = KviewApp([str(TRACE)], use_cache=False)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("0")
        assert app.query_one("#tabs").active == "launches"
        table = app.query_one("#launches-table")
        assert table.frame.equals(la.idle_by_stream(trace))
        await pilot.press("t")
        assert table.frame.equals(la.gap_table(trace))
        await pilot.press("t", "t")
        assert table.frame.equals(la.launch_stats(trace, "Op"))
        assert "Launch cost and delay by the CPU op" in screen_text(app)
        await pilot.press("t", "t")
        assert table.frame.equals(cp.step_table(trace))
        await pilot.press("t")
        assert table.frame.equals(cp.top_ops(trace))
        shown = app.view("overview").data.document.frame("critical-path")
        assert shown["Bound by"].to_list() == cp.step_table(trace)["Bound by"].to_list() == ["CPU-bound"] * 2
        findings = app.view("overview").data.document.frame("findings")["Finding"].to_list()
        assert [f for f in findings if f.startswith("Host-bound")] == launch_findings(trace)
        assert launch_findings(trace) and "key 0" in launch_findings(trace)[0]


async def test_ranks_view_iterations_carry_the_verdict_of_kview_iterations():
    """HTA's trace_filter ranks 0 and 1 as one run: the Ranks view's iterations are those of
    `kview iterations`, each with its critical path's CPU share and verdict."""
    from kview.analysis.ranks import make_run
    from kview.documents.ranks import run_tables

    paths = [KINETO / f"trace_filter__sampled_rank-{r}.json.gz" for r in (0, 1)]
    want = run_tables(make_run([open_trace(p, use_cache=False) for p in paths]), "iterations")["iterations"]
    assert want["Bound by"].null_count() == 0 and want.height == 4
    app = KviewApp([str(p) for p in paths], use_cache=False)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("7")
        await pilot.pause()
        got = app.view("ranks").table.frame
        assert got.select("Rank", "Iteration", "CPU share (%)", "Bound by").equals(
            want.select("Rank", "Iteration", "CPU share (%)", "Bound by")
        )
