"""`kview export` and the Timeline's `E`: a window of a trace as Chrome trace-event JSON, checked
against the format's rules (read with the json module) and read back by kview: the kernel
summary of the file equals a plain computation over the source window."""

from __future__ import annotations

import bisect
import gzip
import json
import sqlite3
from collections import Counter, defaultdict
from decimal import Decimal

import pytest

from kview.cli import main

from conftest import FIXTURES, KINETO, KINETO_TRACES, PUBLIC_TRACES, SAMPLES, nightly_for

NSYS = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
QWEN = KINETO / "traces__mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"  # AMD, with [memory] events
MEM_TORCH = FIXTURES / "memory" / "mem_torch.json.gz"


def _read(path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def check_format(doc: dict) -> list[dict]:
    """The Trace Event Format's rules, as chrome://tracing and Perfetto read them: returns the
    events after asserting each one."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    events = doc["traceEvents"]
    named_threads, named_procs = set(), set()
    for e in events:
        assert e["ph"] in {"X", "s", "f", "C", "M"}, e
        assert isinstance(e["pid"], int), e
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "thread_name"} and isinstance(e["args"]["name"], str)
            (named_threads if e["name"] == "thread_name" else named_procs).add(
                (e["pid"], e["tid"]) if e["name"] == "thread_name" else e["pid"]
            )
            continue
        assert isinstance(e["ts"], (int, Decimal)), e  # µs from the trace's start
        assert e["ph"] == "C" or e["ts"] >= 0, e  # (a counter may have a sample before the first op)
        if e["ph"] == "X":
            assert isinstance(e["name"], str) and isinstance(e["cat"], str) and isinstance(e["tid"], int)
            assert isinstance(e["dur"], (int, Decimal)) and e["dur"] >= 0, e
            assert (e["pid"], e["tid"]) in named_threads, e  # metadata comes first
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, int) for v in e["args"].values()), e
            assert e["pid"] in named_procs
        else:
            assert isinstance(e["id"], int) and e["cat"] == e["name"] == "ac2g" and isinstance(e["tid"], int)
    # flows: every id once as a start and once as a finish (bound to the enclosing slice), the
    # start inside an X event of its thread (the launch call) and not after the finish
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(Counter(e["id"] for e in events if e["ph"] == "s").values()) <= {1}
    assert set(Counter(e["id"] for e in events if e["ph"] == "f").values()) <= {1}
    assert starts.keys() == ends.keys()
    calls = defaultdict(list)  # the launch calls of each thread (they never overlap on it)
    for e in events:
        if e["ph"] == "X" and e["cat"] in ("cuda_runtime", "cuda_driver"):
            calls[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for v in calls.values():
        v.sort()
    op_starts = {(e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "X"}
    for i, s in starts.items():
        f = ends[i]
        assert f.get("bp") == "e" and s["ts"] <= f["ts"]
        on = calls[(s["pid"], s["tid"])]
        k = bisect.bisect_right(on, (s["ts"], Decimal("Infinity"))) - 1
        assert k >= 0 and on[k][0] <= s["ts"] <= on[k][1], s  # inside its launch call
        assert (f["pid"], f["tid"], f["ts"]) in op_starts, f  # at the start of its op
    return events


def _summary(path, capsys) -> list[dict]:
    assert main(["stats", str(path), "-r", "cuda_gpu_kern_sum", "-f", "json", "--no-cache"]) == 0
    return json.loads(capsys.readouterr().out)


def _plain_summary(rows: dict[str, list[int]]) -> dict[str, tuple[int, int, int, int]]:
    return {n: (len(d), sum(d), min(d), max(d)) for n, d in rows.items()}


def _of_report(report: list[dict]) -> dict[str, tuple[int, int, int, int]]:
    return {
        r["Name"]: (r["Instances"], r["Total Time (ns)"], r["Min (ns)"], r["Max (ns)"]) for r in report if r["Name"]
    }


def _nsys_kernels(t0: int, t1: int, path=NSYS) -> dict[str, list[int]]:
    """Durations by name of the kernels that overlap [t0, t1) (ns from the start: nsys's own clock)."""
    with sqlite3.connect(path) as db:
        got = db.execute(
            "SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
            "WHERE k.end > ? AND k.start < ?",
            (t0, t1),
        ).fetchall()
    out = defaultdict(list)
    for name, d in got:
        out[name].append(d)
    return out


def test_an_nsys_window_is_valid_and_reads_back_to_the_same_kernel_summary(tmp_path, capsys):
    with sqlite3.connect(NSYS) as db:
        lo, hi = db.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    t0, t1 = lo + (hi - lo) // 3, lo + 2 * (hi - lo) // 3
    out = tmp_path / "w.json"
    assert main(["export", str(NSYS), "--from", str(t0), "--to", str(t1), "-o", str(out), "--no-cache"]) == 0
    capsys.readouterr()
    events = check_format(_read(out))
    kernels = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    want = _nsys_kernels(t0, t1)
    assert len(kernels) == sum(len(v) for v in want.values()) > 100
    # ts and dur are exact µs of the source's ns (nsys counts from the session start)
    with sqlite3.connect(NSYS) as db:
        by_corr = dict(
            (
                (c, (s, e - s))
                for c, s, e in db.execute("SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL")
            )
        )
    for k in kernels:
        s, d = by_corr[k["args"]["correlation"]]
        assert (k["ts"] * 1000, k["dur"] * 1000) == (s, d)
    assert _of_report(_summary(out, capsys)) == _plain_summary(want)
    # kview's attribution rides along in the args
    assert {k["args"]["kview direction"] for k in kernels} >= {"fprop", "bprop"} or {
        k["args"]["kview direction"] for k in kernels
    } >= {"bprop", "optim"}
    assert all("kview layer" in k["args"] and "kview op" in k["args"] for k in kernels)


def test_launches_before_the_window_come_with_their_ops(tmp_path, capsys):
    """A 1 s slice of an FSDP run (nsys-ai's fixture): most ops in a window were launched before
    it; their launch calls are exported too, so every arrow starts inside its call."""
    path = next(p for p in PUBLIC_TRACES if p.name.startswith("nsysai_h100"))
    out = tmp_path / "w.json"
    assert main(["export", str(path), "--from", "155.6s", "--to", "155.9s", "-o", str(out), "--no-cache"]) == 0
    capsys.readouterr()
    events = check_format(_read(out))
    flows = [e for e in events if e["ph"] == "s"]
    assert any(e["ts"] < 155_600_000 for e in flows)  # launched before the window opens
    assert _of_report(_summary(out, capsys)) == _plain_summary(_nsys_kernels(155_600_000_000, 155_900_000_000, path))


def test_the_whole_trace_reads_back_with_its_attribution(tmp_path, capsys):
    out = tmp_path / "all.json.gz"
    assert main(["export", str(NSYS), "-o", str(out), "--no-cache"]) == 0
    capsys.readouterr()
    assert out.read_bytes()[:2] == b"\x1f\x8b"  # gzip'd for a .gz name
    check_format(_read(out))
    assert _of_report(_summary(out, capsys)) == _of_report(_summary(NSYS, capsys))
    for f in (NSYS, out):  # the kernels' direction, layer and op are the source's
        assert main(["kernels", str(f), "-f", "json", "--no-cache"]) == 0
        got = json.loads(capsys.readouterr().out)
        rows = [(r["Idx"], r["Direction"], r["Layer"], r["Op"], r["Kernel"], r["Duration (ns)"]) for r in got]
        if f == NSYS:
            want = rows
    assert rows == want


def check_names_in_number_order(events: list[dict]) -> None:
    """The names of processes and threads come in number order, so the file is the same on every
    run: GPUs then host processes by pid; streams then host threads by (pid, tid)."""
    meta = [e for e in events if e["ph"] == "M"]
    procs = [e for e in meta if e["name"] == "process_name"]
    keys = [(not e["args"]["name"].startswith("GPU "), e["pid"]) for e in procs]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    threads = [e for e in meta if e["name"] == "thread_name"]
    keys = [(not e["args"]["name"].startswith("stream "), e["pid"], e["tid"]) for e in threads]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


@pytest.mark.parametrize(
    "path",
    # the two largest torch.profiler files (MTIA, 1.4 MB of one rank) only cost time here; the
    # second PyTorch 1.x trace only in the nightly set (the oldest, of 1.8, has the shape by default)
    nightly_for(
        [
            p
            for p in [*PUBLIC_TRACES, *KINETO_TRACES]
            if not p.name.startswith("rocprof") and p.stat().st_size < 1_200_000
        ],
        {"resnet50_nw0_2021.pt.trace.json.gz"},
    ),
    ids=lambda p: p.name.split(".")[0],
)
def test_public_traces_export_and_read_back(path, tmp_path, capsys):
    """Public traces (nsys 2022.1-2026.2, torch.profiler from PyTorch 1.8 on, AMD, CPU only): a
    valid file whose kernel summary is the source's."""
    out = tmp_path / "all.json"
    assert main(["export", str(path), "-o", str(out), "--no-cache"]) == 0
    capsys.readouterr()
    check_names_in_number_order(check_format(_read(out)))
    assert _of_report(_summary(out, capsys)) == _of_report(_summary(path, capsys))


def test_events_written_in_chunks_are_the_same_file(tmp_path):
    """The writer joins a chunk of rows at a time: any chunk size gives the same bytes."""
    import io

    from kview.analysis import chrome_trace
    from kview.output import chrome_json
    from kview.trace import open_trace

    trace = open_trace(NSYS, use_cache=False)
    export = chrome_trace.build(trace, chrome_trace.Window(None, 40_000_000))
    whole, chunked = io.BytesIO(), io.BytesIO()
    chrome_json.write(export, whole, {}, compress=False)
    chrome_json.write(export, chunked, {}, compress=False, chunk=97)
    assert whole.getvalue() == chunked.getvalue()
    events = check_format(json.loads(whole.getvalue(), parse_float=Decimal))
    assert len(events) == export.events > 97 * 3


def test_a_filter_keeps_the_ops_it_matches_and_their_launches(tmp_path, capsys):
    out = tmp_path / "bprop.json"
    assert main(["export", str(NSYS), "--filter", "dir:bprop gemm", "-o", str(out), "--no-cache"]) == 0
    capsys.readouterr()
    events = check_format(_read(out))
    assert main(["kernels", str(NSYS), "--filter", "dir:bprop gemm", "-f", "json", "--no-cache"]) == 0
    want = sorted(r["Idx"] for r in json.loads(capsys.readouterr().out))
    gpu = [e for e in events if e["ph"] == "X" and e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert sorted(e["args"]["kview idx"] for e in gpu) == want and len(want) > 10
    launches = [e for e in events if e["ph"] == "X" and e["cat"] in ("cuda_runtime", "cuda_driver")]
    assert sorted(e["args"]["correlation"] for e in launches) == sorted(e["args"]["correlation"] for e in gpu)


READ = {"kernel", "cuda_runtime", "cuda_driver", "gpu_memcpy", "gpu_memset", "cpu_op", "user_annotation"}


def _origin(events) -> Decimal:
    """The trace's start: its earliest event of the kinds kview reads (ops, API calls, ranges,
    module calls), in µs."""
    return min(
        Decimal(e["ts"])
        for e in events
        if e.get("ph") == "X"
        and (e.get("cat") in READ or (e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")))
    )


def _kineto_kernels(path, t0: int, t1: int) -> dict[str, list[int]]:
    """Durations (ns) by name of the kernel events overlapping [t0, t1) ns from the trace's start."""
    ev = _read(path)["traceEvents"]
    timed = [e for e in ev if e.get("ph") == "X" and "ts" in e]
    origin = int(_origin(ev) * 1000)
    out = defaultdict(list)
    for e in timed:
        if e.get("cat") != "kernel":
            continue
        s = int(Decimal(e["ts"]) * 1000) - origin
        d = int(Decimal(e["dur"]) * 1000)
        if s + d > t0 and s < t1:
            out[e["name"]].append(d)
    return out


@pytest.mark.parametrize("path", [QWEN, MEM_TORCH], ids=["public-mi300", "captured-h200"])
def test_a_torch_profiler_window_with_memory_counters(path, tmp_path, capsys):
    t0, t1 = 5_000_000, 25_000_000  # 5 ms .. 25 ms from the trace's start
    out = tmp_path / "w.json.gz"
    assert main(["export", str(path), "--from", "5ms", "--to", "25ms", "-o", str(out), "--no-cache"]) == 0
    capsys.readouterr()
    doc = _read(out)
    events = check_format(doc)
    assert _of_report(_summary(out, capsys)) == _plain_summary(_kineto_kernels(path, t0, t1))
    # the memory counter: Total Allocated of the device's [memory] events in the window
    src = _read(path)["traceEvents"]
    mem = [
        e for e in src if e.get("name") == "[memory]" and e["args"]["Device Type"] != 0 and e["args"]["Device Id"] == 0
    ]
    origin = _origin(src)
    inside = sorted((e for e in mem if t0 < (Decimal(e["ts"]) - origin) * 1000 < t1), key=lambda e: Decimal(e["ts"]))
    counters = [e for e in events if e["ph"] == "C" and e["name"] == "memory" and e["pid"] == 0]
    assert len(inside) > 10
    assert max(c["args"]["allocated"] for c in counters) == max(e["args"]["Total Allocated"] for e in inside)
    assert max(c["args"]["reserved"] for c in counters) == max(e["args"]["Total Reserved"] for e in inside)
    assert "[memory] events" in doc["otherData"]["memory counters from"]
    queue = [e for e in events if e["ph"] == "C" and e["name"] == "queue length"]
    assert queue and min(c["args"]["queued"] for c in queue) >= 0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "give -o FILE.json"),
        (["--filter", "(?=x)", "-o", "x.json"], "--filter"),
        (["--from", "2ms", "--to", "1ms", "-o", "x.json"], "the window is empty"),
        (["-o", "exists.json"], "exists"),
    ],
)
def test_bad_export_lines_are_one_line_and_exit_2(args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exists.json").write_text("{}")
    assert main(["export", str(NSYS), *args, "--no-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.json"]
    assert (tmp_path / "exists.json").read_text() == "{}"


async def test_E_on_the_timeline_exports_the_shown_window(tmp_path, monkeypatch, capsys):
    from test_tui import loaded

    from kview.tui.app import KviewApp

    monkeypatch.chdir(tmp_path)
    app = KviewApp([str(NSYS)], use_cache=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        await pilot.press("6")
        await pilot.pause()
        view = app.view("timeline")
        for _ in range(50):
            if view.canvas is not None:
                break
            await pilot.pause(0.05)
        lo, hi = view.t0, view.t1
        view.set_view(lo + (hi - lo) // 4, lo + (hi - lo) // 2)
        t0, t1 = view.t0, view.t1
        await pilot.press("E")
        await pilot.pause()
        await app.workers.wait_for_complete()
    (out,) = tmp_path.glob("*.json.gz")
    assert out.name.startswith("lm-small_ctx256_train_nsys_window_")
    check_format(_read(out))
    assert _of_report(_summary(out, capsys)) == _plain_summary(_nsys_kernels(t0, t1))
