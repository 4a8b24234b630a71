"""The timeline: cells' busy time and op counts against a plain computation from the file
(sqlite3 or the JSON events), the `kview timeline` command, and every key of the TUI view."""

from __future__ import annotations

import gc
import lzma
import sqlite3
from decimal import Decimal

import numpy as np
import polars as pl
import pytest
from test_tui import loaded, screen_text
from textual import events

from kview.analysis import timeline as T
from kview.analysis.attribution import attribute, gpu_ops
from kview.analysis.ranks import make_run, rank_table
from kview.analysis.run_clock import run_clock
from kview.cli import main
from kview.trace import open_trace
from kview.tui.app import KviewApp
from kview.tui.messages import ShowOnTimeline

from conftest import KINETO, ROOT, SAMPLES, kineto_events

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
BERT_JSON = SAMPLES / "bert-2l_seq128_train_torch.json.gz"
CPU_ONLY = KINETO / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


@pytest.fixture(scope="module")
def lm_trace():
    """The LM trace opened once: its derived tables (attribution, NVTX tree, layers) are kept
    on it, so every app below opens it without computing them again."""
    return open_trace(LM, use_cache=False)


@pytest.fixture(scope="module")
def lm(lm_trace):
    return lm_trace, T.build(lm_trace)


def lm_app(trace) -> KviewApp:
    return KviewApp([str(LM)], use_cache=False, traces=[trace])


def plain_cells(starts, ends, edges):
    """Busy time (the union of the ops: overlapping ops count once) and op count per cell, cell
    by cell over the ops clipped to it (no prefix sums)."""
    s, e = np.asarray(starts), np.asarray(ends)
    busy, count = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        inside = (s < b) & (e > a)
        total, reach = 0, None
        for x, y in sorted(zip(np.maximum(s[inside], a).tolist(), np.minimum(e[inside], b).tolist())):
            if reach is None or x > reach:
                total, reach = total + y - x, y
            elif y > reach:
                total, reach = total + y - reach, y
        busy.append(total)
        count.append(int(inside.sum()))
    return np.array(busy, dtype=np.int64), np.array(count)


def test_gpu_row_cells_equal_a_plain_computation_from_the_export(lm):
    trace, tl = lm
    con = sqlite3.connect(f"file:{LM}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0 AND streamId = 7 UNION ALL "
        "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE deviceId = 0 AND streamId = 7 UNION ALL "
        "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE deviceId = 0 AND streamId = 7"
    ).fetchall()
    starts, ends = np.array(rows, dtype=np.int64).T
    gpu = [r for r in tl.rows if r.kind == "gpu"]
    assert [r.label for r in gpu] == ["GPU0 s7"] and len(gpu[0]) == len(rows) == 3117
    row = gpu[0]
    for t0, t1, w in [(*tl.span, 80), (20_000_000, 21_000_000, 157), (int(starts.min()), int(ends.max()), 3)]:
        cells = T.bin_row(row, t0, t1, w)
        busy, count = plain_cells(starts, ends, cells.edges)
        assert cells.busy.tolist() == busy.tolist() and cells.count.tolist() == count.tolist()
        # the busy fraction the glyphs draw is that time over the cell's width
        assert np.allclose(cells.fraction, np.minimum(busy / np.diff(cells.edges), 1))
    assert T.bin_row(row, int(starts.min()), int(ends.max()), 1).busy[0] == int((ends - starts).sum())
    # the timeline numbers GPU ops as Kernels does
    ops = gpu_ops(trace)
    idx = ops.filter(pl.col("stream") == 7).sort(["start", "end"])["Idx"].to_numpy()
    assert np.array_equal(np.sort(row.ident), np.sort(idx))
    by_idx = ops.select("Idx", "start").sort("Idx")["start"].to_numpy()
    assert np.array_equal(by_idx[row.ident - 1], row.start)


