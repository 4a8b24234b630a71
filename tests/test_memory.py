"""Memory timelines from real allocator histories (tests/fixtures/memory/README.md: captured on
an H100 with `kview capture --memory` and `kview bench --memory-snapshot`), checked against an
independent replay of the snapshot's events and against torch's own counters, which kview
stored in the snapshot when it was taken."""

from __future__ import annotations

import gzip
import json
import lzma
import pickle
import shutil

import polars as pl
import pytest

from kview.analysis import memory_timeline as mt
from kview.cli import main
from kview.io import snapshot_pickle
from kview.output.memory_plot import columns, plot

from conftest import FIXTURES

MEM = FIXTURES / "memory"
SMALL = ["small_forward_fp32", "small_forward_bf16", "small_train_fp32", "small_train_bf16"]


@pytest.fixture(scope="session")
def unpacked(tmp_path_factory):
    """The xz fixtures decompressed once (the trace beside its snapshot, as capture writes them)."""
    folder = tmp_path_factory.mktemp("memory")
    for p in MEM.glob("*.xz"):
        (folder / p.name.removesuffix(".xz")).write_bytes(lzma.decompress(p.read_bytes()))
    return folder


def _raw(path):
    """The fixture as plain pickle reads it (trusted test data): the independent side."""
    return pickle.loads(path.read_bytes())


