"""Memory from the trace itself: torch.profiler's `[memory]` events and nsys's CUDA memory usage
events, checked against a plain reading of the file (the json module over the events, sqlite3
over CUDA_GPU_MEMORY_USAGE_EVENTS)."""

from __future__ import annotations

import functools
import gzip
import json
import lzma
import sqlite3
from decimal import Decimal
from itertools import accumulate

import polars as pl
import pytest

from kview.analysis import memory
from kview.analysis import memory_timeline as mt
from kview.analysis import trace_memory as tm
from kview.cli import main
from kview.trace import open_trace

from conftest import FIXTURES, KINETO

QWEN = KINETO / "traces__mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"  # with Total Allocated / Reserved
RESNET_2021 = KINETO / "resnet50_nw0_2021.pt.trace.json.gz"  # Bytes only (PyTorch 1.9)
MEM_TORCH = FIXTURES / "memory" / "mem_torch.json.gz"  # captured on an H200 with profile_memory=True


# a test reads its trace's events several times: decoded once (no caller changes them)
@functools.lru_cache(maxsize=1)
def _events(path):
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _memory(path, device: int) -> list[dict]:
    """The device's `[memory]` events in time order (stable), as plain dicts."""
    ev = [
        e
        for e in _events(path)
        if e.get("name") == "[memory]" and e["args"].get("Device Type") != 0 and e["args"].get("Device Id") == device
    ]
    return sorted(ev, key=lambda e: Decimal(e["ts"]))


def _ns(ts) -> int:
    return int(Decimal(ts) * 1000)


def _steps(path) -> list[tuple[int, int]]:
    steps = [
        e
        for e in _events(path)
        if e.get("ph") == "X"
        and e.get("cat") != "gpu_user_annotation"  # the step's copy on the GPU's timeline
        and str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    return sorted((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in steps)


@pytest.mark.parametrize(
    ("path", "events", "peak"),
    [(QWEN, 2588, 2_219_047_936), (MEM_TORCH, 1056, 402_316_800)],
    ids=["public-mi300", "captured-h200"],
)
def test_counters_are_the_traces_total_allocated_and_reserved(path, events, peak):
    tl = tm.timeline(open_trace(path, use_cache=False))
    ev = _memory(path, 0)
    assert tl.source == tm.KINETO and tl.device == 0 and tl.events.height == len(ev) == events
    alloc = [e["args"]["Total Allocated"] for e in ev]
    assert tl.series["allocated"].to_list() == alloc
    assert tl.series["reserved"].to_list() == [e["args"]["Total Reserved"] for e in ev]
    assert tl.peak["allocated"] == max(alloc) == peak
    assert tl.series["reserved"].max() == max(e["args"]["Total Reserved"] for e in ev)
    # the live set at the peak adds up to the peak (what was there before the trace: one row)
    live = mt.live_at(tl, tl.peak["idx"])
    assert int(mt.by_site(live, 10_000)["Bytes"].sum()) == max(alloc)
    before = alloc[0] - ev[0]["args"]["Bytes"]
    assert live.filter(pl.col("site") == mt.BEFORE)["block"].sum() <= before
    # per step: the highest Total Allocated of the events inside it
    peaks = mt.step_peaks(tl)
    assert peaks.height == len(_steps(path)) > 0
    for (a, b), got in zip(_steps(path), peaks["Peak"].to_list(), strict=True):
        assert got == max(e["args"]["Total Allocated"] for e in ev if a <= _ns(e["ts"]) <= b)
    for (a, b), got in zip(_steps(path), peaks["Reserved peak"].to_list(), strict=True):
        assert got == max(e["args"]["Total Reserved"] for e in ev if a <= _ns(e["ts"]) <= b)


def test_live_allocations_name_the_op_and_module_open_around_them():
    """Each live block's Op is a CPU op open on its thread when the `[memory]` event fired, and
    its Layer ends with an nn.Module call open there too."""
    tl = tm.timeline(open_trace(QWEN, use_cache=False))
    live = mt.live_at(tl, tl.peak["idx"]).filter(pl.col("idx") >= 0)
    events = _events(QWEN)
    mem = {i: e for i, e in enumerate(e for e in events if e.get("name") == "[memory]")}
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    mods = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("nn.Module: ")]
    checked = 0
    for row in live.head(40).iter_rows(named=True):
        e = mem[row["idx"]]
        t, tid = Decimal(e["ts"]), e["tid"]

        def around(xs, t=t, tid=tid):
            return [x["name"] for x in xs if x["tid"] == tid and Decimal(x["ts"]) <= t <= Decimal(x["ts"]) + x["dur"]]

        names = {n.removeprefix("aten::") for n in around(ops)}
        assert row["Op"] in names or row["Op"] in {mt_alias for mt_alias in _aliases(names)}, (row, names)
        assert row["Layer"].split(":")[-1] in {n.removeprefix("nn.Module: ") for n in around(mods)}
        checked += 1
    assert checked == 40


def _aliases(names):
    from kview.analysis.attribution import OP_ALIASES

    return {OP_ALIASES.get(n, n) for n in names}


def test_a_trace_without_counters_counts_bytes_from_its_start():
    """PyTorch 1.9 wrote Bytes only: allocated is their running sum, and no live set is claimed."""
    trace = open_trace(RESNET_2021, use_cache=False)
    tl = tm.timeline(trace)
    ev = _memory(RESNET_2021, 0)
    running = list(accumulate(e["args"]["Bytes"] for e in ev))
    assert tl.series["allocated"].to_list() == running
    assert tl.peak["allocated"] == max(running)
    assert tl.series["reserved"].null_count() == tl.series.height
    assert tl.allocations.height == 0
    facts = dict(memory.summary(tl))
    assert "no totals" in next(k for k in facts if k.startswith("Peak"))
    assert "no addresses" in facts["Live at the peak"]
    t_of = [_ns(e["ts"]) for e in ev]
    peaks = mt.step_peaks(tl)
    assert peaks.height == len(_steps(RESNET_2021)) == 6
    for (a, b), got in zip(_steps(RESNET_2021), peaks["Peak"].to_list(), strict=True):
        inside = [v for t, v in zip(t_of, running) if a <= t <= b]
        before = [v for t, v in zip(t_of, running) if t <= a]
        after = [v for t, v in zip(t_of, running) if t <= b]
        assert got == max(inside + before[-1:] + after[-1:])
    # the host's allocations are their own device (-1)
    assert tm.devices(trace)["device"].to_list() == [0, -1]
    host = tm.timeline(trace, -1)
    cpu = [e for e in _events(RESNET_2021) if e.get("name") == "[memory]" and e["args"]["Device Type"] == 0]
    assert host.peak["allocated"] == max(accumulate(e["args"]["Bytes"] for e in sorted(cpu, key=lambda e: e["ts"])))


def _unpacked(tmp_path_factory, name):
    p = tmp_path_factory.mktemp("trace-memory") / name  # no snapshot beside it here
    p.write_bytes(lzma.decompress((FIXTURES / "memory" / f"{name}.xz").read_bytes()))
    return p


@pytest.fixture(scope="module")
def tiny_nsys(tmp_path_factory):
    return _unpacked(tmp_path_factory, "tiny_train.sqlite")


@pytest.fixture(scope="module")
def mem_nsys(tmp_path_factory):
    """Captured on an H200 with nsys --cuda-memory-usage=true (tests/fixtures/memory/README.md)."""
    return _unpacked(tmp_path_factory, "mem_nsys.sqlite")


def _nsys_level(path, device: int) -> tuple[list[int], int]:
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
            "WHERE memKind = 2 AND deviceId = ? ORDER BY start, rowid",
            (device,),
        ).fetchall()
        static = db.execute(
            "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind = 5 AND memoryOperationType = 0 "
            "AND deviceId = ?",
            (device,),
        ).fetchone()[0]
    return list(accumulate(r[0] for r in rows)), static


