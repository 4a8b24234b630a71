"""No view disagrees with another about a quantity both show (issue 25): Overview, Kernels,
NVTX, Layers, Compare, Timeline, Ranks and the CLI walked on three traces (an nsys export, a
torch.profiler JSON, a `kview capture --backend torch` trace) and a 2-rank run, their shared
totals compared with each other and with a plain count over the file (sqlite3 or json)."""

from __future__ import annotations

import io
import json
import lzma
import sqlite3
from decimal import Decimal

import polars as pl
import pytest

from kview.analysis import nvtx_tree
from kview.analysis import timeline as T
from kview.analysis.attribution import attribute
from kview.analysis.compare import phase_windows, root_window, side_by_side
from kview.analysis.gpu_time import range_times
from kview.analysis.iterations import iteration_table
from kview.analysis.layers import layer_times, phase_times
from kview.analysis.nvtx_ranges import user_ranges
from kview.analysis.overview import build as overview
from kview.analysis.rank_summary import rank_summary
from kview.analysis.ranks import make_run
from kview.cli import main
from kview.trace import open_trace

from conftest import KINETO, ROOT, SAMPLES, kineto_events

GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
CAPTURE = ROOT / "tests" / "fixtures" / "capture"


def _union(iv) -> int:
    total, reach = 0, None
    for s, e in sorted(iv):
        if reach is None or s > reach:
            total, reach = total + e - s, e
        elif e > reach:
            total, reach = total + e - reach, e
    return total


def _plain_ops(path) -> list[tuple[int, int, int, int]]:
    """(start, end, device, stream) of every GPU op, read plainly from the file."""
    if str(path).endswith((".json", ".json.gz")):
        out = []
        for e in kineto_events(path, ("kernel", "gpu_memcpy", "gpu_memset")):
            if e.get("ph") == "X":
                s = int(Decimal(str(e["ts"])) * 1000)
                a = e.get("args") or {}
                out.append((s, s + int(Decimal(str(e.get("dur", 0))) * 1000), a.get("device"), a.get("stream")))
        return out
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out = []
    for t in GPU_TABLES:
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone():
            out += con.execute(f"SELECT start, end, deviceId, streamId FROM {t}").fetchall()
    con.close()
    return out


@pytest.fixture(scope="module", params=["nsys", "json", "torch_capture"])
def case(request, tmp_path_factory):
    if request.param == "nsys":
        path = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
    elif request.param == "json":
        path = KINETO / "traces__b200__eager_trace.json.gz"
    else:
        path = tmp_path_factory.mktemp("cross") / "llama_torch.sqlite"
        path.write_bytes(lzma.decompress((CAPTURE / "llama_torch.sqlite.xz").read_bytes()))
    return path, open_trace(path, use_cache=False), _plain_ops(path)


def test_gpu_op_count_and_time_agree_across_views(case):
    path, trace, plain = case
    n, total = len(plain), sum(e - s for s, e, *_ in plain)
    k = attribute(trace)
    assert (k.height, int(k["Duration (ns)"].sum())) == (n, total)  # Kernels
    o = overview(trace)
    assert dict(o.facts)["GPU ops"] == f"{n:,}"  # Overview's facts
    assert (int(o.categories["Ops"].sum()), int(o.categories["Time (ns)"].sum())) == (n, total)  # by category
    whole = side_by_side([root_window(trace, None, "all")], "category", "gpu")  # Compare
    assert int(whole["all"].sum()) == total
    tl = T.build(trace, cpu=False)  # Timeline: every op on one row, once
    assert sum(len(r) for r in tl.rows if r.kind == "gpu") == n
    # busy = the union, per device in the Overview, per stream on the Timeline
    for dev, busy in o.busy.select("Device", "Busy (ns)").iter_rows():
        assert busy == _union([(s, e) for s, e, d, _ in plain if d == dev])
    for r in (r for r in tl.rows if r.kind == "gpu"):
        cells = T.bin_row(r, *tl.span, 1)
        stream = int(r.label.split(" s")[1])
        mine = [(s - trace.origin, e - trace.origin) for s, e, _, st in plain if st == stream]
        assert int(cells.busy[0]) == _union(mine) <= tl.span[1] - tl.span[0]


