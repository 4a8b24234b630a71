"""Distributed runs: ranks, iterations, GPU time per rank and iteration, collectives and
stragglers, checked against an independent computation (rank_truth.py) on the 2-rank DDP
captures (rank 1 sleeps 20 ms before each step), HTA's two public ranks, and hand-made traces
with known overlaps."""

from __future__ import annotations

import json
import lzma
import re
import shutil

import polars as pl
import pytest
import rank_truth as truth

from kview.analysis.collectives import (
    collective_ops,
    collectives_by_rank,
    collectives_of,
    instance_parts,
    shared_instances,
    straggler_instances,
    straggler_table,
    stragglers,
)
from kview.analysis.critical_path import with_bound_by
from kview.analysis.iterations import iteration_stats, iteration_table
from kview.analysis.rank_files import Step, SummarizedRun
from kview.analysis.rank_summary import rank_summary
from kview.analysis.ranks import open_run, rank_table

from conftest import KINETO, ROOT

CAPTURE = ROOT / "tests" / "fixtures" / "capture"
HTA = [KINETO / "trace_filter__sampled_rank-0.json.gz", KINETO / "trace_filter__sampled_rank-1.json.gz"]
TORCH_JSON = [CAPTURE / "ddp_torch.rank0.json.gz", CAPTURE / "ddp_torch.rank1.json.gz"]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """The DDP captures unpacked: name -> path."""
    d = tmp_path_factory.mktemp("ddp")
    out = {}
    for xz in sorted(CAPTURE.glob("ddp_*.sqlite.xz")):
        path = d / xz.name[: -len(".xz")]
        with lzma.open(xz) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        out[path.name[: -len(".sqlite")]] = path
    return out


RUNS = ["nsys_1file", "nsys_per_rank", "torch_sqlite", "torch_json", "hta_public"]


@pytest.fixture(scope="module")
def runs(ddp):
    """name -> (kview's run, the independent ranks)."""
    files = {
        "nsys_1file": [ddp["ddp_nsys_1file"]],
        "nsys_per_rank": [ddp["ddp_nsys.rank0"], ddp["ddp_nsys.rank1"]],
        "torch_sqlite": [ddp["ddp_torch.rank0"], ddp["ddp_torch.rank1"]],
        "torch_json": TORCH_JSON,
        "hta_public": HTA,
    }
    out = {}
    for name, paths in files.items():
        ranks: dict = {}
        for i, p in enumerate(paths):
            ranks.update(
                truth.from_kineto(p)
                if p.name.endswith(".json.gz")
                else truth.from_nsys(str(p), first_rank=i if name == "torch_sqlite" else None)
            )
        out[name] = (open_run([str(p) for p in paths], use_cache=False), ranks)
    return out


@pytest.mark.parametrize("name", RUNS)
def test_iteration_table_equals_the_independent_computation(runs, name):
    run, ranks = runs[name]
    got = iteration_table(run).select(truth.ITERATION_COLUMNS)
    want = truth.iteration_rows(ranks)
    assert len(want) >= 4 and sorted(got.rows()) == want
    t = iteration_table(run)
    assert (t["Communication (ns)"] == t["Exposed comm (ns)"] + t["Overlapped comm (ns)"]).all()


@pytest.mark.parametrize("name", RUNS)
def test_collectives_and_stragglers_equal_the_independent_computation(runs, name):
    run, ranks = runs[name]
    got = {(r, c): (n, t, b) for r, c, n, t, b in collectives_by_rank(run).rows()}
    assert got == truth.collectives(ranks)
    s = straggler_instances(run)
    got = {(i, c, n): (last, w, m) for i, c, n, _, last, w, m in s.rows()}
    assert got == truth.stragglers(ranks) and len(got) >= 6


def test_the_ddp_straggler_is_rank_1_and_rank_0_waits_for_it(runs):
    """Rank 1 sleeps 20 ms before each step: in every steady iteration rank 0 waits at least
    that long in its collectives, and rank 1 is named the straggler."""
    for name in ("nsys_1file", "nsys_per_rank", "torch_json"):
        run, _ = runs[name]
        st = stragglers(run)
        assert set(st["Straggler"].to_list()) == {1}, name
        assert (st["Wait (ns)"] > 20_000_000).all(), name
        summary = rank_summary(run)
        r0, r1 = summary.row(0, named=True), summary.row(1, named=True)
        assert r0["Waited (ns)"] > 60_000_000 and r1["Waited (ns)"] < 1_000_000, name
        assert r0["Exposed comm (ns)"] > 50 * r1["Exposed comm (ns)"], name


