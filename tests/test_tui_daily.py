"""The TUI as a daily driver (issue 14): every jump lands on the right rows, every table is
readable at any width, every key is discoverable. Pilot tests on real traces; the numbers
they check come from the core and are compared with the CLI or an independent computation."""

from __future__ import annotations

import polars as pl
import pytest

pytest.importorskip("textual")

from test_tui import explorer, loaded  # noqa: E402

from kview.trace import open_trace  # noqa: E402
from kview.tui.app import KviewApp  # noqa: E402

from conftest import SAMPLES  # noqa: E402

LM = str(SAMPLES / "lm-small_ctx256_train_nsys.sqlite")
LM_FWD = str(SAMPLES / "lm-small_ctx256_forward_nsys.sqlite")
LM_BWD = str(SAMPLES / "lm-small_ctx256_backward_nsys.sqlite")

MM_BACKWARD = "profiled_step > backward_pass > autograd::engine::evaluate_function: MmBackward0"
OPTIM_MUL = "profiled_step > optimizer_step > Optimizer.step#AdamW.step > aten::mul_"


def path_row(app, path: str) -> dict:
    return app.view("nvtx").data.paths.filter(pl.col("Path") == path).row(0, named=True)


# -- 1: NVTX -> enter shows exactly the kernels the range's GPU time counts ----------------------
async def test_nvtx_enter_shows_exactly_the_kernels_the_range_counts():
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("3")
        nv, kv = app.view("nvtx"), app.view("kernels")
        for path in (MM_BACKWARD, OPTIM_MUL, "profiled_step > forward_pass > layer_3", "profiled_step"):
            row = path_row(app, path)
            assert nv.reveal(row["path_id"]) is not None
            await pilot.pause()
            await pilot.press("enter")
            await pilot.pause()
            assert app.query_one("#tabs").active == "kernels" and kv.mode == "rows"
            shown = kv.table.frame
            assert row["GPU ops"] > 0
            assert (shown.height, shown["Duration (ns)"].sum()) == (row["GPU ops"], row["GPU (ns)"]), path
            assert path in str(kv.status.render())
            await pilot.press("escape")  # back where the jump came from, the cursor on the range
            await pilot.pause()
            assert app.query_one("#tabs").active == "nvtx"
            assert nv.range_tree.cursor_node.data["Path"] == path
            assert kv.state.scope is None and kv.mode == "summary"
        # the optimizer's aten::mul_ kernels are the optimizer's (their rows carry no op-marker label)
        nv.reveal(path_row(app, OPTIM_MUL)["path_id"])
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert set(kv.table.frame["Direction"]) == {"optim"}


# -- 11: autograd-thread work under the phase it counts in ----------------------------------------
async def test_autograd_work_hangs_under_backward_pass():
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("3")
        nv = app.view("nvtx")
        tree = nv.range_tree
        top = [n.data["Path"] for n in tree.root.children]
        assert top == ["profiled_step"]  # no top-level autograd::engine rows beside it
        bwd = nv.reveal(path_row(app, "profiled_step > backward_pass")["path_id"])
        nv._add_ranges(bwd, bwd.data["path_id"]) if not bwd.children else None
        kids = {n.data["Name"]: n.data for n in bwd.children}
        assert "autograd::engine::evaluate_function: MmBackward0" in kids and len(kids) > 20
        # the children's GPU time is part of backward_pass's, none of it counted twice
        assert sum(k["GPU (ns)"] for k in kids.values()) <= bwd.data["GPU (ns)"]
        # the kernel table puts those kernels under the same phase
        nv.reveal(kids["autograd::engine::evaluate_function: MmBackward0"]["path_id"])
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        rows = app.view("kernels").table.frame
        assert set(rows["NVTX Path"]) == {"profiled_step > backward_pass"} and set(rows["Direction"]) == {"bprop"}


