"""One definition per quantity (issue 25, item 4): phases never over 100%, one row per GPU
stream, `Joined last` counts each collective once, a layer family chosen by the GPU time it
holds. Each against a plain computation over the file (sqlite3 or json)."""

from __future__ import annotations

import lzma
import shutil
import sqlite3

import polars as pl

from kview.analysis import timeline as T
from kview.analysis.attribution import attribute
from kview.analysis.collectives import straggler_instances
from kview.analysis.gpu_time import launch_timeline
from kview.analysis.layers import detect_layer_pattern, layer_times, phase_times
from kview.analysis.rank_summary import rank_summary
from kview.analysis.ranks import make_run
from kview.trace import open_trace

from conftest import KINETO, ROOT, SAMPLES, kineto_events

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
TEXT = "coalesce(text, (SELECT value FROM StringIds WHERE id = textId))"


def _add_ranges(dst, ranges: list[tuple[int, int, int, str]]) -> None:
    con = sqlite3.connect(dst)
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, text, domainId) VALUES (?, ?, 59, ?, ?, 0)", ranges
    )
    con.commit()
    con.close()


def _range(path, name: str) -> tuple[int, int, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    (row,) = con.execute(f"SELECT start, end, globalTid FROM NVTX_EVENTS WHERE {TEXT} = ?", (name,)).fetchall()
    con.close()
    return row


def test_phases_never_exceed_the_gpu_time_when_the_autograd_thread_opens_its_own_range(tmp_path):
    """The autograd engine's thread opens a top-level range of its own (inside the main thread's
    backward_pass): it is no phase of its own, so no GPU op counts in two phases."""
    f = tmp_path / "lm_autograd_range.sqlite"
    shutil.copyfile(LM, f)
    con = sqlite3.connect(f)
    (engine,) = con.execute(
        "SELECT t.globalTid FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId WHERE s.value GLOB 'pt_autograd_*'"
    ).fetchone()
    lo, hi = con.execute(
        "SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid = ?", (engine,)
    ).fetchone()
    con.close()
    _add_ranges(f, [(lo - 1, hi + 1, engine, "autograd_engine_work")])
    trace = open_trace(f, use_cache=False)
    ph = phase_times(trace)
    total = int(launch_timeline(trace)["dur"].sum())
    assert ph["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"]
    assert int(ph["GPU Time (ns)"].sum()) <= total and ph["Share (%)"].sum() <= 100.05
    # the same work as without the extra range
    assert ph.equals(phase_times(open_trace(LM, use_cache=False)).select(ph.columns))


def test_one_row_per_gpu_stream():
    """MI300 Qwen: 463 kernels carry no launch correlation; they ran on the same stream as the
    others, so the Timeline draws that stream as one row holding every op the JSON lists on it."""
    path = KINETO / "traces__mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    per_stream: dict[tuple, int] = {}
    for e in kineto_events(path, ("kernel", "gpu_memcpy", "gpu_memset")):
        if e.get("ph") == "X":
            a = e.get("args") or {}
            key = (a.get("device"), a.get("stream"))
            per_stream[key] = per_stream.get(key, 0) + 1
    tl = T.build(open_trace(path, use_cache=False), cpu=False)
    rows = {r.label: len(r) for r in tl.rows if r.kind == "gpu"}
    assert rows == {f"GPU{d} s{s}": n for (d, s), n in per_stream.items()}


def test_joined_last_counts_each_collective_once(tmp_path):
    files = []
    for r in (0, 1):
        f = tmp_path / f"ddp_nsys.rank{r}.sqlite"
        f.write_bytes(lzma.decompress((ROOT / "tests" / "fixtures" / "capture" / f"{f.name}.xz").read_bytes()))
        files.append(f)
    run = make_run([open_trace(f, use_cache=False) for f in files])
    inst = straggler_instances(run)
    s = rank_summary(run)
    assert int(s["Joined last"].sum()) == inst.height > 0
    for rank, n in s.select("Rank", "Joined last").iter_rows():
        assert n == inst.filter(pl.col("Last rank") == rank).height


def test_the_layer_family_is_the_one_holding_the_gpu_time(tmp_path):
    """The LM sample with its twelve layer_N ranges inside an `encoder` range and two small
    numbered ranges beside it, nearer the top (norm_0 around the embeddings, norm_1 around the
    head): the layers hold the GPU time, so they are the family, not the two norms."""
    f = tmp_path / "lm_nested.sqlite"
    shutil.copyfile(LM, f)
    first, last = _range(f, "layer_0"), _range(f, "layer_11")
    emb, head = _range(f, "token_embeddings"), _range(f, "lm_head")
    tid = first[2]
    _add_ranges(
        f,
        [
            (first[0] - 1, last[1] + 1, tid, "encoder"),
            (emb[0] - 1, emb[1] + 1, tid, "norm_0"),
            (head[0] - 1, head[1] + 1, tid, "norm_1"),
        ],
    )
    trace = open_trace(f, use_cache=False)
    assert detect_layer_pattern(trace) == r"^layer_\d+$"
    # the GPU time each family's members hold, from the Layer column as plain text
    a = attribute(trace)
    held = {
        fam: int(a.filter(pl.col("Layer").str.contains(rf"(^|:){fam}_\d+(:|$)"))["Duration (ns)"].sum())
        for fam in ("layer", "norm")
    }
    assert held["layer"] > held["norm"] > 0
    lay = layer_times(trace)
    assert lay["Layer"].to_list() == [f"layer_{i}" for i in range(12)]
    assert (
        lay.select("Forward (ns)", "Backward (ns)").rows()
        == layer_times(open_trace(LM, use_cache=False)).select("Forward (ns)", "Backward (ns)").rows()
    )