def test_gpu_ops_without_a_launch_belong_to_the_rank_of_their_gpu():
    """HTA's rank-0 trace whose NCCL kernels carry no correlation to a launch: they ran on the
    one GPU of the one process, so the file is one rank (not a second rank of unowned work), and
    its numbers are the independent computation's over every kernel of the file."""
    path = KINETO / "negative_queue_length_values_check__rank0.json.gz"
    run, ranks = open_run([str(path)], use_cache=False), truth.from_kineto(path)
    assert run.ranks == [0] and rank_table(run)["Rank from"].to_list() == ["distributedInfo"]
    cols = ["Rank", "Iteration", "Wall (ns)", "Busy (ns)", "Compute (ns)", "Communication (ns)", "Exposed comm (ns)"]
    want = truth.iteration_rows(ranks)
    assert len(want) == 5 and sorted(iteration_table(run).select(*cols, "Memory (ns)", "Idle (ns)").rows()) == want
    got = {(r, c): (n, t, b) for r, c, n, t, b in collectives_by_rank(run).rows()}
    assert got == truth.collectives(ranks) and got[(0, "SendRecv")][0] == 80


def test_an_unnumbered_step_range_is_an_iteration():
    """kview's own captures mark the step `profiled_step` (no number): one iteration, measured
    as the independent computation measures a step over the plain SQLite rows."""
    import sqlite3

    path = ROOT / "sample_traces" / "lm-small_ctx256_train_nsys.sqlite"
    ranks = truth.from_nsys(str(path))
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    ((lo, hi),) = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'profiled_step'").fetchall()
    ranks[0].steps = {1: (lo, hi)}
    t = iteration_table(open_run([str(path)], use_cache=False))
    cols = ["Rank", "Iteration", "Wall (ns)", "Busy (ns)", "Compute (ns)", "Communication (ns)", "Exposed comm (ns)"]
    assert t.select(*cols, "Memory (ns)", "Idle (ns)").rows() == truth.iteration_rows(ranks)
    assert t["Step"].to_list() == ["profiled_step"] and t["Busy (ns)"][0] > 30_000_000


def test_ranks_come_from_the_traces_own_metadata(runs):
    sources = {name: rank_table(runs[name][0])["Rank from"].to_list() for name in RUNS}
    assert sources == {
        "nsys_1file": ["device", "device"],
        "nsys_per_rank": ["$RANK", "$RANK"],
        "torch_sqlite": ["capture", "capture"],
        "torch_json": ["distributedInfo"] * 2,
        "hta_public": ["distributedInfo"] * 2,
    }
    t = rank_table(runs["nsys_1file"][0])
    assert t["Device"].to_list() == [0, 1] and t["Process"].n_unique() == 2


def test_summary_is_the_sum_of_iterations_and_stats_describe_them(runs):
    run, _ = runs["nsys_1file"]
    t = iteration_table(run)
    s = rank_summary(run)
    assert (
        s["Busy (ns)"].to_list()
        == t.group_by("Rank").agg(pl.col("Busy (ns)").sum()).sort("Rank")["Busy (ns)"].to_list()
    )
    st = iteration_stats(run).filter((pl.col("Rank") == 1) & (pl.col("Measure") == "Wall")).row(0, named=True)
    walls = t.filter(pl.col("Rank") == 1)["Wall (ns)"]
    assert (st["Min (ns)"], st["Max (ns)"], st["Mean (ns)"]) == (walls.min(), walls.max(), round(walls.mean()))
    # steps 1 (warm-up) and 5 (the profiler stopping) are ten times the steady steps
    assert t.filter("Outlier")["Iteration"].unique().sort().to_list() == [1, 5]
    # NCCL's own ranges (ncclAllReduce, nccl:all_reduce) are never iterations
    assert set(t["Step"].to_list()) == {f"step_{i}" for i in range(1, 6)}


def _kineto(path, rank, events):
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": events,
    }
    path.write_text(json.dumps(doc))
    return path


def _k(name, ts, dur, stream=7):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": stream, "correlation": 0},
    }


def _step(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 10, "tid": 10, "ts": ts, "dur": dur}


