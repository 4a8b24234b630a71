"""One clock per run: every view counts from the trace's zero, and the files of one run share the
run's clock. Checked against what the files record, read with sqlite3 and json (issue 25, item 1)."""

from __future__ import annotations

import gzip
import io
import json
import lzma
import sqlite3
from decimal import Decimal

import numpy as np
import polars as pl
import pytest

from kview.analysis import timeline as T
from kview.analysis.attribution import attribute
from kview.analysis.filters import apply
from kview.analysis.overview import build as overview
from kview.analysis.ranks import make_run
from kview.analysis.run_clock import run_clock
from kview.cli import main
from kview.trace import open_trace

from conftest import KINETO, ROOT, kineto_events

CAPTURE = ROOT / "tests" / "fixtures" / "capture"
B200 = KINETO / "traces__b200__eager_trace.json.gz"
MS = 1_000_000


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """The capture fixtures this file opens, decompressed once."""
    d = tmp_path_factory.mktemp("clock")
    for name in ("ddp_nsys.rank0", "ddp_nsys.rank1", "ddp_torch.rank0", "ddp_torch.rank1", "llama_torch"):
        (d / f"{name}.sqlite").write_bytes(lzma.decompress((CAPTURE / f"{name}.sqlite.xz").read_bytes()))
    return d