# -- 6: filters ------------------------------------------------------------------------------
async def test_filter_history_grouping_spaces_completion_and_errors():
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        for f in ("gemm", "dir:bprop", "cat:elementwise"):
            await pilot.press("slash", *f, "enter")
        # up recalls the newest first, then older ones; down comes back
        await pilot.press("slash")
        line = app.query_one("#filter")
        await pilot.press("up")
        assert line.value == "dir:bprop"  # the newest differs from what the line shows
        await pilot.press("up")
        assert line.value == "gemm"
        await pilot.press("down")
        assert line.value == "dir:bprop"
        await pilot.press("escape")
        # a filter keeps the grouping: grouped by category, the rows each category sums narrow
        await pilot.press("g", "g")  # short name, then category
        assert kv.table.columns[8] == "Category"
        await pilot.press("slash", *"dir:bprop", "enter")
        assert kv.mode == "summary" and kv.table.columns[8] == "Category"
        a = kv.attributed.table.filter(pl.col("Direction") == "bprop")
        assert kv.table.frame["Total Time (ns)"].sum() == a["Duration (ns)"].sum()
        # `dur > 1ms` with spaces is dur>1ms
        await pilot.press("slash", *"dur > 100us", "enter")
        big = kv.attributed.table.filter(pl.col("Duration (ns)") > 100_000)
        assert kv.filter_text == "dur > 100us" and kv.table.frame["Instances"].sum() == big.height > 0
        # completion covers the term being typed, not only the first
        await pilot.press("slash")
        line.value = ""
        await pilot.press(*"dir:bprop cat:gem")
        await loaded(pilot)  # the palette's search, the input's suggester: workers
        assert line._suggestion == "dir:bprop cat:gemm"
        await pilot.press("right")  # accept
        assert line.value == "dir:bprop cat:gemm"
        line.value = ""
        await pilot.press(*"dir:fprop layer:layer_1")
        await loaded(pilot)  # the palette's search, the input's suggester: workers
        assert line._suggestion.startswith("dir:fprop layer:layer_1")
        # a refused filter says why on the line above, the line stays open, no toast
        line.value = ""
        await pilot.press(*"dur>5parsecs", "enter")
        err = app.query_one("#filter-error")
        assert err.display and "unknown unit" in str(err.render()) and line.display
        assert kv.filter_text == "dur > 100us" and not app._notifications
        line.value = ""
        await pilot.press(*"gemm", "enter")
        assert not err.display and not line.display and kv.filter_text == "gemm"


# -- 7: a group's category is where its time goes ------------------------------------------------
async def test_grouped_category_is_the_category_of_most_time():
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        while kv.table.columns[8] != "Direction":
            await pilot.press("g")
        rows = {r["Direction"]: r for r in kv.table.frame.iter_rows(named=True)}
        a = kv.attributed.table.filter(pl.col("Direction") == "bprop")
        by_cat = a.group_by("Category").agg(pl.col("Duration (ns)").sum()).sort("Duration (ns)", descending=True)
        by_count = a.group_by("Category").len().sort("len", descending=True)
        assert by_cat["Category"][0] == "gemm" != by_count["Category"][0]  # the two rules differ here
        assert rows["bprop"]["Category"] == "gemm"


# -- shared helpers for the checks below ---------------------------------------------------------
def lines(app) -> list[str]:
    """The screen as lines of text."""
    return [s.text for s in app.screen._compositor.render_strips()]


def notes(app) -> str:
    """The text of the notifications on screen."""
    return "\n".join(n.message for n in app._notifications)


def sqlite(path: str, query: str, *args) -> list[tuple]:
    import sqlite3

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(query, args).fetchall()


