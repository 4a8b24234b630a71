"""Hostile memory snapshots (pickles): bombs are refused in one line before they cost memory,
shared structures are processed once, and every malformed snapshot is one line and exit 2."""

from __future__ import annotations

import contextlib
import copy
import io
import lzma
import pickle
import random
import shutil
import struct
import tracemalloc

import pytest

from kview.analysis import memory
from kview.analysis import memory_timeline as mt
from kview.cli import main
from kview.errors import TraceError
from kview.io import snapshot_pickle

from conftest import FIXTURES, run_kview_measured

MEM = FIXTURES / "memory"
TINY = pickle.loads(lzma.decompress((MEM / "tiny_train.memory.pickle.xz").read_bytes()))


def _kview(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def _one_line(rc, err, path):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], err
    assert "internal error" not in err and "Traceback" not in err


def memo_bomb(path):
    """9 bytes: PROTO 4, NONE, LONG_BINPUT 2^28 (the C unpickler would zero a memo of 2^29 slots), STOP."""
    path.write_bytes(b"\x80\x04N" + b"r" + struct.pack("<I", 1 << 28) + b".")
    assert path.stat().st_size == 9
    return path


def test_memo_bomb_is_refused_quickly_and_small(tmp_path):
    p = memo_bomb(tmp_path / "bomb.pickle")
    rc, _, err, _, rss = run_kview_measured(["memory", p])
    _one_line(rc, err, p)
    assert "memo" in err
    assert rss < 400, f"peak RSS {rss:.0f} MiB"  # the bomb alone asks for 4 GiB


def test_memo_bomb_beside_a_trace_costs_the_tui_nothing(tmp_path):
    """The TUI opens a trace and the snapshot beside it: the bomb is named in the Memory view and
    the start-up allocates no more than the trace needs (tracemalloc sees the C memo)."""
    from kview.trace import open_trace
    from kview.tui.loading import load_memory_beside
    from kview.tui.messages import MemoryReady

    trace = tmp_path / "run.sqlite"
    trace.write_bytes(lzma.decompress((MEM / "tiny_train.sqlite.xz").read_bytes()))
    memo_bomb(tmp_path / "run.memory.pickle")
    t = open_trace(trace, use_cache=False)
    tracemalloc.start()
    try:
        messages = list(load_memory_beside(t, use_cache=False))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    ready = [m for m in messages if isinstance(m, MemoryReady)]
    assert len(ready) == 1 and ready[0].timeline is None and "memo" in ready[0].note
    assert peak < 64 << 20, f"{peak / 2**20:.0f} MiB"


def _xz_bomb(path, inflated=2 << 30):
    """~320 KB of xz streams that inflate to 2 GiB: a pickle whose one bytes object declares 2 GiB
    of zeros (xz streams concatenated, as `xz` reads them)."""
    head = b"\x80\x04\x95" + struct.pack("<Q", 20) + b"}\x94(\x8c\x03pad\x94\x8e" + struct.pack("<Q", inflated)
    zeros = lzma.compress(b"\0" * (64 << 20), preset=0)
    with open(path, "wb") as f:
        f.write(lzma.compress(head))
        for _ in range(inflated // (64 << 20)):
            f.write(zeros)
    return path


def test_xz_bomb_is_refused_within_max_memory(tmp_path):
    p = _xz_bomb(tmp_path / "bomb.pickle.xz")
    assert p.stat().st_size < 400_000
    rc, _, err, _, rss = run_kview_measured(["memory", p, "--max-memory", "1G"])
    _one_line(rc, err, p)
    assert "--max-memory 1.0 GiB" in err
    assert rss < 1024, f"peak RSS {rss:.0f} MiB over --max-memory 1G"


def test_snapshot_over_the_budget_is_refused(tmp_path):
    """A real snapshot whose objects would not fit a small budget: refused, naming the budget;
    within a budget it fits, the same snapshot opens."""
    p = tmp_path / "s.pickle"
    p.write_bytes(lzma.decompress((MEM / "small_train_fp32.memory.pickle.xz").read_bytes()))
    rc, _, err = _kview("memory", p, "--max-memory", "4M")
    _one_line(rc, err, p)
    assert "--max-memory 4.0 MiB" in err
    rc, out, err = _kview("memory", p, "--max-memory", "2G")
    assert rc == 0 and "Peak allocated" in out, err


def test_one_frames_list_shared_by_every_event_is_read_once(tmp_path):
    """10^5 events sharing one frames list of 10^5 frames (3.5 MB of pickle): each event's call
    site would scan the whole list (10^10 steps); kview scans it once. The timeline equals a plain
    replay: half the events allocate 512 B, the other half free them right after."""
    fr = {"filename": "/usr/lib/python3/site-packages/torch/nn/modules/module.py", "line": 1, "name": "_call_impl"}
    frames = [fr] * 100_000
    n = 100_000
    ev = [
        {"action": "alloc" if i % 2 == 0 else "free_requested", "addr": (i // 2) * 512, "size": 512}
        | {"stream": 0, "time_us": i, "frames": frames}
        for i in range(n)
    ]
    p = tmp_path / "shared.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": [ev]}, protocol=4))
    assert 3_000_000 < p.stat().st_size < 4_500_000
    rc, out, err, _, _ = run_kview_measured(["memory", p, "-f", "json"])
    assert rc == 0, err
    tl = memory.open_memory(p)
    assert tl.events.height == n
    assert tl.peak["allocated"] == 512 and tl.series["allocated"].max() == 512
    assert tl.allocations.filter(mt.pl.col("idx") >= 0)["site"].unique().to_list() == [mt.NO_FRAME]


