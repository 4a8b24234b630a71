"""`kview diff A B --gate`: exit 1 with what regressed past its gate on a real regression pair,
exit 0 on two windows of one real run, 2 on a malformed gate; the gated numbers equal per-step
medians computed here with plain SQL and Python over the traces' rows."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import sqlite3
import statistics

import polars as pl
import pytest

from kview.analysis.gate import gate, parse_gates
from kview.errors import UsageError
from kview.trace import open_trace

from conftest import FIXTURES, KINETO, PUBLIC
from in_process import kview_here as kview  # the document and the exit status: no child needed

CAPTURE = FIXTURES / "capture"


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp")
    out = {}
    for r in (0, 1):
        path = d / f"ddp_nsys.rank{r}.sqlite"
        with lzma.open(CAPTURE / f"ddp_nsys.rank{r}.sqlite.xz") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        out[r] = path
    return out


def launched_ops_sql(con) -> list[tuple[int, int]]:
    """(launch time, duration) of every kernel, copy and set: the launch call's start, else the op's."""
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    kinds = [f"CUPTI_ACTIVITY_KIND_{k}" for k in ("KERNEL", "MEMCPY", "MEMSET")]
    union = " UNION ALL ".join(f"SELECT start, end, correlationId FROM {k}" for k in kinds if k in tables)
    return con.execute(
        f"SELECT COALESCE(r.start, o.start), o.end - o.start FROM ({union}) o "
        "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = o.correlationId"
    ).fetchall()


def step_medians_sql(path) -> tuple[float, float]:
    """(median GPU op time per step, median step wall time), from the trace's rows: every kernel,
    copy and set whose launch call started inside a step_N range, summed per step."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    steps = con.execute(
        "SELECT start, end FROM NVTX_EVENTS WHERE COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)) "
        "GLOB 'step_[0-9]*' ORDER BY start"
    ).fetchall()
    ops = launched_ops_sql(con)
    con.close()
    per_step = [sum(d for t, d in ops if s <= t <= e) for s, e in steps]
    return statistics.median(per_step), statistics.median(e - s for s, e in steps)


def test_a_43x_regression_exits_1_with_its_table(ddp):
    """DDP rank 0 waits in NCCL for the slow rank 1: 43x the kernel time. Gated from rank 1 to
    rank 0 it fails, and the table's medians are the plain per-step medians."""
    p = kview("diff", ddp[1], ddp[0], "--gate", "10", "-f", "csv")
    assert p.returncode == 1, p.stderr
    t = pl.read_csv(p.stdout.encode())
    total = t.filter(pl.col("Scope") == "total").row(0, named=True)
    a_gpu, _ = step_medians_sql(ddp[1])
    b_gpu, _ = step_medians_sql(ddp[0])
    assert (total["A (ns)"], total["B (ns)"]) == (round(a_gpu), round(b_gpu))
    assert total["Δ (%)"] == round((b_gpu - a_gpu) * 100 / a_gpu, 1) > 1000
    comm = t.filter((pl.col("Scope") == "category") & (pl.col("Item") == "communication"))
    assert comm.height == 1 and comm["Δ (%)"][0] > 1000
    assert t.filter(pl.col("Scope") == "kernel")["Item"].str.contains("ncclDevKernel_AllReduce").any()
    assert "regressed past their gate" in p.stderr and "per-step medians (3 steps of A, 3 of B)" in p.stderr
    # the other way round it is an improvement: nothing regressed
    p = kview("diff", ddp[0], ddp[1], "--gate", "10")
    assert p.returncode == 0 and p.stdout == "" and "passed" in p.stderr
    p = kview("diff", ddp[0], ddp[1], "--gate", "10", "-f", "csv")
    assert (
        p.returncode == 0
        and p.stdout.splitlines()[0].startswith("Scope,Item,A (ns)")
        and len(p.stdout.splitlines()) == 1
    )


def test_step_wall_time_is_the_median_step_range(ddp):
    v = gate(open_trace(ddp[1], use_cache=False), open_trace(ddp[0], use_cache=False), {"step": 0.0})
    _, a_wall = step_medians_sql(ddp[1])
    _, b_wall = step_medians_sql(ddp[0])
    # the slow rank's steps are as long as the fast rank's (it waits): a 0% gate on step time
    # flags it only when B's median step is longer
    rows = v.regressed.filter(pl.col("Scope") == "step")
    assert rows.height == (1 if b_wall > a_wall else 0)
    if rows.height:
        assert (rows["A (ns)"][0], rows["B (ns)"][0]) == (round(a_wall), round(b_wall))


def test_public_before_after_pair_regresses_per_kernel():
    """nsys-ai's FSDP before/after pair: faster in total, but NCCL SendRecv took 33% longer; a
    kernel gate of 10% catches it and the total gate passes (no steps: whole traces)."""
    before = PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite"
    after = PUBLIC / "nsysai_2gpu_fsdp_after_nsys2026.2.sqlite"
    p = kview("diff", before, after, "--gate", "kernel:10%", "--gate", "total:2%", "-f", "json")
    assert p.returncode == 1, p.stderr
    rows = json.loads(p.stdout)
    assert {r["Scope"] for r in rows} == {"kernel"}
    send = [r for r in rows if r["Item"].startswith("ncclDevKernel_SendRecv")]
    con = sqlite3.connect(f"file:{before}?mode=ro", uri=True)
    con2 = sqlite3.connect(f"file:{after}?mode=ro", uri=True)
    q = (
        "SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
        "WHERE s.value LIKE 'ncclDevKernel_SendRecv%'"
    )
    a, b = con.execute(q).fetchone()[0], con2.execute(q).fetchone()[0]
    assert len(send) == 1 and (send[0]["A (ns)"], send[0]["B (ns)"]) == (a, b)
    assert send[0]["Δ (%)"] == round((b - a) * 100 / a, 1)
    assert "whole traces" in p.stderr