def test_exposed_communication_on_a_hand_made_trace(tmp_path):
    """Known overlaps (µs): compute [0,100] and [250,260] (another stream); AllReduce [50,150]
    and [200,300]; a copy [350,360]; the step [0,400]. Communication 200, covered by compute
    50 + 10, so exposed 140 and overlapped 60; busy = [0,150] + [200,300] + [350,360] = 260."""
    ar = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    ev = [
        _step("ProfilerStep#1", 0, 400),
        _k("ampere_sgemm_128x64_tn", 0, 100),
        _k(ar, 50, 100, 9),
        _k(ar, 200, 100, 9),
        _k("ampere_sgemm_128x64_tn", 250, 10),
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD (Pinned -> Device)",
            "pid": 0,
            "tid": 7,
            "ts": 350,
            "dur": 10,
            "args": {"device": 0, "stream": 7, "bytes": 4096},
        },
    ]
    run = open_run([str(_kineto(tmp_path / "r0.json", 0, ev))], use_cache=False)
    row = iteration_table(run).row(0, named=True)
    us = 1000
    assert (row["Wall (ns)"], row["Busy (ns)"], row["Compute (ns)"], row["Communication (ns)"]) == (
        400 * us,
        260 * us,
        110 * us,
        200 * us,
    )
    assert (row["Exposed comm (ns)"], row["Overlapped comm (ns)"], row["Memory (ns)"], row["Idle (ns)"]) == (
        140 * us,
        60 * us,
        10 * us,
        140 * us,
    )


def test_stragglers_and_optimizer_iterations_on_hand_made_ranks(tmp_path):
    """Two ranks without step ranges: the optimizer's step markers end each iteration. Rank 0's
    AllReduce lasts 30 µs, rank 1's 5 µs: rank 1 joined last and rank 0 waited 25 µs."""
    ar = "ncclKernel_AllReduce_RING_LL_Sum_float"

    def opt(ts):
        return {
            "ph": "X",
            "cat": "user_annotation",
            "name": "Optimizer.step#SGD.step",
            "pid": 10,
            "tid": 10,
            "ts": ts,
            "dur": 10,
        }

    paths = []
    for rank, dur in ((0, 30), (1, 5)):
        ev = [_step("forward", 0, 5), opt(100), opt(300), _k("gemm", 10, 20), _k(ar, 40, dur), _k(ar, 210, dur)]
        paths.append(str(_kineto(tmp_path / f"trace_rank{rank}.json", rank, ev)))
    run = open_run([str(tmp_path)], use_cache=False)  # the folder
    t = iteration_table(run)
    assert t["Iteration"].to_list() == [1, 2, 1, 2] and t["Step"][0] == "optimizer step 1"
    assert t["Wall (ns)"].to_list() == [110_000, 200_000] * 2  # [first range, end of step 1], [110, 310]
    s = straggler_instances(run)
    assert s["Last rank"].to_list() == [1, 1] and s["Others' wait (ns)"].to_list() == [25_000, 25_000]


def test_collectives_of_equal_time_and_start_come_in_name_order(tmp_path):
    """Two ranks, each with an AllReduce and an AllGather of 40 µs that start at once on two
    streams: a tie of time (the collectives table) and of start (the stragglers table). Their
    groups come out of the group-by in no set order; the tables break the tie by the name, the
    same on every call."""
    names = {
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": 9,
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": 11,
    }
    for rank in (0, 1):
        ev = [_step("ProfilerStep#1", 0, 400), *(_k(n, 50, 40, s) for n, s in names.items())]
        _kineto(tmp_path / f"trace_rank{rank}.json", rank, ev)
    run = open_run([str(tmp_path)], use_cache=False)
    ops = collective_ops(run)
    kinds = sorted(ops["collective"].unique().to_list())
    assert len(kinds) == 2
    for _ in range(20):  # a wrong order shows in about half the calls
        c = collectives_of(ops)
        assert c["Rank"].to_list() == [0, 0, 1, 1] and c["Time (ns)"].to_list() == [40_000] * 4
        assert c["Collective"].to_list() == kinds * 2
        s = straggler_table(shared_instances(instance_parts(ops)))
        assert s["Collective"].to_list() == kinds
    # the same tables made one rank file at a time (`--cluster`)
    files = sorted(str(p) for p in tmp_path.glob("trace_rank*.json"))
    step = Step(str(tmp_path / "summaries"))
    summarized = SummarizedRun(files, [step(f) for f in files])
    for _ in range(10):
        tables = summarized.tables_of("ranks")
        assert tables["collectives"]["Collective"].to_list() == kinds * 2
        assert tables["waits"]["Collective"].to_list() == kinds