@pytest.mark.parametrize(("trace", "peak"), [("tiny_nsys", 249_825_280), ("mem_nsys", 528_746_496)])
def test_nsys_memory_usage_equals_a_plain_query(trace, peak, request):
    path = request.getfixturevalue(trace)
    tl = tm.timeline(open_trace(path, use_cache=False))
    level, static = _nsys_level(path, 0)
    assert tl.source == tm.NSYS and tl.series["allocated"].to_list() == level
    assert tl.peak["allocated"] == max(level) == peak
    assert tl.facts["static"] == static
    live = mt.live_at(tl, tl.peak["idx"])
    assert int(live["block"].sum()) == max(level)


def test_kview_memory_names_the_source_of_its_figures(tiny_nsys, mem_nsys, capsys):
    assert main(["memory", str(QWEN), "--table", "summary", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "the trace's [memory] events" in out and "(2,219,047,936 B)" in out
    assert main(["memory", str(QWEN), "--table", "summary", "-f", "json", "--no-cache"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert "[memory] events" in row["Source"] and row["Peak (B)"] == 2_219_047_936
    assert row["Level"] == "allocated (torch memory_allocated)" and row["Peak reserved (B)"] == 2_533_359_616
    assert main(["memory", str(tiny_nsys), "--table", "timeline", "-f", "json", "--no-cache"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [r["Allocated"] for r in got] == _nsys_level(tiny_nsys, 0)[0] and "Requested" not in got[0]
    # a compressed export opens as it is (through a copy in the cache)
    assert main(["memory", str(FIXTURES / "memory" / "mem_nsys.sqlite.xz"), "--table", "timeline", "-f", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [r["Allocated"] for r in got] == _nsys_level(mem_nsys, 0)[0]
    assert main(["memory", str(QWEN), "--device", "3", "--no-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no memory events of device 3 (devices: -1, 0)" in err[0]


async def test_the_memory_view_shows_a_traces_own_events():
    from test_tui import loaded, screen_text

    from kview.tui.app import KviewApp

    app = KviewApp([str(QWEN)], use_cache=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        await pilot.press("8")
        await pilot.pause()
        tl = app.view("memory").data.timeline
        assert tl is not None and tl.peak["allocated"] == max(e["args"]["Total Allocated"] for e in _memory(QWEN, 0))
        text = screen_text(app)
        assert "[memory] events" in text and "Live at the peak, by op and layer" in text