def test_phase_and_range_times_agree_across_views(case):
    path, trace, plain = case
    total = sum(e - s for s, e, *_ in plain)
    ph = phase_times(trace)
    o = overview(trace)
    assert o.phases.select("Phase", "GPU Time (ns)").rows() == ph.select("Phase", "GPU Time (ns)").rows()
    assert int(ph["GPU Time (ns)"].sum() or 0) <= total  # phases never over 100%
    if ph.height:
        names = ph["Phase"].to_list()
        cmp = side_by_side(phase_windows(trace, names), "range", "gpu")
        paths = nvtx_tree.path_table(trace)
        for name, gpu, ops in ph.select("Phase", "GPU Time (ns)", "GPU ops").iter_rows():
            # the phase's own column in Compare (its last instance) and, with one instance, the NVTX tree
            if trace.nvtx_events.filter(pl.col("text").cast(pl.String) == name).height <= 1:
                assert cmp.filter(pl.col("Range") == name)[name][0] == gpu
            node = paths.filter(pl.col("Name") == name)
            if node.height == 1:
                assert (node["GPU (ns)"][0], node["GPU ops"][0]) == (gpu, ops)
    lay = layer_times(trace)
    if lay.height:
        assert int(lay["Total (ns)"].sum()) <= total
        known = lay.filter(pl.col("Backward (ns)").is_not_null())
        assert (known["Forward (ns)"] + known["Backward (ns)"] == known["Total (ns)"]).all()


def test_the_cli_prints_what_the_views_show(case, capsys):
    path, trace, plain = case
    assert main(["kernels", str(path), "-f", "csv", "--no-cache"]) == 0
    k = pl.read_csv(io.StringIO(capsys.readouterr().out))
    assert (k.height, int(k["Duration (ns)"].sum())) == (len(plain), sum(e - s for s, e, *_ in plain))
    assert main(["overview", str(path), "-f", "json", "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert json.dumps(doc).count(f'"{len(plain):,}"') >= 1  # GPU ops, as the Overview's facts
    if phase_times(trace).height:
        assert main(["phases", str(path), "-f", "csv", "--no-cache"]) == 0
        got = pl.read_csv(io.StringIO(capsys.readouterr().out))
        want = phase_times(trace)
        assert (
            got.select("Phase", "GPU Time (ns)", "GPU ops").rows()
            == want.select("Phase", "GPU Time (ns)", "GPU ops").rows()
        )


def test_a_run_agrees_across_ranks_iterations_compare_and_timeline(tmp_path):
    files = []
    for r in (0, 1):
        f = tmp_path / f"ddp_nsys.rank{r}.sqlite"
        f.write_bytes(lzma.decompress((CAPTURE / f"ddp_nsys.rank{r}.sqlite.xz").read_bytes()))
        files.append(f)
    traces = [open_trace(f, use_cache=False) for f in files]
    run = make_run(traces)
    it = iteration_table(run)
    summary = rank_summary(run)
    for rank in (0, 1):
        mine = it.filter(pl.col("Rank") == rank)
        row = summary.filter(pl.col("Rank") == rank).row(0, named=True)
        for col in ("Busy (ns)", "Wall (ns)", "GPU ops", "Tail (ns)", "Exposed comm (ns)"):
            assert row[col] == mine[col].sum(), col
        # each step's ops: the iteration's GPU ops are those compare and phases count for the
        # step's range (one rule: launched while it was open)
        steps = user_ranges(traces[rank]).filter(pl.col("label").is_in(mine["Step"].implode()))
        counted = dict(range_times(traces[rank], steps).select("label", "ops").iter_rows())
        assert dict(mine.select("Step", "GPU ops").iter_rows()) == counted
    # the run's timeline holds every op of both files, once
    from kview.analysis.run_clock import run_clock

    tl = T.of_run([T.build(t, cpu=False) for t in traces], run.units, [t.name for t in traces], run_clock(traces))
    assert sum(len(r) for r in tl.rows if r.kind == "gpu") == sum(len(_plain_ops(f)) for f in files)