def test_cli_ranks_and_iterations(ddp, tmp_path, capsys):
    from kview.cli import main

    def kview(*args):
        code = main([*map(str, args), "--no-cache"])
        out, err = capsys.readouterr()
        return code, out, err

    a, b = ddp["ddp_nsys.rank0"], ddp["ddp_nsys.rank1"]
    code, out, err = kview("ranks", a, b, "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert list(doc) == [
        "Ranks",
        "GPU time by rank",
        "Collectives",
        "Stragglers by iteration",
        "Waiting in each collective",
    ]
    assert [row["Straggler"] for row in doc["Stragglers by iteration"]] == [1, 1, 1]
    code, out, err = kview("ranks", a, b, "-f", "csv")
    assert code == 2 and "--table" in err and out == ""
    code, out, err = kview("iterations", a, b, "--table", "iterations", "-f", "csv")
    assert code == 0 and pl.read_csv(out.encode()).height == 6
    code, out, err = kview("ranks", tmp_path)
    assert code == 2 and "without trace files" in err and "Traceback" not in err
    code, out, err = kview("iterations", a, "-f", "md")  # every column (a table fits the terminal)
    assert code == 0 and "step\\_2" in out and "Statistics across iterations" in out


def test_a_folder_is_its_traces_in_natural_order(tmp_path):
    from kview.analysis.ranks import trace_paths

    for n in (10, 2, 1):
        (tmp_path / f"trace.rank{n}.json.gz").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    assert [p.name for p in trace_paths([str(tmp_path)])] == [f"trace.rank{n}.json.gz" for n in (1, 2, 10)]


def test_traces_read_in_worker_processes_give_the_same_run(runs):
    """Several large traces are read in parallel processes that fill the frame cache; the run
    this process then opens from the cache is the same."""
    from kview.analysis.ranks import WARM
    from kview.trace import make_tables

    for p in TORCH_JSON:  # what each worker runs (the pool itself is the standard library's)
        make_tables(str(p), WARM, True)
    run = open_run([str(p) for p in TORCH_JSON], use_cache=True, jobs=1)
    assert iteration_table(run).equals(iteration_table(runs["torch_json"][0]))
    assert straggler_instances(run).equals(straggler_instances(runs["torch_json"][0]))