# -- 3, 8, `/` in the Overview: scrolled by keyboard at 80x24, y copies the focused section --------
async def test_overview_scrolls_by_keyboard_copies_the_focused_section_and_searches(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    app = explorer(LM)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("1")
        await pilot.pause()
        ov = app.view("overview")
        scroll = app.query_one("#overview-scroll")
        assert type(app.focused).__name__ == "Section" and scroll.max_scroll_y > 0
        assert "Findings" not in "\n".join(lines(app))  # below the fold at 80x24
        await pilot.press("end")
        await pilot.pause()
        # the bottom: the last section (Findings) ends on screen
        last = ov.data.document.frame("findings")["Finding"].to_list()[-1][:30]
        assert scroll.scroll_y == scroll.max_scroll_y and last in "\n".join(lines(app))
        await pilot.press("home")
        await pilot.pause()
        assert scroll.scroll_y == 0
        # tab walks the sections; y copies the one focused and names it
        titles = []
        for _ in ov.sections:
            titles.append(app.focused.title)
            await pilot.press("tab")
        assert titles == [s.title for s in ov.sections] and "Top kernels" in titles
        while getattr(app.focused, "title", None) != "Top kernels":
            await pilot.press("shift+tab")
        await pilot.press("y")
        top = ov.data.document.frame("kernels")
        md = app.clipboard.splitlines()
        assert len(md) == 2 + top.height and md[0].startswith("| " + top.columns[0])
        assert "overview top kernels" in notes(app)
        # `/` finds text in any section, n goes on; the match is scrolled into view
        await pilot.press("slash", *"launch-bound", "enter")
        await pilot.pause()
        assert app.focused.title == "Findings" and app.focused.marked is not None
        assert "Launch-bound" in "\n".join(lines(app))
        await pilot.press("escape")
        assert all(s.marked is None for s in ov.sections)


# -- 5, 9: columns readable at 80x24, units, VisiData's column keys, sort arrow, footer, help, palette --
def test_cut_names_read_the_same_whatever_order_the_rows_come_in():
    """Names told apart in a narrow column are the same picture on every run: the rows' order
    (polars' unique() differs between runs) must not decide which clash is settled first."""
    import random

    from kview.notation import distinct_cuts, distinct_short_names
    from kview.reports import cuda_gpu_kern_sum

    names = distinct_short_names(cuda_gpu_kern_sum(open_trace(LM)).frame["Name"]).to_list()
    for width in (14, 23, 30):
        first = distinct_cuts(names, width)
        assert len(set(first.values())) > 1 and set(first) == set(names)
        for seed in range(6):
            shuffled = names[:]
            random.Random(seed).shuffle(shuffled)
            assert distinct_cuts(shuffled, width) == first


async def test_columns_never_cut_numbers_units_column_keys_footer_help_and_palette():
    app = explorer(LM)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        t = kv.table
        screen = "\n".join(lines(app))
        # the footer names the view's main keys
        assert all(k in screen.splitlines()[-1] for k in ("/ filter", "t rows", "g group", "F freq", "? keys"))
        # every number on the first page is whole (no cut value, no ellipsis among digits)
        page = t.sorted_frame().head(10)
        for c in ("Total Time (ns)", "Instances", "Avg (ns)"):
            for v in page[c].to_list():
                assert (f"{v:,.1f}" if isinstance(v, float) else f"{v:,}") in screen, (c, v)
        # names that would read the same at this width keep their differing part
        names = [ln[ln.index("  sm80") + 2 :].split("  ")[0] for ln in screen.splitlines() if "  sm80" in ln]
        assert len(names) >= 3 and len(set(names)) >= 3, names
        # per-kernel rows: `end` does not cut Idx; Layer keeps its end (the innermost range)
        await pilot.press("t", "end")
        await pilot.pause()
        screen = "\n".join(lines(app))
        assert f"{kv.table.frame.height:,}" in screen
        assert t.widths[t.columns.index("Idx")] >= len(f"{t.frame.height:,}")
        await pilot.press("home")
        await pilot.pause()
        # a cut Layer keeps its end (the innermost range): what follows "…" ends that row's Layer
        screen = lines(app)
        top = next(k for k, ln in enumerate(screen) if ln.startswith("Idx "))
        x0 = sum(w + 2 for w in t.widths[: t.columns.index("Layer")])
        w = t.widths[t.columns.index("Layer")]
        cells = [(screen[top + 1 + i][x0 : x0 + w].rstrip(), str(t.row(i)["Layer"])) for i in range(8)]
        cut_ones = [(cell, layer) for cell, layer in cells if "…" in cell]
        assert cut_ones and all(layer.endswith(cell.split("…")[-1]) for cell, layer in cut_ones), cells
        assert all(len(cell.split("…")[-1]) >= 6 for cell, _ in cut_ones), cells
        # u: durations in µs, then ms, then ns; the header says which (in the summary)
        await pilot.press("t", "u")
        await pilot.pause()
        assert "Avg (µs)" in [t.header(c) for c in t.columns]
        d = t.sorted_frame()["Avg (ns)"][0]
        assert f"{d / 1000:,.3f}" in "\n".join(lines(app))
        await pilot.press("u", "u")
        assert FrameTableUnit() == "ns"
        await pilot.press("t")
        # - hides the column under the cursor, = shows every column again, _ full width, > widens
        await pilot.press("right", "right")
        col = t.column_at_cursor()
        await pilot.press("minus")
        assert col not in t.columns
        await pilot.press("equals_sign")
        assert col in t.columns
        t.cursor_col = t.columns.index("Kernel")
        before = t.widths[t.cursor_col]
        await pilot.press("underscore")
        assert t.widths[t.cursor_col] == max(t.natural["Kernel"], len("Kernel") + 1) > before
        await pilot.press("underscore", "greater_than_sign")
        assert t.widths[t.cursor_col] == before + 4
        # a sort arrow in the header
        await pilot.press("escape", "right")
        await pilot.press("S")
        assert "▼" in lines(app)[4]
        # ? scrolls at 80x24 and lists the table's and the view's keys
        await pilot.press("question_mark")
        await pilot.pause()
        scroller = app.screen.query_one("#help-scroll")
        assert scroller.max_scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert scroller.scroll_y == scroller.max_scroll_y
        text = str(app.screen.query_one("#help-text").render())
        assert "Frequency of the column" in text and "Hide the column" in text and "Switch trace" not in text
        await pilot.press("escape")
        # the palette lists every kview action by name, before anything is typed
        from kview.tui.commands import commands

        names = [n for n, _ in commands(app)]
        for want in (
            "View: Layers",
            "Copy what is shown as Markdown (the table, the focused section, the Timeline picture)",
            "Kernels: Frequency of the column under the cursor: count, time, share per value",
            "Kernels: Kernel context: launch call, latency, NVTX path, kernels around it on its stream",
            "Compare: Compare by range, layer, category or kernel (kview compare --by)",
            "Durations in ns, µs or ms",
            "Kernels: group by layer",
        ):
            assert want in names, want
        await pilot.press("ctrl+p")
        await loaded(pilot)  # the palette's search, the input's suggester: workers
        await pilot.press(*"Durations")
        await loaded(pilot)  # the palette's search, the input's suggester: workers
        await pilot.press("enter")
        await pilot.pause()
        assert FrameTableUnit() == "µs"
        await pilot.press("u", "u")


def FrameTableUnit() -> str:  # noqa: N802 - reads like the class attribute it returns
    from kview.tui.widgets.frame_table import FrameTable

    return FrameTable.unit


# -- 2, 4, 10: the trace switcher, Layers bars whole and coloured, Compare by and metric -----------
async def test_trace_switcher_layers_bars_and_compare_by_and_metric():
    from kview.reports import cuda_gpu_kern_sum

    app = explorer(LM, LM_FWD, LM_BWD)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        assert (
            "trace 1/3 (T): lm-small_ctx256_train_nsys" in app.sub_title
            and "lm-small_ctx256_train_nsys" in app.sub_title
        )
        # ] shows the next trace in every view that shows one; the numbers are that trace's
        await pilot.press("right_square_bracket")
        await loaded(pilot)  # each view fetches its document of that trace
        fwd = cuda_gpu_kern_sum(open_trace(LM_FWD, use_cache=False)).frame
        assert kv.table.frame["Total Time (ns)"].to_list() == fwd["Total Time (ns)"].to_list()
        assert "trace 2/3" in app.sub_title and "forward" in app.sub_title
        await pilot.press("3")
        await pilot.pause()
        tree = app.view("nvtx").range_tree
        assert "forward_nsys" in str(tree.root.label)
        assert "backward_pass" not in {n.data["Name"] for n in tree.root.children[0].children}
        # T picks a trace by name (the dialog lists them all)
        await pilot.press("T")
        await pilot.pause()
        assert type(app.screen).__name__ == "PickScreen"
        await pilot.press("down", "enter")  # the third
        await loaded(pilot)
        assert app.current == 2 and "trace 3/3" in app.sub_title
        assert "backward_nsys" in str(app.view("nvtx").range_tree.root.label)
        await pilot.press("2")
        await pilot.pause()
        bwd = cuda_gpu_kern_sum(open_trace(LM_BWD, use_cache=False)).frame
        assert kv.table.frame["Total Time (ns)"].to_list() == bwd["Total Time (ns)"].to_list()
        await pilot.press("T", "2")  # a digit picks in one key, without waiting for the dialog's cursor
        await loaded(pilot)
        assert app.current == 1 and "trace 2/3" in app.sub_title
        await pilot.press("T", "9")  # no ninth trace: the dialog stays
        await pilot.pause()
        assert type(app.screen).__name__ == "PickScreen" and app.current == 1
        await pilot.press("escape", "left_square_bracket")  # back to the first
        await loaded(pilot)
        assert app.current == 0
        # Layers: both bars whole at 160 columns, forward green and backward yellow, legend above
        await pilot.press("4")
        await pilot.pause()
        lt = app.view("layers").table
        assert lt.columns[:3] == ["Layer", "Fwd █ Bwd ▓", "Sublayers"]
        screen = lines(app)
        header = next(ln for ln in screen if ln.startswith("Layer "))
        assert "Fwd █ Bwd ▓" in header and "Sublayers" in header and "…" not in header
        row0 = next(ln for ln in screen if ln.startswith("layer_0 "))
        bar0 = lt.sorted_frame()["Fwd █ Bwd ▓"][0]
        assert bar0 in row0 and "▓" in bar0 and len(bar0) >= 20  # whole, and wide where there is room
        colours = {seg.style.color.name for seg in lt.render_line(1) if seg.style and seg.style.color}
        assert {"green", "yellow"} <= colours
        legend = str(app.view("layers").status.render())
        assert "█ forward" in legend and "▓ backward" in legend
        # Layers sort by the column under the cursor (S), the arrow in the header
        lt.cursor_col = lt.columns.index("Backward (ns)")
        await pilot.press("S")
        await pilot.pause()
        b = lt.sorted_frame()["Backward (ns)"].to_list()
        assert b == sorted(b, reverse=True) and "Backward (ns)▼" in next(
            ln for ln in lines(app) if ln.startswith("Layer ")
        )
        # Compare: by range by default; b by layer gives what the Layers view gives per trace
        await pilot.press("5")
        await pilot.pause()
        assert app.sub_title == "all 3 traces"
        ct = app.view("compare")
        assert ct.data.by == "range"
        names = ct.table.frame["Range"].to_list()
        assert "scaled_dot_product_attention" in names
        rng = ct.table.widths[ct.table.columns.index("Range")]
        assert rng >= len("scaled_dot_product_attention")  # names are not cut to 14 while numbers get 35
        await pilot.press("b")
        await loaded(pilot)
        assert ct.data.by == "layer" and app.focused is ct.table
        layers = app.view("layers").data.layers
        by_layer = ct.table.frame.join(layers.select("Layer", "Total (ns)"), on="Layer")
        assert by_layer.height == 12 and (by_layer["train"] == by_layer["Total (ns)"]).all()
        assert "--by layer" in str(app.query_one("#compare-caption").render())
        await pilot.press("b", "b", "b")  # category, kernel, range again
        await loaded(pilot)
        assert ct.data.by == "range"
        await pilot.press("m")
        await loaded(pilot)
        assert ct.data.metric == "cpu" and "--metric cpu" in str(app.query_one("#compare-caption").render())
        cpu = ct.table.frame.filter(pl.col("Range") == "profiled_step")["train"][0]
        assert [(cpu,)] == sqlite(LM, "SELECT end - start FROM NVTX_EVENTS WHERE text = 'profiled_step'")


# -- kernel context, frequency (F), `/` in the NVTX tree, 8: copy and export what is shown ----------
async def test_kernel_context_frequency_nvtx_search_copy_and_export(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        # context of a gemm: its launch call and latency equal the trace's own rows
        await pilot.press("slash", *"cat:gemm", "enter", "t")
        await pilot.press("down", "down", "c")
        await loaded(pilot)
        await pilot.pause()
        assert type(app.screen).__name__ == "ContextScreen"
        ctx = app.screen.ctx
        k = ctx.kernel
        [(latency, api_start, name)] = sqlite(
            LM,
            "SELECT k.start - r.start, r.start, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
            "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId JOIN StringIds s ON s.id = r.nameId "
            "WHERE k.correlationId = ?",
            k["Correlation"],
        )
        assert ctx.launch["Launch latency (ns)"] == latency > 0 and name.startswith(ctx.launch["API"])
        assert ctx.launch["Thread"] == "python3"
        assert ctx.ranges[:2] == ["profiled_step", "forward_pass"]
        # the ops before and after it on its stream, in the trace's order
        stream = sqlite(
            LM,
            "SELECT end - start FROM (SELECT start, end, streamId FROM CUPTI_ACTIVITY_KIND_KERNEL "
            "UNION ALL SELECT start, end, streamId FROM CUPTI_ACTIVITY_KIND_MEMSET UNION ALL "
            "SELECT start, end, streamId FROM CUPTI_ACTIVITY_KIND_MEMCPY) WHERE streamId = ? "
            "ORDER BY start",
            k["Stream"],
        )
        durations = [d for (d,) in stream]
        me = ctx.around["Idx"].to_list().index(k["Idx"])
        at = ctx.around["Duration (ns)"].to_list()
        i = next(j for j in range(len(durations)) if durations[j : j + len(at)] == at)
        assert me == 5 and len(at) == 11 and i >= 0
        text = str(app.screen.query_one("#context-text").render())
        assert "launch latency" in text and k["NVTX Path"] in text.replace("\n", " ")
        await pilot.press("escape")
        # F: the frequency of the column under the cursor, for the current filter
        await pilot.press("t")  # back to the summary (by name), the filter stays
        kv.table.cursor_col = kv.table.columns.index("Kernel")  # filtered: regrouped from the kernel rows
        await pilot.press("F")
        assert kv.mode == "freq" and kv.state.freq == "Kernel"
        f = kv.table.frame
        gemm = kv.attributed.table.filter(pl.col("Category") == "gemm")
        want = sorted(
            ((len(d), sum(d)) for d in gemm.group_by("Kernel").agg("Duration (ns)")["Duration (ns)"].to_list()),
            reverse=True,
        )
        assert [(r["Count"], r["Total Time (ns)"]) for r in f.iter_rows(named=True)] == want
        assert abs(f["Count (%)"].sum() - 100) < 0.5
        await pilot.press("enter")  # the kernels of that value
        assert kv.mode == "rows" and kv.table.frame.height == f["Count"][0]
        await pilot.press("escape", "escape")
        assert kv.mode == "summary" and kv.filter_text == "cat:gemm"
        # e: a dialog with a title and each destination; Share glyphs never go into CSV
        await pilot.press("e")
        await pilot.pause()
        assert type(app.screen).__name__ == "PickScreen"
        title = str(app.screen.query_one("#pick-title").render())
        assert title.startswith("Export kernels by name (") and "rows)" in title
        options = app.screen.query_one("#pick-options")
        assert str(options.get_option_at_index(1).prompt).endswith("lm-small_ctx256_train_nsys_kernels_by_name.csv")
        await pilot.press("down", "enter")
        await pilot.pause()
        out = tmp_path / "lm-small_ctx256_train_nsys_kernels_by_name.csv"
        csv = pl.read_csv(out)
        assert "Share" not in csv.columns and csv.height == kv.table.frame.height
        assert not any("█" in line for line in out.read_text().splitlines())
        await pilot.press("e", "down", "enter")  # again: a new file, the first one kept
        await pilot.pause()
        assert (tmp_path / "lm-small_ctx256_train_nsys_kernels_by_name-1.csv").exists()
        assert "kernels by name" in notes(app)
        # NVTX: `/` finds ranges anywhere in the tree, collapsed parts included; n goes on
        await pilot.press("3", "slash", *"MulBackward", "enter")
        await pilot.pause()
        nv = app.view("nvtx")
        node = nv.range_tree.cursor_node
        assert "MulBackward" in node.data["Name"] and len(nv.found) >= 2
        first = node.data["path_id"]
        await pilot.press("n")
        await pilot.pause()
        assert nv.range_tree.cursor_node.data["path_id"] != first
        assert "match 2 of" in str(nv.status.render())
        # y copies the tree as shown (the expanded part), not the whole flattened tree
        await pilot.press("escape", "y")
        md = app.clipboard.splitlines()
        shown = nv.shown().frame
        assert len(md) == 2 + shown.height < 2 + nv.data.paths.height
        assert "nvtx tree as shown" in notes(app)


# -- the same keys on a Kineto trace, a trace without kernels and an nsys 2022 export, at 80x24 ------
async def test_kineto_no_kernel_and_old_nsys_traces_switch_and_keep_every_key():
    from conftest import KINETO, PUBLIC

    vllm = str(KINETO / "traces__inference__vllm_decode_full__graph_execution.json.gz")
    cpu_only = str(KINETO / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    lenet = str(PUBLIC / "dlprof_lenet_nsys2022.1.sqlite")
    app = KviewApp([vllm, cpu_only, lenet], use_cache=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        assert lines(app)[0].strip().startswith("⭘") and "trace 1/3 (T)" in lines(app)[0]
        # Kineto: per-kernel rows, context with the HIP launch call, F on the Op column
        await pilot.press("t", "c")
        await loaded(pilot)
        await pilot.pause()
        ctx = app.screen.ctx
        assert ctx.launch is not None and ctx.launch["API"].startswith("hip")
        assert ctx.launch["Launch latency (ns)"] == ctx.kernel["Start (ns)"] - ctx.launch["CPU start (ns)"]
        await pilot.press("escape")
        kv.table.cursor_col = kv.table.columns.index("Op")
        await pilot.press("F")
        f = kv.table.frame
        assert kv.state.freq == "Op" and f["Count"].sum() == kv.attributed.table.height
        # the trace without kernels: its CPU ops, and kernel keys say why they do nothing
        await pilot.press("escape", "right_square_bracket")
        await loaded(pilot)
        assert app.current == 1 and kv.kern_sum.note.startswith("no GPU kernels")
        assert "Calls" in kv.table.frame.columns
        await pilot.press("1")
        await pilot.pause()
        scroll = app.query_one("#overview-scroll")
        await pilot.press("end")
        await pilot.pause()
        assert "Findings" in "\n".join(lines(app)) and scroll.scroll_y == scroll.max_scroll_y
        # nsys 2022.1 (LeNet under DLProf): context and NVTX search work on the oldest schema
        await pilot.press("right_square_bracket", "2")
        await loaded(pilot)
        await pilot.press("t")
        assert app.current == 2 and "dlprof_lenet" in app.sub_title
        await pilot.press("c")
        await loaded(pilot)
        await pilot.pause()
        ctx = app.screen.ctx
        [(latency,)] = sqlite(
            lenet,
            "SELECT k.start - r.start FROM (SELECT start, correlationId FROM "
            "CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, correlationId FROM "
            "CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, correlationId FROM "
            "CUPTI_ACTIVITY_KIND_MEMSET) k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId WHERE k.correlationId = ?",
            ctx.kernel["Correlation"],
        )
        assert ctx.launch["Launch latency (ns)"] == latency
        await pilot.press("escape", "3", "slash", *"traceMarker", "enter")
        await pilot.pause()
        nv = app.view("nvtx")
        assert nv.found and "traceMarker" in nv.range_tree.cursor_node.data["Name"]
        assert app.return_code is None