def _query(path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _allreduce_ends_on_timeline(tl: T.Timeline, collective: str = "AllReduce") -> dict[int, list[int]]:
    """Per file of the run: the ends of its AllReduce kernels where the timeline draws them."""
    ends: dict[int, list[int]] = {}
    for r in tl.rows:
        if r.kind != "gpu":
            continue
        names = tl.names[r.names_key]
        for i in range(len(r)):
            if collective in names[int(r.code[i])]:
                ends.setdefault(r.trace, []).append(r.when(i)[1])
    return {k: sorted(v) for k, v in ends.items()}


def _run_timeline(traces):
    run = make_run(traces)
    clock = run_clock(traces)
    return T.of_run([T.build(t, cpu=False) for t in traces], run.units, [t.name for t in traces], clock), clock


def test_the_ddp_rank_exports_share_the_session_clock(unpacked):
    """Two `nsys profile` sessions, one per rank, started 92 ms apart: shifted by the UTC time of
    each session's start, the AllReduce kernels of both ranks end together."""
    files = [unpacked / f"ddp_nsys.rank{r}.sqlite" for r in (0, 1)]
    utc = [_query(f, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0] for f in files]
    plain = [
        sorted(
            e + u - min(utc)
            for (e,) in _query(
                f,
                "SELECT k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
                "WHERE s.value LIKE '%AllReduce%'",
            )
        )
        for f, u in zip(files, utc)
    ]
    tl, clock = _run_timeline([open_trace(f, use_cache=False) for f in files])
    assert clock.note == "" and clock.offsets == (0, utc[1] - utc[0])
    drawn = _allreduce_ends_on_timeline(tl)
    assert drawn == {0: plain[0], 1: plain[1]} and len(plain[0]) == len(plain[1]) == 6
    assert max(abs(a - b) for a, b in zip(*plain)) <= 10_000  # 10 µs
    # without the session clock, rank 1 would be drawn 92 ms early
    assert utc[1] - utc[0] > 90 * MS


def test_the_torch_rank_traces_share_the_profiler_clock(unpacked):
    """The torch backend's rank files (and the raw torch.profiler JSON of each rank) read one
    host's clock: their AllReduce ends line up, and each file still counts from its own zero."""
    files = [unpacked / f"ddp_torch.rank{r}.sqlite" for r in (0, 1)]
    traces = [open_trace(f, use_cache=False) for f in files]
    tl, clock = _run_timeline(traces)
    assert clock.note == ""
    drawn = _allreduce_ends_on_timeline(tl)
    assert len(drawn[0]) == len(drawn[1]) > 0
    assert max(abs(a - b) for a, b in zip(drawn[0], drawn[1])) <= 10_000
    # the raw profiler clock: each file's first event, read plainly, is its zero
    for f, t in zip(files, traces):
        first = min(
            v
            for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
            for (v,) in _query(f, f"SELECT min(start) FROM {table}")
            if v is not None
        )
        assert t.origin == first
    assert clock.offsets[1] == traces[1].origin - traces[0].origin
    jsons = [CAPTURE / f"ddp_torch.rank{r}.json.gz" for r in (0, 1)]
    bases = {json.load(gzip.open(j))["baseTimeNanoseconds"] for j in jsons}
    assert len(bases) == 1  # one host: one base, one clock
    jtl, jclock = _run_timeline([open_trace(j, use_cache=False) for j in jsons])
    assert jclock.note == ""
    jdrawn = _allreduce_ends_on_timeline(jtl)
    assert max(abs(a - b) for a, b in zip(jdrawn[0], jdrawn[1])) <= 10_000


def test_files_without_a_common_clock_are_lined_up_on_their_first_collective_and_say_so(unpacked, capsys):
    """An nsys export (UTC) and a torch.profiler trace (the profiler's clock) share no clock:
    kview lines them up on their first collective's end and says so in the header."""
    files = [unpacked / "ddp_nsys.rank0.sqlite", CAPTURE / "ddp_torch.rank1.json.gz"]
    tl, clock = _run_timeline([open_trace(f, use_cache=False) for f in files])
    assert "share no clock" in clock.note and "first broadcast collective" in clock.note
    drawn = _allreduce_ends_on_timeline(tl, "Broadcast")  # the first collective both files hold
    assert drawn[0][0] == drawn[1][0] and clock.offsets[0] == 0
    assert main(["timeline", *map(str, files), "--width", "80", "--rows", "gpu", "--no-cache"]) == 0
    out = capsys.readouterr()
    head = " ".join(line for line in out.out.splitlines()[:6] if "│" not in line)
    assert clock.note in head and clock.note in out.err  # in the header (wrapped), and on stderr


def test_b200_filters_count_from_the_trace_start_as_the_timeline_does():
    """torch.profiler JSON: Kernels' Start and `start<10ms` count from the trace's first event,
    and select exactly the GPU ops the Timeline draws in its first 10 ms."""
    trace = open_trace(B200, use_cache=False)
    first = min(int(Decimal(str(e["ts"])) * 1000) for e in kineto_events(B200) if e.get("ph") == "X")
    assert trace.origin == first
    table = attribute(trace)
    picked = set(apply(table, "start<10ms")["Idx"].to_list())
    tl = T.build(trace, cpu=False)
    drawn = {int(i) for r in tl.rows if r.ident is not None for i in r.ident[r.start < 10 * MS]}
    assert picked == drawn and 0 < len(picked) < table.height
    # the kernels' starts, read plainly from the JSON and counted from its first event
    kernels = sorted(
        int(Decimal(str(e["ts"])) * 1000) - first for e in kineto_events(B200, ("kernel",)) if e.get("ph") == "X"
    )
    mine = table.filter(pl.col("Kernel").str.starts_with("[CUDA").not_())["Start (ns)"].sort().to_list()
    assert mine == kernels


def test_torch_backend_captures_show_no_absolute_times(unpacked, capsys):
    """A `kview capture --backend torch` trace stores the profiler's clock readings; every view
    counts from its first event, as the nsys backend's trace counts from its session start."""
    f = unpacked / "llama_torch.sqlite"
    trace = open_trace(f, use_cache=False)
    ((lo, hi),) = _query(f, "SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    length = hi - trace.origin
    assert trace.origin > 10**15  # absolute readings in the file
    starts = attribute(trace)["Start (ns)"]
    assert starts.min() == lo - trace.origin and starts.max() < length
    gaps = overview(trace).gaps
    assert gaps.height and gaps["From (ns)"].max() < length
    assert (
        main(["timeline", str(f), "--from", "20ms", "--to", "40ms", "--width", "80", "--rows", "gpu", "--no-cache"])
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("llama_torch.sqlite · 20 ms .. 40 ms")
    cells = [line.split("│", 1)[1] for line in out[3:] if "│" in line]
    assert any(c.strip() for c in cells)  # GPU work drawn 20-40 ms into the trace
    tl = T.build(trace, cpu=False)
    assert 0 <= tl.span[0] < tl.span[1] == max(int(r.end.max()) for r in tl.rows if len(r)) <= length
    assert np.all(np.concatenate([r.start for r in tl.rows]) >= 0)


def test_absolute_time_is_a_column_for_whoever_needs_it(unpacked, capsys):
    """`kview kernels --absolute`: beside Start (ns) from the trace's zero, each op's start on the
    clock the file records: UTC for an nsys export (the session's utcEpochNs plus Start), the
    profiler's own microseconds, in ns, for a torch.profiler trace."""
    f = unpacked / "ddp_nsys.rank0.sqlite"
    assert main(["kernels", str(f), "--absolute", "-f", "csv", "--no-cache"]) == 0
    k = pl.read_csv(io.StringIO(capsys.readouterr().out))
    utc = _query(f, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]
    assert k.height > 0 and ((k["Start (UTC, ns)"] - k["Start (ns)"]) == utc).all()
    assert main(["kernels", str(B200), "--absolute", "-f", "csv", "--no-cache"]) == 0
    k = pl.read_csv(io.StringIO(capsys.readouterr().out))
    recorded = sorted(
        int((Decimal(str(e["ts"])) * 1000).to_integral_value())
        for e in kineto_events(B200, ("kernel", "gpu_memcpy", "gpu_memset"))
        if e.get("ph") == "X"
    )
    assert sorted(k["Start (as recorded, ns)"].to_list()) == recorded