def _replay(data: dict, device: int = 0) -> tuple[list[int], list[int]]:
    """Allocated and reserved bytes after every event, by walking the events one by one."""
    events = data["device_traces"][device]
    live = sum(b["requested_size"] for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    segs = sum(s["total_size"] for s in data["segments"])
    net_a = net_r = 0
    for e in events:
        net_a += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_requested" else 0
        net_r += e["size"] if e["action"] in ("segment_alloc", "segment_map") else 0
        net_r -= e["size"] if e["action"] in ("segment_free", "segment_unmap") else 0
    a, r = live - net_a, segs - net_r
    alloc, res = [], []
    for e in events:
        if e["action"] == "alloc":
            a += e["size"]
        elif e["action"] == "free_requested":
            a -= e["size"]
        elif e["action"] in ("segment_alloc", "segment_map"):
            r += e["size"]
        elif e["action"] in ("segment_free", "segment_unmap"):
            r -= e["size"]
        alloc.append(a)
        res.append(r)
    return alloc, res


@pytest.mark.parametrize("name", ["tiny_train.memory.pickle", "tiny_cmd.memory.pickle", "bench_small_train.pickle"])
def test_series_equals_a_replay_of_the_events(unpacked, name):
    data = _raw(unpacked / name)
    tl = mt.build(snapshot_pickle.load(unpacked / name), name)
    alloc, res = _replay(data)
    assert tl.series["allocated"].to_list() == alloc
    assert tl.series["reserved"].to_list() == res
    assert tl.series.height == len(data["device_traces"][0]) > 100


@pytest.mark.parametrize("name", SMALL + ["tiny_train", "tiny_cmd"])
def test_peaks_equal_torchs_counters(unpacked, name):
    """The peak of the replay is torch's requested-bytes peak to the byte and its reserved peak
    is max_memory_reserved; max_memory_allocated counts whole blocks, so it is at or above."""
    tl = mt.open_memory(unpacked / f"{name}.memory.pickle")
    f = tl.facts
    assert tl.peak["allocated"] == f["requested_bytes_peak"]
    assert int(tl.series["reserved"].max()) == f["max_memory_reserved"]
    assert tl.peak["allocated"] <= f["max_memory_allocated"] <= tl.peak["allocated"] * 1.035
    if name.endswith("fp32"):  # the notes' figures: fp32 LM small, within 1% of max_memory_allocated
        assert f["max_memory_allocated"] <= tl.peak["allocated"] * 1.01


def test_lm_small_train_peak_is_the_notes_figure(unpacked):
    """The notes' full-step peak (4.7 GB, LM small, context 128, batch 16, fp32)."""
    tl = mt.open_memory(unpacked / "small_train_fp32.memory.pickle")
    assert round(tl.peak["allocated"] / 1e9, 1) == 4.7
    assert tl.facts["max_memory_allocated"] == 4_702_201_856


def test_what_was_live_at_the_peak_adds_up_to_it(unpacked):
    data = _raw(unpacked / "tiny_train.memory.pickle")
    tl = mt.open_memory(unpacked / "tiny_train.memory.pickle")
    live = mt.live_at(tl, tl.peak["idx"])
    assert int(live["size"].sum()) == tl.peak["allocated"]
    # independently: addresses allocated and not yet freed at the peak event
    alive: dict[int, int] = {}
    for e in data["device_traces"][0][: tl.peak["idx"] + 1]:
        if e["action"] == "alloc":
            alive[e["addr"]] = e["size"]
        elif e["action"] == "free_requested":
            alive.pop(e["addr"], None)
    made = live.filter(pl.col("idx") >= 0)
    assert sorted(made["size"].to_list()) == sorted(alive.values())
    site = mt.by_site(live, 1000)
    assert int(site["Bytes"].sum()) == tl.peak["allocated"]
    assert site["Count"].sum() == live.height
    size = mt.by_size(live, 1000)
    assert int(size["Bytes"].sum()) == tl.peak["allocated"]


def test_call_sites_are_outside_torch(unpacked):
    tl = mt.open_memory(unpacked / "tiny_cmd.memory.pickle")
    sites = set(tl.allocations["site"].to_list())
    assert any(s.startswith("examples/train_tiny.py:") for s in sites)
    assert not any("/torch/" in s for s in sites)


def test_phases_come_from_the_trace_beside_the_snapshot(unpacked):
    tl = mt.open_memory(unpacked / "tiny_train.sqlite")  # the trace: its snapshot is found beside it
    assert tl.clock == "trace"
    assert tl.phases["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"] * 2
    # the clock pair puts the allocator's events inside the trace's phases: the peak (logits and
    # loss of the forward pass, or the first gradients) falls in a phase, not between them
    pk = tl.peak["t"]
    assert tl.phases.filter((pl.col("start") <= pk) & (pl.col("end") >= pk)).height == 1
    assert tl.series["t"].min() >= tl.facts["clock"]["trace_ns"] - 1_000_000


def test_phases_from_the_snapshots_own_ranges(unpacked):
    tl = mt.open_memory(unpacked / "bench_small_train.pickle")
    assert tl.clock == "snapshot"
    assert tl.phases["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"] * 2
    peaks = mt.phase_peaks(tl)
    assert int(peaks["Peak"].max()) == tl.peak["allocated"]
    assert peaks.filter(pl.col("Peak") == tl.peak["allocated"])["Phase"].to_list()[0] == "backward_pass"


def test_plot_columns_hold_the_highest_value_of_their_time_slice(unpacked):
    tl = mt.open_memory(unpacked / "tiny_train.memory.pickle")
    width = 37
    cols = columns(tl.series, width)
    t = tl.series["t"].to_list()
    a = tl.series["allocated"].to_list()
    t0, span = t[0], t[-1] - t[0]
    expect, last = [], a[0]
    for c in range(width):
        inside = [v for ti, v in zip(t, a) if (ti - t0) * width // (span + 1) == c]
        expect.append(max(inside) if inside else last)
        last = next((v for ti, v in zip(reversed(t), reversed(a)) if (ti - t0) * width // (span + 1) <= c), last)
    assert cols["allocated"].to_list() == expect
    assert max(expect) == tl.peak["allocated"]
    lines = plot(tl.series, tl.phases, 80, 10, tl.peak)
    assert all(len(line) <= 80 for line in lines)
    axis = lines[10]
    assert axis.count("▲") == 1 and axis.index("▲") - 11 == cols_peak(tl, 80 - 11)


def cols_peak(tl, w):
    t0, t1 = tl.series["t"].min(), tl.series["t"].max()
    return (tl.peak["t"] - t0) * w // (t1 - t0 + 1)


def test_kview_memory_prints_the_timeline(unpacked, capsys):
    assert main(["memory", str(unpacked / "tiny_train.sqlite"), "--width", "80", "--top", "3"]) == 0
    out = capsys.readouterr().out
    for title in ("Allocated and reserved over time", "Live at the peak, by call site", "Largest allocations"):
        assert title in out
    assert "F forward_pass  B backward_pass  O optimizer_step" in out
    assert main(["memory", str(unpacked / "tiny_train.memory.pickle"), "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    tl = mt.open_memory(unpacked / "tiny_train.memory.pickle")
    assert max(r["Allocated"] for r in doc["timeline"]) == tl.peak["allocated"]
    assert main(["memory", str(unpacked / "tiny_train.memory.pickle"), "-f", "csv", "--table", "top"]) == 0
    csv = pl.read_csv(capsys.readouterr().out.encode())
    assert csv["Size"].to_list() == sorted(csv["Size"].to_list(), reverse=True)


def test_compressed_snapshots_open_as_they_are(unpacked, tmp_path, capsys):
    gz = tmp_path / "s.pickle.gz"
    with gzip.open(gz, "wb") as g:
        g.write((unpacked / "tiny_cmd.memory.pickle").read_bytes())
    shutil.copy(MEM / "tiny_cmd.memory.pickle.xz", tmp_path / "s.pickle.xz")
    a = mt.open_memory(gz)
    b = mt.open_memory(tmp_path / "s.pickle.xz")
    c = mt.open_memory(unpacked / "tiny_cmd.memory.pickle")  # beside its trace: on the trace's clock
    assert a.peak == b.peak
    assert (a.peak["idx"], a.peak["allocated"]) == (c.peak["idx"], c.peak["allocated"])
    assert a.series["allocated"].equals(c.series["allocated"])


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("touch /tmp/kview-pwned",))


@pytest.mark.parametrize(
    "kind,words",
    [
        ("code", "names posix.system"),
        ("list", "pickle of a list"),
        ("nohistory", "holds no allocator history"),
        ("empty", "is empty"),
        ("truncated", "truncated"),
        ("folder", "is a folder"),
        ("csv", "do not fit one CSV document"),
        ("trace-without", "has no allocator history beside it"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(unpacked, tmp_path, capsys, kind, words):
    p = tmp_path / "bad.pickle"
    args = []
    if kind == "code":
        p.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Evil()]]}))
    elif kind == "list":
        p.write_bytes(pickle.dumps([1, 2]))
    elif kind == "nohistory":
        p.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "truncated":
        p.write_bytes((unpacked / "tiny_cmd.memory.pickle").read_bytes()[:5000])
    elif kind == "folder":
        p = tmp_path
    elif kind == "csv":
        p = unpacked / "tiny_cmd.memory.pickle"
        args = ["-f", "csv"]
    elif kind == "trace-without":
        p = tmp_path / "t.sqlite"
        shutil.copy(unpacked / "tiny_cmd.sqlite", p)
    assert main(["memory", str(p), *args]) == 2
    err = capsys.readouterr()
    assert err.out == ""
    assert words in err.err and len(err.err.strip().splitlines()) == 1