def test_api_and_nvtx_rows_equal_a_plain_computation(lm):
    trace, tl = lm
    con = sqlite3.connect(f"file:{LM}?mode=ro", uri=True)
    main_tid = con.execute(
        "SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid ORDER BY min(start) LIMIT 1"
    ).fetchone()[0]
    calls = np.array(
        con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid = ?", (main_tid,)).fetchall(),
        dtype=np.int64,
    )
    api = next(r for r in tl.rows if r.kind == "api" and r.group == str(main_tid))
    assert tl.rows.index(api) == 1  # the thread that called first comes right after the GPU rows
    cells = T.bin_row(api, *tl.span, 120)
    busy, count = plain_cells(calls[:, 0], calls[:, 1], cells.edges)
    assert cells.busy.tolist() == busy.tolist() and cells.count.tolist() == count.tolist()
    # NVTX rows by depth: a push/pop stack walked range by range
    ranges = con.execute(
        "SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59 AND globalTid = ? ORDER BY start, end DESC",
        (main_tid,),
    ).fetchall()
    stack: list[int] = []
    by_depth: dict[int, list[tuple[int, int]]] = {}
    for s, e in ranges:
        while stack and stack[-1] <= s:
            stack.pop()
        by_depth.setdefault(len(stack), []).append((s, e))
        stack.append(e)
    nvtx = {r.depth: r for r in tl.rows if r.kind == "nvtx" and r.group == str(main_tid) and r.depth >= 0}
    assert sorted(nvtx) == sorted(by_depth) and len(nvtx) == 11
    for d, rs in by_depth.items():
        s, e = np.array(rs, dtype=np.int64).T
        cells = T.bin_row(nvtx[d], *tl.span, 97)
        busy, count = plain_cells(s, e, cells.edges)
        assert cells.busy.tolist() == busy.tolist() and cells.count.tolist() == count.tolist(), d
    assert tl.names["nvtx"][int(nvtx[0].code[0])] == "profiled_step"


def test_kineto_gpu_rows_equal_the_json_events():
    trace = open_trace(BERT_JSON, use_cache=False)
    tl = T.build(trace)
    ev = [e for e in kineto_events(BERT_JSON, ("kernel", "gpu_memcpy", "gpu_memset")) if e.get("ph") == "X"]
    ns = [
        (int(e["args"]["stream"]), int(Decimal(e["ts"]) * 1000), int((Decimal(e["ts"]) + Decimal(e["dur"])) * 1000))
        for e in ev
    ]
    for stream in {s for s, _, _ in ns}:
        mine = [(a, b) for s, a, b in ns if s == stream]
        row = next(r for r in tl.rows if r.kind == "gpu" and r.label.endswith(f" s{stream}"))
        assert len(row) == len(mine)
        s, e = np.array(mine, dtype=np.int64).T - tl.origin
        cells = T.bin_row(row, *tl.span, 64)
        busy, count = plain_cells(s, e, cells.edges)
        assert cells.busy.tolist() == busy.tolist() and cells.count.tolist() == count.tolist()


