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

from kview.analysis import memory
from kview.analysis import memory_timeline as mt
from kview.cli import main
from kview.io import snapshot_pickle
from kview.output.memory_plot import columns, plot

from conftest import FIXTURES, SAMPLES

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
    requested, res = _replay(data)
    assert tl.series["requested"].to_list() == requested
    assert tl.series["reserved"].to_list() == res
    assert tl.series.height == len(data["device_traces"][0]) > 100
    # the blocks: never less than asked for; a small request (1 MiB or less) gets exactly the
    # request rounded up to 512 bytes (no remainder under 512 exists to hand out with it)
    ev = tl.events.filter(pl.col("action").is_in(["alloc", "free_requested"]))
    assert (ev["block"] >= ev["size"]).all()
    small = [(s, b) for s, b in zip(ev["size"], ev["block"]) if s <= 2**20]
    assert small and all(b == max(512, -(-s // 512) * 512) for s, b in small)


@pytest.mark.parametrize("name", SMALL + ["tiny_train", "tiny_cmd"])
def test_peaks_equal_torchs_counters(unpacked, name):
    """Torch counted its own peaks while the history was recorded (kview stored them in the
    snapshot): the replayed blocks peak at max_memory_allocated, the requested bytes at the
    requested_bytes peak and the segments at max_memory_reserved, each to the byte, in fp32
    and bf16 alike (bf16's requested peak is 2.5-3.3% under max_memory_allocated)."""
    tl = memory.open_memory(unpacked / f"{name}.memory.pickle")
    f = tl.facts
    assert tl.peak["allocated"] == f["max_memory_allocated"]
    assert int(tl.series["requested"].max()) == f["requested_bytes_peak"]
    assert int(tl.series["reserved"].max()) == f["max_memory_reserved"]
    if name.endswith("bf16"):  # where the blocks matter: some are handed out whole (a remainder of 1 MiB or less)
        assert f["requested_bytes_peak"] * 1.02 < f["max_memory_allocated"]
        made = tl.allocations.filter(pl.col("idx") >= 0)
        assert (made["block"] > (made["size"] + 511) // 512 * 512 + 2**19).sum() > 0


def _segment_history(events, segment=20 << 20):
    """A snapshot of one 20 MiB large-pool segment made during the history, then `events`
    (action, offset in the segment, size), every block freed by the end."""
    base = 0x7F0000000000
    trace = [{"action": "segment_alloc", "addr": base, "size": segment, "stream": 0, "time_us": 0}]
    trace += [
        {"action": a, "addr": base + o, "size": n, "stream": 0, "time_us": i + 1} for i, (a, o, n) in enumerate(events)
    ]
    blocks = [{"address": base, "size": segment, "requested_size": 0, "state": "inactive"}]
    seg = {"device": 0, "address": base, "total_size": segment, "segment_type": "large", "blocks": blocks}
    return {"segments": [seg], "device_traces": [trace]}


def test_blocks_split_or_whole_as_the_caching_allocator_decides():
    """Hand-computed: 20 MiB free; 3 MiB is split off (17 MiB would remain); 16.5 MiB takes the
    other 17 MiB whole (0.5 MiB would remain: not worth a block); freed and merged back, 1.5 MiB
    + 1 byte rounds to 512 and is split off the merged 20 MiB."""
    mib = 2**20
    events = [
        ("alloc", 0, 3 * mib),
        ("alloc", 3 * mib, 16 * mib + mib // 2),
        ("free_requested", 0, 3 * mib),
        ("free_completed", 0, 3 * mib),
        ("free_requested", 3 * mib, 16 * mib + mib // 2),
        ("free_completed", 3 * mib, 16 * mib + mib // 2),
        ("alloc", 0, mib + mib // 2 + 1),
        ("free_requested", 0, mib + mib // 2 + 1),
        ("free_completed", 0, mib + mib // 2 + 1),
    ]
    tl = mt.build(_segment_history(events), "hand-made")
    blocks = tl.events.filter(pl.col("action") == "alloc")["block"].to_list()
    assert blocks == [3 * mib, 17 * mib, mib + mib // 2 + 512]
    assert tl.peak["allocated"] == 20 * mib and int(tl.series["requested"].max()) == 19 * mib + mib // 2
    assert tl.series["allocated"].to_list()[-1] == 0


def test_lm_small_train_peak_is_the_notes_figure(unpacked):
    """The notes' full-step peak (4.7 GB, LM small, context 128, batch 16, fp32)."""
    tl = memory.open_memory(unpacked / "small_train_fp32.memory.pickle")
    assert round(tl.peak["allocated"] / 1e9, 1) == 4.7
    assert tl.facts["max_memory_allocated"] == 4_702_201_856


def test_what_was_live_at_the_peak_adds_up_to_it(unpacked):
    data = _raw(unpacked / "tiny_train.memory.pickle")
    tl = memory.open_memory(unpacked / "tiny_train.memory.pickle")
    live = mt.live_at(tl, tl.peak["idx"])
    assert int(live["block"].sum()) == tl.peak["allocated"]
    assert int(live["size"].sum()) == tl.peak["requested"]
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
    tl = memory.open_memory(unpacked / "tiny_cmd.memory.pickle")
    sites = set(tl.allocations["site"].to_list())
    assert any(s.startswith("examples/train_tiny.py:") for s in sites)
    assert not any("/torch/" in s for s in sites)


def test_phases_come_from_the_trace_beside_the_snapshot(unpacked):
    tl = memory.open_memory(unpacked / "tiny_train.sqlite")  # the trace: its snapshot is found beside it
    assert tl.clock == "trace"
    assert tl.phases["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"] * 2
    # the clock pair puts the allocator's events inside the trace's phases: the peak (logits and
    # loss of the forward pass, or the first gradients) falls in a phase, not between them
    pk = tl.peak["t"]
    assert tl.phases.filter((pl.col("start") <= pk) & (pl.col("end") >= pk)).height == 1
    assert tl.series["t"].min() >= tl.facts["clock"]["trace_ns"] - 1_000_000


def test_phases_from_the_snapshots_own_ranges(unpacked):
    tl = memory.open_memory(unpacked / "bench_small_train.pickle")
    assert tl.clock == "snapshot"
    assert tl.phases["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"] * 2
    peaks = mt.phase_peaks(tl)
    assert int(peaks["Peak"].max()) == tl.peak["allocated"]
    assert peaks.filter(pl.col("Peak") == tl.peak["allocated"])["Phase"].to_list()[0] == "backward_pass"


def test_plot_columns_hold_the_highest_value_of_their_time_slice(unpacked):
    tl = memory.open_memory(unpacked / "tiny_train.memory.pickle")
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
    tl = memory.open_memory(unpacked / "tiny_train.memory.pickle")
    assert max(r["Allocated"] for r in doc["timeline"]) == tl.peak["allocated"]
    assert main(["memory", str(unpacked / "tiny_train.memory.pickle"), "-f", "csv", "--table", "top"]) == 0
    csv = pl.read_csv(capsys.readouterr().out.encode())
    assert csv["Size"].to_list() == sorted(csv["Size"].to_list(), reverse=True)


def test_a_trace_of_many_steps_names_each_phase_by_its_own_letter_within_the_width(capsys):
    """The ResNet-50 trace's memory events span six ProfilerSteps: the letters were F B O S A B
    (two Bs) and their names one line of 118 characters at --width 80."""
    trace = FIXTURES / "kineto" / "resnet50_nw0_2021.pt.trace.json.gz"
    assert main(["memory", str(trace), "--width", "80"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.lstrip().startswith("phases "))
    end = at + 1 + next(i for i, x in enumerate(lines[at + 1 :]) if "█" in x)  # the glyphs' line
    legend = " ".join(lines[at + 1 : end]).split()
    names = legend[1::2]
    letters = legend[0::2]
    assert names == [f"ProfilerStep#{i}" for i in range(5, 11)]
    assert len(set(letters)) == len(letters) == 6
    assert set(lines[at].split(maxsplit=1)[1]) - {"·"} == set(letters)
    assert max(len(x) for x in lines[: end + 1]) <= 80  # the plot (tables below fit only a terminal)


def test_the_timeline_tables_times_are_whole_nanoseconds_in_ms(capsys):
    """Time (ms) from integer ns, rounded to the ns: the ResNet-50 trace printed 68.98599999999999."""
    trace = FIXTURES / "kineto" / "resnet50_nw0_2021.pt.trace.json.gz"
    assert main(["memory", str(trace), "--table", "timeline", "-f", "csv"]) == 0
    times = capsys.readouterr().out.splitlines()[1:]
    times = [x.split(",")[1] for x in times]
    assert times and all(len(t.partition(".")[2]) <= 6 for t in times), max(times, key=len)


def test_compressed_snapshots_open_as_they_are(unpacked, tmp_path, capsys):
    gz = tmp_path / "s.pickle.gz"
    with gzip.open(gz, "wb") as g:
        g.write((unpacked / "tiny_cmd.memory.pickle").read_bytes())
    shutil.copy(MEM / "tiny_cmd.memory.pickle.xz", tmp_path / "s.pickle.xz")
    a = memory.open_memory(gz)
    b = memory.open_memory(tmp_path / "s.pickle.xz")
    c = memory.open_memory(unpacked / "tiny_cmd.memory.pickle")  # beside its trace: on the trace's clock
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
        ("trace-without", "has no allocator history beside it (t.memory.pickle) and no memory events of its own"),
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
        p = tmp_path / "t.sqlite"  # an nsys trace recorded without --cuda-memory-usage
        shutil.copy(SAMPLES / "lm-small_ctx256_forward_nsys.sqlite", p)
    assert main(["memory", str(p), *args]) == 2
    err = capsys.readouterr()
    assert err.out == ""
    assert words in err.err and len(err.err.strip().splitlines()) == 1


def test_rounding_follows_the_allocator_settings():
    """Hand-computed round_size: 512-byte multiples by default; with roundup_power2_divisions
    4 for the 1 MiB interval, 1 MiB + 1 B rounds to 1.25 MiB (a quarter of the power of two)."""
    from kview.analysis.allocator_blocks import rounded, settings

    sizes = pl.Series([1, 512, 513, 2**20 + 1])
    assert rounded(sizes, settings({})).to_list() == [512, 512, 1024, 2**20 + 512]
    conf = {"allocator_settings": {"roundup_power2_divisions": {"1": 4, "2": 0}}}
    assert rounded(sizes, settings(conf)).to_list() == [512, 512, 1024, 2**20 + 2**18]