def test_overview_of_a_multi_process_export_lists_its_ranks_and_names_the_straggler(ddp, runs, capsys):
    """One nsys export of both processes: the Overview's Ranks section is what `kview ranks`
    measures (checked against the independent computation above), and the first finding names
    rank 1, for which rank 0 waited."""
    from kview.analysis.overview import build
    from kview.cli import main
    from kview.trace import open_trace

    o = build(open_trace(str(ddp["ddp_nsys_1file"]), use_cache=False))
    _, ranks = runs["nsys_1file"]
    want = truth.iteration_rows(ranks)
    walls = {r: sum(w for rank, _, w, *_ in want if rank == r) for r in (0, 1)}
    assert o.ranks["Rank"].to_list() == [0, 1] and o.ranks["Iterations"].to_list() == [5, 5]
    assert o.ranks["Wall (ns)"].to_list() == [walls[0], walls[1]]
    waited0 = sum(w for (_, _, _), (last, w, _) in truth.stragglers(ranks).items())
    assert o.ranks["Waited (ns)"].to_list() == [waited0, 0]
    assert o.findings[0].startswith("Straggler: rank 1 joined the collectives last in 5 of 5 iterations; rank 0")
    code = main(["overview", str(ddp["ddp_nsys_1file"]), "-f", "json", "--no-cache"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["Rank"] for r in doc["Ranks"]] == [0, 1]
    # one rank per trace: no Ranks section
    assert build(open_trace(str(ddp["ddp_nsys.rank0"]), use_cache=False)).ranks.height == 0


def test_phases_of_a_multi_process_export_take_each_process_its_own_launches(ddp, runs):
    """One export of both ranks: step_N's GPU time is what each rank launched while its own
    step_N was open, added over the ranks (rank 1's kernels launched during rank 0's step are
    not rank 0's step's), so the phases' shares add up to at most 100%."""
    from kview.analysis.layers import phase_times
    from kview.trace import open_trace

    _, ranks = runs["nsys_1file"]
    want: dict[str, int] = {}
    for r in ranks.values():
        for step, gpu in truth.step_gpu(r).items():
            want[step] = want.get(step, 0) + gpu
    phases = phase_times(open_trace(str(ddp["ddp_nsys_1file"]), use_cache=False))
    assert dict(phases.select("Phase", "GPU Time (ns)").rows()) == want and len(want) == 5
    assert phases["Share (%)"].sum() <= 100


async def test_ranks_view_on_key_7_shows_every_trace_as_one_run(ddp, runs):
    """`kview rank0.sqlite rank1.sqlite`, key 7: a bar per rank over the iteration table; t
    cycles the lower table through the stragglers and the collectives; every number is the
    independent computation's."""
    from test_tui import loaded

    from kview.tui.app import KviewApp

    _, ranks = runs["nsys_per_rank"]
    app = KviewApp([str(ddp["ddp_nsys.rank0"]), str(ddp["ddp_nsys.rank1"])], use_cache=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("7")
        await pilot.pause()
        assert app.query_one("#tabs").active == "ranks" and app.sub_title == "all 2 traces"
        view = app.view("ranks")
        top = view.ranks_table.frame
        assert top["Rank"].to_list() == [0, 1]
        iterations = truth.iteration_rows(ranks)
        for r in (0, 1):
            wall = sum(row[2] for row in iterations if row[0] == r)
            busy = sum(row[3] for row in iterations if row[0] == r)
            assert top["Wall (ns)"][r] == wall and top["Busy (% of wall)"][r] == round(busy * 100 / wall, 1)
        assert top["█comp ▓exposed ▒mem ░idle"][0].startswith("▓▓▓▓▓▓▓▓")  # rank 0 waits in AllReduce
        assert "straggler: rank 1 in 3 of 3 iterations" in view.data.caption
        lower = view.table.frame.select(truth.ITERATION_COLUMNS)
        assert sorted(lower.rows()) == iterations
        await pilot.press("t")
        assert view.lower == "stragglers" and view.table.frame["Straggler"].to_list() == [1, 1, 1]
        await pilot.press("t")
        got = {(r, c): (n, t, b) for r, c, n, t, b in view.table.frame.rows()}
        assert got == truth.collectives(ranks)
        await pilot.press("tab", "S")  # the focused (lower) table sorts, the ranks table does not
        assert view.shown().what == "ranks collectives"
        await pilot.press("shift+tab")
        assert view.shown().what == "ranks" and view.shown().bars == ("█comp ▓exposed ▒mem ░idle",)
        await pilot.press("question_mark")
        help_text = str(app.screen.query_one("#help-text").render())
        assert re.search(r"\b5 (6 )?7 ", help_text) and "Lower table: iterations, stragglers" in help_text
        await pilot.press("escape", "5")  # Compare: the two traces, then (r) their ranks as columns
        await loaded(pilot)
        compare = app.view("compare")
        assert compare.data.frame.columns[:3] == ["Range", "rank0", "rank1"] and not compare.data.ranks
        await pilot.press("b", "b", "r")  # by category, ranks
        await loaded(pilot)
        from kview.analysis.compare import rank_windows, side_by_side

        want = side_by_side(rank_windows(runs["nsys_per_rank"][0]), "category", "gpu", spread=True)
        assert compare.data.ranks and compare.data.frame.equals(want)
        assert "--ranks --by category" in compare.data.caption


@pytest.mark.parametrize("name", ["nsys_1file", "nsys_per_rank", "torch_json"])
def test_compare_takes_ranks_as_columns(runs, name):
    """`kview compare --ranks`: one column per rank (one process and GPU of a multi-process
    export, or a per-rank file). By kernel every rank's column is the independent sum of its
    kernels; by range each step's GPU time is the rank's work launched inside it; by category
    the columns add up to the rank's GPU time; the spread is max − min."""
    from kview.analysis.compare import rank_windows, side_by_side

    run, ranks = runs[name]
    kernels = side_by_side(rank_windows(run), "kernel", "gpu", spread=True)
    assert kernels.columns == ["Kernel", "rank 0", "rank 1", "Spread (ns)", "Spread (%)", "Longest"]
    got = kernels.filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
    for r in (0, 1):
        want = ranks[r].by_kernel
        assert dict(got.select("Kernel", f"rank {r}").drop_nulls().rows()) == want, r
    both = got.drop_nulls(["rank 0", "rank 1"])
    assert (both["Spread (ns)"] == (both["rank 0"] - both["rank 1"]).abs()).all()
    top = both.row(0, named=True)  # the communication kernel rank 0 waits in (rank 1 is late)
    assert top["Longest"] == "rank 0" and "AllReduce" in top["Kernel"] and top["Spread (%)"] > 1000
    cats = side_by_side(rank_windows(run), "category", "gpu", spread=True)
    for r in (0, 1):
        assert cats[f"rank {r}"].sum() == sum(e - s for s, e, *_ in ranks[r].ops), r
        comm = cats.filter(pl.col("Category") == "communication")[f"rank {r}"].item()
        assert comm == sum(e - s for s, e, k, *_ in ranks[r].ops if k == "communication"), r
    if name.startswith("nsys"):  # launch calls read straight from the SQLite
        steps = side_by_side(rank_windows(run), "range", "gpu", spread=True).filter(
            pl.col("Range").str.starts_with("step_")
        )
        for r in (0, 1):
            assert dict(steps.select("Range", f"rank {r}").rows()) == truth.step_gpu(ranks[r]), r


def test_cli_compare_ranks(ddp, tmp_path, capsys, runs):
    """One multi-process export compares its ranks by default; a folder of per-rank files with
    --ranks; the table equals the one above."""
    from kview.analysis.compare import rank_windows, side_by_side
    from kview.cli import main

    def kview(*args):
        code = main([*map(str, args), "--no-cache"])
        out, err = capsys.readouterr()
        assert code == 0, err
        return pl.read_csv(out.encode())

    one = kview("compare", ddp["ddp_nsys_1file"], "--by", "category", "-f", "csv")
    assert one.equals(side_by_side(rank_windows(runs["nsys_1file"][0]), "category", "gpu", spread=True))
    folder = tmp_path / "run"
    folder.mkdir()
    for r in (0, 1):
        shutil.copy(ddp[f"ddp_nsys.rank{r}"], folder)
    per_rank = kview("compare", folder, "--ranks", "--by", "kernel", "-f", "csv")
    want = side_by_side(rank_windows(runs["nsys_per_rank"][0]), "kernel", "gpu", spread=True)
    assert per_rank.columns == want.columns and sorted(per_rank.rows(), key=str) == sorted(want.rows(), key=str)
    # without --ranks, per-rank files are compared as traces (the first is the baseline)
    assert "Δ ddp_nsys.rank1" in kview("compare", folder, "-f", "csv").columns
    # a command of one trace given the folder says which commands read a run
    assert main(["kernels", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "is a folder of 2 traces: `kview kernels` reads one trace; `kview ranks`" in err


async def test_a_large_run_is_ranked_by_worker_processes_and_its_traces_load_when_shown(ddp, tmp_path, monkeypatch):
    """Several traces this large in all (the threshold lowered to three DDP files): the Ranks
    view comes from worker processes filling the frame cache, as `kview ranks` reads the run,
    with its numbers; only the first trace loads its views at once, another when it is shown,
    and Compare loads every trace."""
    from test_tui import loaded, screen_text

    import kview.analysis.ranks as rk
    from kview.analysis.rank_summary import BAR_TITLE
    from kview.tui.app import KviewApp

    monkeypatch.setattr(rk, "PARALLEL_BYTES", 0)
    third = tmp_path / "ddp_nsys.rank1b.sqlite"  # a third rank (numbered 2: its $RANK is taken)
    shutil.copy(ddp["ddp_nsys.rank1"], third)
    paths = [str(ddp["ddp_nsys.rank0"]), str(ddp["ddp_nsys.rank1"]), str(third)]
    run = open_run(paths, use_cache=False)
    app = KviewApp(paths, use_cache=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        assert app.run_in_processes and app.started == {0} and set(app.loaded) == {0}
        data = app.view("ranks").data
        assert data.ranks.frame("time").height == 3, data.caption
        assert data.ranks.frame("time").equals(rank_summary(run)) and data.iterations.frame("iterations").equals(
            with_bound_by(run, iteration_table(run))
        )
        shown = app.view("ranks").ranks_table.frame
        assert shown[BAR_TITLE].str.len_chars().min() > 0  # the bar `kview ranks` draws in a terminal
        assert data.ranks.frame("time")["Rank"].to_list() == [0, 1, 2] and "numbered in file" in data.caption
        await pilot.press("T")
        assert "ddp_nsys.rank1.sqlite  (loads when shown)" in screen_text(app)
        await pilot.press("2")
        await loaded(pilot)
        assert set(app.loaded) == {0, 1} and app.sub_title.endswith("ddp_nsys.rank1.sqlite")
        await pilot.press("5")
        assert app.started == {0, 1, 2}
        await loaded(pilot)
        assert set(app.loaded) == {0, 1, 2}
        assert app.view("compare").data.frame.columns[:4] == ["Range", "rank0", "rank1", "rank1b"]