def _windows(src, out_a, out_b) -> list[str]:
    """One real torch.profiler trace resplit into two traces of consecutive steps: A holds the
    first half of its ProfilerStep ranges, B the second; GPU ops go with their launch call."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    ev = doc["traceEvents"]
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")
    )
    half = len(steps) // 2
    gpu = {"kernel", "gpu_memcpy", "gpu_memset"}
    meta = [e for e in ev if "ts" not in e or e.get("ph") == "M"]
    for lo, hi, out in ((steps[0][0], steps[half][0], out_a), (steps[half][0], steps[-1][1] + 1, out_b)):
        cpu = [e for e in ev if "ts" in e and e.get("ph") != "M" and e.get("cat") not in gpu and lo <= e["ts"] < hi]
        launched = {(e.get("args") or {}).get("correlation") for e in cpu} - {None}
        ops = [e for e in ev if e.get("cat") in gpu and (e.get("args") or {}).get("correlation") in launched]
        out.write_text(json.dumps({**doc, "traceEvents": meta + cpu + ops}))
    return [s[2] for s in steps]


@pytest.fixture(scope="module")
def resnet_windows(tmp_path_factory):
    """The ResNet-50 run split into its two windows once for the tests of this file (a few CPU
    seconds of JSON; the traces are only read): (A, B, the step names)."""
    d = tmp_path_factory.mktemp("windows")
    a, b = d / "steps_5_7.json", d / "steps_8_10.json"
    names = _windows(KINETO / "resnet50_nw0_2021.pt.trace.json.gz", a, b)
    return a, b, names


def test_two_windows_of_one_run_pass(resnet_windows):
    """No fixture holds two captures of one workload on one profiler (the nsys and torch captures
    name kernels differently), so one real ResNet-50 run of 6 identical training steps is split
    into steps 5-7 and 8-10: every scope at 5% passes, both ways."""
    a, b, names = resnet_windows
    assert len(names) == 6
    for x, y in ((a, b), (b, a)):
        p = kview("diff", x, y, "--gate", "5")
        assert p.returncode == 0, p.stdout + p.stderr
        assert "passed: none of" in p.stderr and "per-step medians (3 steps of A, 3 of B)" in p.stderr


def test_medians_resist_one_slow_step(resnet_windows, tmp_path):
    """Whole-trace sums would follow the step counts; per-step medians do not: the 3 steps of
    one window against 2 of the other still pass."""
    a, b, _ = resnet_windows
    doc = json.loads(b.read_text())
    last = max(e["ts"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    cpu = [e for e in doc["traceEvents"] if "ts" not in e or e.get("ph") == "M" or e["ts"] < last]
    keep = {
        (e.get("args") or {}).get("correlation")
        for e in cpu
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
    }
    doc["traceEvents"] = [
        e
        for e in cpu
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
        or (e.get("args") or {}).get("correlation") in keep
    ]
    b2 = tmp_path / "b2.json"
    b2.write_text(json.dumps(doc))
    p = kview("diff", b2, a, "--gate", "total:5")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "(2 steps of A, 3 of B)" in p.stderr


@pytest.mark.parametrize("spec", ["abc", "layer:", "layr:5%", "5%%", "-3", "total:x"])
def test_a_malformed_gate_is_one_line_and_exit_2(ddp, spec):
    p = kview("diff", ddp[0], ddp[1], "--gate", spec)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("kview: --gate: ")


def test_parse_gates():
    assert parse_gates(["10"]) == dict.fromkeys(("total", "step", "phase", "layer", "category", "kernel"), 10.0)
    assert parse_gates(["layer:5%", "total:2"]) == {"layer": 5.0, "total": 2.0}
    g = parse_gates(["10", "kernel:25%"])
    assert g["kernel"] == 25.0 and g["phase"] == 10.0
    with pytest.raises(UsageError):
        parse_gates(["phase:5:5"])


def test_bad_trace_is_exit_2(tmp_path, ddp):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a trace")
    p = kview("diff", ddp[0], bad, "--gate", "5")
    assert p.returncode == 2 and p.stderr.startswith("kview: ") and "Traceback" not in p.stderr


def test_phase_medians_per_step_equal_sql(tmp_path):
    """A trace of 2 profiled steps with forward/backward/optimizer phases: each phase's median
    over the steps equals the plain per-instance GPU time of the ops launched inside it."""
    path = tmp_path / "tiny_train.sqlite"
    with lzma.open(FIXTURES / "memory" / "tiny_train.sqlite.xz") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    from kview.analysis.gate import measure

    got = measure(open_trace(path, use_cache=False), per_step=True)
    assert got.steps == 2
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    ops = launched_ops_sql(con)
    phases = got.items.filter(pl.col("Scope") == "phase")
    assert set(phases["Item"]) == {"forward_pass", "backward_pass", "optimizer_step"}
    for name, v in phases.select("Item", "v").iter_rows():
        spans = con.execute(
            "SELECT start, end FROM NVTX_EVENTS WHERE COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)) = ?",
            (name,),
        ).fetchall()
        assert len(spans) == 2
        assert v == statistics.median(sum(d for t, d in ops if s <= t <= e) for s, e in spans)