def test_a_trace_without_kernels_has_its_cpu_rows(capsys):
    tl = T.build(open_trace(CPU_ONLY, use_cache=False))
    assert not [r for r in tl.rows if r.kind == "gpu"] and [r for r in tl.rows if r.kind == "nvtx"]
    rc = main(["timeline", str(CPU_ONLY), "--width", "90", "--no-cache"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "" and "gloo:all_reduce" in out and "GPU" not in out.split("\n", 1)[1]


def test_picture_names_long_ops_and_draws_density_elsewhere(lm):
    _, tl = lm
    top = next(r for r in tl.rows if r.kind == "nvtx" and r.depth == 1)
    cells = T.bin_row(top, *tl.span, 100)
    chars, cls = T.picture(tl, top, cells)
    assert chars.startswith("forward_pass█") and "backward_pass█" in chars and "optimizer_step" in chars
    gpu = tl.rows[0]
    chars, cls = T.picture(tl, gpu, T.bin_row(gpu, *tl.span, 100))
    assert set(chars) <= set(T.LEVELS) and " " not in chars.strip()  # many kernels a cell: density only
    assert {tl.classes[c] for c in cls if c >= 0} >= {"gemm", "elementwise"}


def test_timeline_command_text_md_csv_and_bad_arguments(capsys):
    rc = main(
        ["timeline", str(LM), "--width", "100", "--from", "20ms", "--to", "40ms", "--rows", "gpu,nvtx", "--no-cache"]
    )
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert rc == 0 and err == ""
    assert lines[0].startswith("lm-small_ctx256_train_nsys.sqlite · 20 ms .. 40 ms (span 20 ms")
    assert max(len(x) for x in lines) <= 100 and "CUDA API" not in out
    assert any(x.startswith("NVTX d2") and "layer_1" in x for x in lines)
    assert sum(x.startswith("NVTX d") for x in lines) == 2 * 3  # two threads, depth 3
    rc = main(["timeline", str(LM), "--width", "80", "-f", "md", "--no-cache"])
    md, _ = capsys.readouterr()
    assert rc == 0 and md.startswith("```\n") and md.endswith("```\n") and "GPU0 s7" in md
    rc = main(["timeline", str(LM), "--width", "65", "-f", "csv", "--rows", "gpu", "--no-cache"])
    csv, _ = capsys.readouterr()
    table = pl.read_csv(csv.encode())
    trace = open_trace(LM, use_cache=False)
    assert rc == 0 and table.height == 40 and table["Ops"].sum() >= gpu_ops(trace).height
    assert table["Busy (ns)"].sum() == int(gpu_ops(trace).select(pl.col("end") - pl.col("start")).sum().item())
    for argv, words in [
        (["--from", "5parsecs"], "cannot read time"),
        (["--rows", "gpu,disk"], "--rows"),
        (["--from", "50ms", "--to", "10ms"], "window is empty"),
        (["--width", "10"], "--width"),
    ]:
        rc = main(["timeline", str(LM), *argv])
        out, err = capsys.readouterr()
        assert rc == 2 and out == "" and err.count("\n") == 1 and words in err, (argv, err)


def test_the_window_ends_in_the_header_agree_with_the_cells_and_the_span(capsys):
    """The header's ends are the window's ends to within half a cell (the BERT trace's window
    starts at 10.24 ms, which the 5 ms tick step alone printed as `10 ms`)."""
    bert = SAMPLES / "bert-2l_seq128_train_nsys.sqlite"
    assert main(["timeline", str(bert), "--width", "80", "--no-cache"]) == 0
    head = capsys.readouterr().out.splitlines()
    head = next(x for x in head if " .. " in x and "per cell" in x)
    ends = head.split(" · ")[-1].split(" (span")[0].split(" .. ")
    assert main(["timeline", str(bert), "--width", "80", "-f", "csv", "--no-cache"]) == 0
    cells = pl.read_csv(capsys.readouterr().out.encode())
    t0, t1 = cells["Start (ns)"].min(), cells["End (ns)"].max()
    cell = (t1 - t0) / cells["Cell"].n_unique()
    scale = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1}
    for text, t in zip(ends, (t0, t1)):
        value, unit = text.split()
        assert abs(float(value.replace(",", "")) * scale[unit] - t) <= cell / 2, (head, t0, t1)


# -- the TUI view ------------------------------------------------------------------------
async def open_timeline(pilot):
    await loaded(pilot)
    await pilot.press("6")
    await pilot.pause()
    return pilot.app.view("timeline")


async def test_timeline_keys_pan_zoom_rows_fit_mark_and_depth(lm_trace):
    app = lm_app(lm_trace)
    async with app.run_test(size=(120, 36)) as pilot:
        v = await open_timeline(pilot)
        # what the load left is out of the collector's sight while the app runs, not after
        assert gc.get_freeze_count() > 10_000
        assert app.query_one("#tabs").active == "timeline" and v.data.attributed is not None
        lo, hi = v.timeline.span
        assert (v.t0, v.t1) == (lo, hi)
        shot = screen_text(app)
        for word in ("GPU0 s7", "CUDA API", "rofiled_step", "6 Timeline", "python3 1241/1241"):
            assert word in shot, word
        span = v.t1 - v.t0
        await pilot.press("right")
        assert v.t0 == lo + span // 8 and v.t1 - v.t0 == span
        await pilot.press("left")
        assert (v.t0, v.t1) == (lo, hi)
        await pilot.press("full_stop", "full_stop", "comma")
        assert v.col == 1
        t = v.cursor_time()
        await pilot.press("plus")
        assert abs((v.t1 - v.t0) - span / 2) <= 1 and abs(v.cursor_time() - t) <= (v.t1 - v.t0) / 100
        await pilot.press("minus")
        assert abs((v.t1 - v.t0) - span) <= 2
        await pilot.press("plus", "plus", "end")
        assert v.t1 == hi and v.col == v.canvas.cells_width() - 1
        await pilot.press("home")
        assert v.t0 == lo and v.col == 0
        await pilot.press("f")
        assert (v.t0, v.t1) == (lo, hi)
        # rows: down from the GPU row to the main thread's API row (past its title line)
        assert v.current_row().kind == "gpu"
        await pilot.press("down")
        assert v.current_row().kind == "api"
        await pilot.press("down", "down")
        row = v.current_row()
        assert (row.kind, row.depth) == ("nvtx", 1)
        await pilot.press("up")
        assert v.current_row().depth == 0
        # z: zoom to the range under the cursor (profiled_step at depth 0)
        await pilot.press("z")
        r = v.current_row()
        assert v.t0 <= int(r.start[0]) and v.t1 >= int(r.end[0]) and v.t1 - v.t0 < (int(r.end[0]) - r.start[0]) * 1.3
        assert "profiled_step" in str(v.status.render())
        # m: mark, then the status line says how far the cursor is from it
        await pilot.press("m", "full_stop", "full_stop")
        assert v.mark is not None and "mark→cursor" in str(v.status.render())
        # depth and expansion of a thread's NVTX rows
        n = sum(e.row is not None for e in v.entries)
        await pilot.press("greater_than_sign")
        assert sum(e.row is not None for e in v.entries) == n + 2  # one more depth on both threads
        await pilot.press("less_than_sign", "space")
        assert sum(e.row is not None for e in v.entries) == n + 8  # main thread: depths 3..10
        await pilot.press("space")
        assert sum(e.row is not None for e in v.entries) == n
        await pilot.press("pagedown")
        assert v.entry > 3
        await pilot.press("pageup")
        assert v.entry == 1
        await pilot.press("escape")  # clears the mark
        assert v.mark is None
    assert gc.get_freeze_count() == 0


async def test_timeline_jumps_from_kernels_and_enter_opens_the_kernel(lm_trace):
    app = lm_app(lm_trace)
    async with app.run_test(size=(120, 36)) as pilot:
        v = await open_timeline(pilot)
        table = attribute(lm_trace)  # what Kernels shows
        # J in Kernels (per-kernel rows) puts that kernel under the Timeline's cursor
        await pilot.press("2", "t", "down", "down", "J")
        await pilot.pause()
        kv = app.view("kernels")
        assert app.query_one("#tabs").active == "timeline"
        got = v.op_under_cursor()
        idx = int(kv.table.row()["Idx"])
        assert got is not None and int(got[0].ident[got[1]]) == idx
        assert "layer " in str(v.status.render()) and v.describe(*got).endswith(f"#{idx}")  # cut at 120 columns
        # enter opens it in Kernels
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one("#tabs").active == "kernels" and kv.filter_text == f"idx=={idx}"
        assert kv.table.frame["Idx"].to_list() == [idx]
        # a group's row: its longest instance
        await pilot.press("escape", "escape", "home", "J")
        await pilot.pause()
        row, i = v.op_under_cursor()
        top = table.filter(pl.col("Kernel") == kv.table.row(0)["_full"])
        assert int(row.ident[i]) == int(top.sort("Duration (ns)", descending=True)["Idx"][0])


async def test_timeline_highlight_and_jump_from_nvtx(lm_trace):
    app = lm_app(lm_trace)
    async with app.run_test(size=(120, 36)) as pilot:
        v = await open_timeline(pilot)
        table = attribute(lm_trace)
        # / highlights the ops a filter matches, counted as Kernels counts them
        await pilot.press("slash")
        assert app.focused is v.finput
        v.finput.value = "cat:gemm dir:bprop"
        await pilot.press("enter")
        assert v.hl_text == "cat:gemm dir:bprop"
        expected = table.filter(pl.col("Category").eq("gemm") & pl.col("Direction").eq("bprop")).height
        assert sum(int(cm[-1]) for cm, _ in v.hl_masks.values()) == expected > 0
        assert f"({expected:,} ops)" in str(v.status.render())
        await pilot.press("slash")
        v.finput.value = "dur>5parsecs"  # malformed: the highlight stays
        await pilot.press("enter")
        assert v.hl_text == "cat:gemm dir:bprop"
        await pilot.press("escape", "escape")
        assert v.hl_text == ""
        # J in NVTX: the range's first instance, on its thread's row at its depth
        await pilot.press("3")
        tree = app.query_one("#nvtx-tree")
        node = next(n for n in tree.root.children if str(n.label).startswith("profiled_step"))
        tree.move_cursor(node)
        await pilot.press("space")
        await pilot.pause()
        bwd = next(n for n in node.children if str(n.label).startswith("backward_pass"))
        tree.move_cursor(bwd)
        await pilot.press("J")
        await pilot.pause()
        assert app.query_one("#tabs").active == "timeline"
        row, i = v.op_under_cursor()
        assert row.kind == "nvtx" and row.depth == 1 and v.timeline.names["nvtx"][int(row.code[i])] == "backward_pass"


async def test_timeline_mouse_wheel_zooms_and_a_trace_without_kernels_opens():
    app = KviewApp([str(CPU_ONLY)], use_cache=False)
    async with app.run_test(size=(80, 24)) as pilot:
        v = await open_timeline(pilot)
        assert v.current_row().kind == "nvtx" and "gloo:all_reduce" in screen_text(app)
        span = v.t1 - v.t0
        v.canvas.post_message(events.MouseScrollUp(v.canvas, 40, 5, 0, -1, 0, False, False, False))
        await pilot.pause()
        assert abs((v.t1 - v.t0) - span / 2) <= 1 and v.col == 40 - v.canvas.label_width() - 1
        v.canvas.post_message(events.MouseScrollDown(v.canvas, 40, 5, 0, 1, 0, False, False, False))
        await pilot.pause()
        assert abs((v.t1 - v.t0) - span) <= 2


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
def test_snapshot_of_the_timeline(snap_compare, size, lm_trace):
    async def run_before(pilot):
        await open_timeline(pilot)
        await pilot.press("down", "down", "plus")
        await pilot.pause()

    assert snap_compare(lm_app(lm_trace), terminal_size=size, run_before=run_before)


def test_rows_whose_ops_overlap_bin_as_the_plain_computation():
    """Nested CUDA API calls and overlapping copies (a torch.profiler trace has both): op time
    adds up over overlapping ops, and the op a cell shows is one that reaches into it."""
    tl = T.build(open_trace(KINETO / "negative_queue_length_values_check__rank0.json.gz", use_cache=False))
    rows = [r for r in tl.rows if r.sums()[1] is not None]
    assert {r.kind for r in rows} >= {"api", "gpu"} and any(r.sums()[3] is not None for r in rows)
    for r in rows:
        lo, hi = int(r.start.min()), int(r.end.max())
        for t0, t1, w in [(lo, hi, 90), (lo + (hi - lo) // 3, lo + (hi - lo) // 3 + 50_000, 41)]:
            cells = T.bin_row(r, t0, t1, w)
            busy, count = plain_cells(r.start, r.end, cells.edges)
            assert cells.busy.tolist() == busy.tolist() and cells.count.tolist() == count.tolist()
            for c in range(w):
                a, b = int(cells.edges[c]), int(cells.edges[c + 1])
                i = T.op_at(r, a, b)
                assert (i >= 0) == (count[c] > 0) and (i < 0 or (r.start[i] < b and r.end[i] > a)), (r.label, c)


# -- a distributed run: rows grouped by rank ------------------------------------------------
DDP_1FILE = ROOT / "tests" / "fixtures" / "capture" / "ddp_nsys_1file.sqlite.xz"


@pytest.fixture(scope="module")
def ddp_1file(tmp_path_factory):
    """The 2-rank DDP run in one nsys export (both processes, both GPUs), unpacked."""
    out = tmp_path_factory.mktemp("ddp") / "ddp_nsys_1file.sqlite"
    out.write_bytes(lzma.decompress(DDP_1FILE.read_bytes()))
    return out


def test_a_multi_process_export_groups_rows_by_rank(ddp_1file, capsys):
    trace = open_trace(ddp_1file, use_cache=False)
    tl = T.build(trace)
    units = rank_table(make_run([trace])).select("Rank", "Process", "Device").rows()
    assert sorted(r for r, _, _ in units) == [0, 1]
    # rank 0's rows, then rank 1's, then the threads of processes that are no rank (torchrun's)
    order = [tl.ranks.get(r.group, 99) for r in tl.rows]
    assert order == sorted(order) and order[0] == 0 and order[-1] == 99
    con = sqlite3.connect(f"file:{ddp_1file}?mode=ro", uri=True)
    pid_of = "(({col} >> 24) & 16777215)"
    for rank, pid, device in units:
        rows = [r for r in tl.rows if tl.ranks.get(r.group) == rank]
        # its GPU rows hold exactly the ops its process ran on its device
        ops = con.execute(
            " UNION ALL ".join(
                f"SELECT start, end FROM {t} WHERE deviceId = ? AND {pid_of.format(col='globalPid')} = ?"
                for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
            ),
            (device, pid) * 3,
        ).fetchall()
        gpu = [r for r in rows if r.kind == "gpu"]
        assert {r.label.split(" ")[0] for r in gpu} == {f"GPU{device}"} and sum(len(r) for r in gpu) == len(ops) > 0
        busy = sum(int(T.bin_row(r, *tl.span, 1).busy[0]) for r in gpu)
        assert busy == sum(e - s for s, e in ops)
        # its CPU rows are the threads of its process that called CUDA or opened NVTX ranges
        tids = {
            t
            for (t,) in con.execute(
                f"SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE {pid_of.format(col='globalTid')} = ? "
                f"UNION SELECT globalTid FROM NVTX_EVENTS WHERE end IS NOT NULL AND {pid_of.format(col='globalTid')} = ?",
                (pid, pid),
            )
        }
        assert {int(r.group) for r in rows if r.kind != "gpu"} == tids
        assert all(tl.threads[g].startswith(f"rank {rank} · ") for g in {r.group for r in rows})
    # kview timeline prints the same groups in the same order
    assert main(["timeline", str(ddp_1file), "--width", "100", "--rows", "gpu,api", "--no-cache"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = out[next(i for i, x in enumerate(out) if "┌" in x) + 1 :]  # below the axis
    titles = [x for x in rows if "│" not in x]
    assert titles[0] == "rank 0 · GPU0 NVIDIA H200" and titles.index("rank 1 · GPU1 NVIDIA H200") > 1
    assert [x.split(" · ")[0] for x in titles if x.startswith("rank ")] == sorted(
        x.split(" · ")[0] for x in titles if x.startswith("rank ")
    )


def test_one_process_keeps_its_rows_ungrouped(lm):
    _, tl = lm
    assert tl.ranks == {} and not any(t.startswith("rank ") for t in tl.threads.values())


def test_nvtx_depths_without_the_nesting_equal_nest():
    """The timeline finds push/pop depths itself (sorted searches, no joins) when attribution has
    not nested the ranges: the same ranges, order and depths as nv.nest(), on a real trace and
    on ties, zero-length ranges and a push never popped on two threads."""
    from kview.analysis import nvtx_ranges as nv

    trace = open_trace(LM, use_cache=False)
    pushpop = nv.projection_ranges(trace).filter(pl.col("style") == "PushPop")
    synthetic = pl.DataFrame(
        {
            "id": list(range(12)),
            "global_tid": [1] * 8 + [2] * 4,
            "start": [0, 0, 5, 5, 5, 10, 10, 30, 0, 3, 3, 3],
            "end": [100, 100, 5, 10, 5, 10, 20, 999, 50, 3, 40, 3],
            "name_code": list(range(12)),
        }
    )
    for ranges in (pushpop, synthetic):
        tid, depth, start, end, code = T.pushpop_depths(ranges)
        tree = nv.nest(ranges)
        assert tid.tolist() == tree["global_tid"].to_list() and start.tolist() == tree["start"].to_list()
        assert end.tolist() == tree["end"].to_list() and code.tolist() == tree["name_code"].to_list()
        assert depth.tolist() == tree["depth"].to_list()
        nested = T._nested_depths(nv.Nesting.nested(ranges))
        assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(nested, (tid, depth, start, end, code)))
    assert max(T.pushpop_depths(pushpop)[1]) == 10
    # the rows read from the nesting where the trace holds it equal those found without it
    fresh = T.nvtx_row_table(open_trace(LM, use_cache=False))
    nested = open_trace(LM, use_cache=False)
    nv.projection_nesting(nested)
    assert fresh[0].height > 1000 and T.nvtx_row_table(nested)[0].equals(fresh[0])
    # the timeline's rows are the same whether or not attribution built the nesting first
    before = T.build(trace)
    nv.projection_tree(trace)
    after = T.build(trace)
    assert [(r.label, r.group) for r in before.rows] == [(r.label, r.group) for r in after.rows]
    for a, b in zip(before.rows, after.rows):
        assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end) and np.array_equal(a.code, b.code)
    # one short name per op marker's op: `aten::mm, op_id = 7, ...` is drawn as aten::mm
    assert len(before.names["nvtx"]) == len(set(before.names["nvtx"])) < nv.labels(trace).height
    assert not any(", op_id = " in n or ", seq = " in n for n in before.names["nvtx"])


@pytest.fixture(scope="module")
def ddp_per_rank(tmp_path_factory):
    """The 2-rank DDP run captured as one nsys export per rank, unpacked into a folder."""
    d = tmp_path_factory.mktemp("ddp_per_rank")
    for r in (0, 1):
        xz = ROOT / "tests" / "fixtures" / "capture" / f"ddp_nsys.rank{r}.sqlite.xz"
        (d / f"ddp_nsys.rank{r}.sqlite").write_bytes(lzma.decompress(xz.read_bytes()))
    return d


@pytest.fixture(scope="module")
def ddp_traces(ddp_per_rank):
    """The rank files opened once: what the explorer derives from them is kept on them."""
    return [open_trace(f, use_cache=False) for f in sorted(ddp_per_rank.glob("*.sqlite"))]


def test_a_run_of_rank_files_is_one_timeline_grouped_by_rank(ddp_per_rank, ddp_traces, capsys):
    files = sorted(ddp_per_rank.glob("*.sqlite"))
    traces = ddp_traces
    run = make_run(traces)
    tl = T.of_run([T.build(t) for t in traces], run.units, [t.name for t in traces], run_clock(traces))
    order = [tl.ranks.get(r.group, 99) for r in tl.rows]
    assert order == sorted(order) and set(order) >= {0, 1}
    starts = [
        sqlite3.connect(f"file:{f}?mode=ro", uri=True)
        .execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
        .fetchone()[0]
        for f in files
    ]
    for rank, f in enumerate(files):
        con = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
        shift = starts[rank] - min(starts)  # the file's session start on the run's clock
        ops = np.array(
            con.execute(
                " UNION ALL ".join(
                    f"SELECT start, end, streamId FROM {t}"
                    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
                )
            ).fetchall(),
            dtype=np.int64,
        )
        gpu = [r for r in tl.rows if r.kind == "gpu" and tl.ranks.get(r.group) == rank]
        assert gpu and all(r.trace == rank for r in gpu)
        # the file's ops on the run's clock: its first op where the export stamped it, moved by
        # its session start's UTC time
        first = min(r.when(0)[0] for r in gpu)
        assert first == int(ops[:, 0].min()) + shift
        # each stream's cells over the whole run equal the file's ops, cut at the cell edges
        assert sorted(r.label.split(" s")[1] for r in gpu) == sorted(str(x) for x in set(ops[:, 2].tolist()))
        for r in gpu:
            mine = ops[ops[:, 2] == int(r.label.split(" s")[1])]
            busy, count = plain_cells(mine[:, 0] + shift, mine[:, 1] + shift, T.edges(*tl.span, 64))
            cells = T.bin_row(r, *tl.span, 64)
            assert cells.busy.tolist() == busy.tolist() and cells.count.tolist() == count.tolist()
        # its threads: every thread of the file that called CUDA, titled with the rank
        tids = {t for (t,) in con.execute("SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
        api = {int(r.group.split(":")[1]) for r in tl.rows if r.kind == "api" and r.trace == rank}
        assert api == tids
        assert all(tl.threads[r.group].startswith(f"rank {rank} · ") for r in tl.rows if r.trace == rank)
        # names come from the row's own file
        r = gpu[0]
        i = int(np.argmax(r.end - r.start))
        (name,) = con.execute(
            "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
            "WHERE k.start = ? AND k.end = ?",
            (int(r.start[i]) + traces[rank].origin, int(r.end[i]) + traces[rank].origin),
        ).fetchone()
        assert r.names_key == f"gpu#{rank}" and tl.names[f"gpu_full#{rank}"][int(r.code[i])] == name
    # kview timeline reads the folder (or the files) as that run
    assert main(["timeline", str(ddp_per_rank), "--width", "100", "--rows", "gpu,api", "--no-cache"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = out[next(i for i, x in enumerate(out) if "┌" in x) + 1 :]  # below the axis
    titles = [x for x in rows if "│" not in x]
    assert out[0].startswith("2 traces (ddp_nsys.rank0.sqlite .. ddp_nsys.rank1.sqlite)")
    assert titles[0].startswith("rank 0 · GPU") and any(x.startswith("rank 1 · GPU") for x in titles)
    assert main(["timeline", *map(str, files), "--width", "100", "--rows", "gpu,api", "--no-cache"]) == 0
    assert capsys.readouterr().out.splitlines() == out


async def test_the_explorer_shows_a_run_of_rank_files_on_one_timeline(ddp_per_rank, ddp_traces):
    files = sorted(str(f) for f in ddp_per_rank.glob("*.sqlite"))
    traces = ddp_traces
    app = KviewApp(files, use_cache=False, traces=traces)
    async with app.run_test(size=(160, 45)) as pilot:
        v = await open_timeline(pilot)
        await loaded(pilot)
        assert v.data.run and v.every_trace
        titles = [e.title for e in v.entries if e.row is None]
        assert titles[0].startswith("rank 0 · GPU") and any(t.startswith("rank 1 · GPU") for t in titles)
        assert {r.trace for r in v.timeline.rows} == {0, 1} and "all 2 traces" in app.sub_title
        # T shows the other trace in Kernels; the Timeline keeps the run, where it was
        await pilot.press("right")
        view = (v.t0, v.t1)
        app.switch_trace(1)
        await pilot.pause()
        assert v.data.run and (v.t0, v.t1) == view
        # a jump from trace 2's Kernels (J): its kernel (the same Idx is trace 1's too), on rank 1's row
        att = attribute(traces[1]).sort("Duration (ns)", descending=True).head(1)
        app.post_message(ShowOnTimeline(idx=int(att["Idx"][0])))
        await pilot.pause()
        await pilot.pause()
        row, i = v.op_under_cursor()
        assert row.trace == 1 and v.timeline.ranks[row.group] == 1 and int(row.ident[i]) == att["Idx"][0]
        assert f"layer {att['Layer'][0]}" in v.describe(row, i)
        # enter on rank 0's kernel shows trace 1 in Kernels, filtered on that kernel
        gpu0 = next(r for r in v.timeline.rows if r.kind == "gpu" and r.trace == 0)
        v.entry = next(k for k, e in enumerate(v.entries) if e.row is gpu0)
        v.show_window(*gpu0.when(0), gpu0)
        await pilot.press("enter")
        await loaded(pilot)  # Kernels fetches trace 1's document, then takes the filter
        kv = app.view("kernels")
        assert app.current == 0 and app.query_one("#tabs").active == "kernels"
        assert kv.filter_text == f"idx=={int(gpu0.ident[0])}" and kv.table.frame["Idx"].to_list() == [
            int(gpu0.ident[0])
        ]