@pytest.mark.parametrize(
    "where,value,words",
    [
        (("device_traces", 0, 0, "time_us"), float("1e99999"), "time_us is inf"),
        (("device_traces", 0, 5, "frames"), "not a list", "frames is a str"),
        (("device_traces", 0, 3, "size"), 2**70, "size is 1180591620717411303424"),
        (("segments", 0, "total_size"), float("nan"), "total_size is nan"),
        (("segments", 0, "blocks"), "blocks", "blocks is a str"),
        (("device_traces", 0, 2), ["a list"], "a history entry is a list"),
        (("allocator_settings",), {"max_split_size": float("inf")}, "max_split_size is inf"),
        (("external_annotations",), [{"stage": "START", "name": "x", "time_us": float("inf")}], "time_us is inf"),
    ],
)
def test_malformed_fields_are_one_line(tmp_path, where, value, words):
    data = copy.deepcopy(TINY)
    parent = data
    for k in where[:-1]:
        parent = parent[k]
    parent[where[-1]] = value
    p = tmp_path / "bad.memory.pickle"
    p.write_bytes(pickle.dumps(data))
    rc, out, err = _kview("memory", p)
    _one_line(rc, err, p)
    assert words in err and out == ""


def _paths(obj, prefix=(), out=None, depth=0):
    """Every place in the snapshot a mutation can hit (a few entries of each list)."""
    out = [] if out is None else out
    if depth > 6:
        return out
    items = (
        obj.items()
        if isinstance(obj, dict)
        else [(i, obj[i]) for i in sorted({0, 1, len(obj) // 2, len(obj) - 1}) if 0 <= i < len(obj)]
        if isinstance(obj, list)
        else []
    )
    for k, v in items:
        out.append((*prefix, k))
        _paths(v, (*prefix, k), out, depth + 1)
    return out


VALUES = [None, "x", float("inf"), float("nan"), 1.5, -1, 2**70, [], {}, [1, "a"], {"a": 1}, True, b"\0", ("t",)]
PLACES = _paths(TINY)


def _mutated(seed: int) -> dict:
    rng = random.Random(seed)
    data = copy.deepcopy(TINY)
    for _ in range(rng.randint(1, 3)):
        where = rng.choice(PLACES)
        try:
            parent = data
            for k in where[:-1]:
                parent = parent[k]
            if rng.random() < 0.2 and isinstance(parent, dict):
                parent.pop(where[-1], None)
            else:
                parent[where[-1]] = rng.choice(VALUES)
        except (KeyError, IndexError, TypeError):  # an earlier mutation changed the way there
            continue
    return data


@pytest.mark.parametrize("seed", range(40))
def test_structural_mutations_are_a_timeline_or_one_line(tmp_path, seed):
    """Fields replaced by every kind of value, deleted, containers swapped; beside the trace it was
    captured with (the clock and phases path) for half of them."""
    folder = tmp_path
    if seed % 2:
        (folder / "tiny_train.sqlite").write_bytes(lzma.decompress((MEM / "tiny_train.sqlite.xz").read_bytes()))
    p = folder / "tiny_train.memory.pickle"
    p.write_bytes(pickle.dumps(_mutated(seed)))
    rc, out, err = _kview("memory", p, "--no-cache")
    if rc != 0:
        _one_line(rc, err, p)


@pytest.mark.parametrize("seed", range(20))
def test_byte_flips_are_a_timeline_or_one_line(tmp_path, seed):
    rng = random.Random(seed)
    raw = bytearray(lzma.decompress((MEM / "tiny_train.memory.pickle.xz").read_bytes()))
    for _ in range(8):
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    p = tmp_path / "flipped.pickle"
    p.write_bytes(bytes(raw))
    rc, out, err = _kview("memory", p)
    if rc != 0:
        _one_line(rc, err, p)


def test_scan_agrees_with_the_unpickler_on_real_snapshots(tmp_path):
    """The scan ends where pickle ends, on every fixture snapshot and on the other protocols."""
    for f in MEM.glob("*.pickle.xz"):
        raw = lzma.decompress(f.read_bytes())
        data = pickle.loads(raw)
        for proto in (2, 3, 4, 5):
            again = pickle.dumps(data, protocol=proto) + b"trailing"
            s = snapshot_pickle.Scan()
            s.feed(again)
            assert s.end == len(again) - len(b"trailing")
    shutil.copy(MEM / "tiny_train.memory.pickle.xz", tmp_path / "t.pickle.xz")
    assert snapshot_pickle.load(tmp_path / "t.pickle.xz") == TINY


def test_a_text_memo_index_past_the_stream_is_refused(tmp_path):
    p = tmp_path / "put.pickle"
    p.write_bytes(b"(lp99999999\n.")  # protocol 0: PUT with a text index
    with pytest.raises(TraceError, match="memo entry 99,999,999"):
        snapshot_pickle.load(p)
