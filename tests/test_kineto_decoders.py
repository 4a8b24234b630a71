"""The optional fast JSON decoder (msgspec, `pip install 'kview[fast]'`) reads torch.profiler
traces into the very frames the standard library's decoder reads (the plain install's), and
the column-at-a-time input sizes equal the per-event `_sizes` on any nested value."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kview.errors import TraceError
from kview.io import kineto_reader as kr

from conftest import KINETO, SAMPLES

msgspec = pytest.importorskip("msgspec")

# every era and vendor (legacy bare array, capitalised categories, AMD, B200, CPU only, modules,
# CUDA graphs, memory instants), small enough to decode twice per run
TRACES = [
    KINETO / "resnet50_plugin_oldest.pt.trace.json.gz",
    KINETO / "resnet50_nw0_2021.pt.trace.json.gz",
    KINETO / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    KINETO / "traces__b200__eager_trace.json.gz",
    KINETO / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    KINETO / "call_stack__backward_thread.json",
    KINETO / "traces__inference__vllm_decode_full__graph_execution.json.gz",
    KINETO / "trace_filter__sampled_rank-0.json.gz",
    SAMPLES / "lm-small_ctx256_train_torch.json.gz",
]


def _frames(path: Path, fast: bool, monkeypatch) -> dict[str, pl.DataFrame] | str:
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(kr, "_fast_decoder", lambda: None)
        text = kr._text(path)
        used = kr.FastEvents.of(path, text, *kr.events_start(path, text)) is not None
        assert used == fast
        try:
            frames = kr.KinetoSource(path, use_cache=False).frames
        except TraceError as e:
            return str(e)
    # a frame's categorical text has categories of its own: compared as text
    return {k: f.with_columns(pl.col(pl.Categorical).cast(pl.String)) for k, f in frames.items()}


def _same(fast, std) -> None:
    assert type(fast) is type(std)
    if isinstance(fast, str):
        assert fast == std
        return
    assert fast.keys() == std.keys()
    for k in fast:
        assert fast[k].schema == std[k].schema, k
        assert fast[k].equals(std[k]), k


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split(".")[0][:40])
def test_fast_and_standard_decoders_read_the_same_frames(path, monkeypatch):
    fast, std = _frames(path, True, monkeypatch), _frames(path, False, monkeypatch)
    _same(fast, std)
    assert isinstance(fast, dict) and fast["nvtx_events"].height > 0


@pytest.mark.parametrize("piece", [1, kr.DECODE_BYTES])
def test_odd_events_read_alike_by_both_decoders(piece, tmp_path, monkeypatch):
    """Events the fast decoder cannot type (not objects, args not an object) go one by one
    through the standard decoder; odd values (quoted and out-of-range ids, null names, floats,
    -0 and deep nesting in input dims, spacing Kineto never writes) and categories in phases the
    decoder's types by category do not take (a flow's complete event, a kernel's instant, a
    metadata event with a category) read as the standard path reads them, each its own piece or
    all in one."""
    monkeypatch.setattr(kr, "DECODE_BYTES", piece)
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 1}
    events = [
        7,
        [1, 2],
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25, "args": [1]},
        {"ph": "X", "cat": "Kernel", "name": None, "pid": "0", "tid": "stream 7", "ts": 11, "args": {"device": None}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2**70, "ts": 9, "dur": 1},
        {"ph": "X", "cat": None, "name": "x", "pid": 1, "tid": 1, "ts": 9},
        {"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": None, "ts": 4, "dur": 9},
        {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 1, "tid": 1, "ts": 5, "dur": 2},
        {**op, "args": {"Input Dims": [[4, 256], [], [1.5], [-0], True]}},
        {**op, "args": {"Input Dims": [[[[[[[[[[1]]]]]]]]]], "Sequence number": -1, "External id": "9"}},
        {**op, "args": {"Input dims": [[2, 3]], "Sequence number": 4}},
        {**op, "args": {"Input Dims": None, "Input dims": [[2]]}},
        {**op, "cat": "Operator", "name": "ProfilerStep#1", "args": {"Input Dims": [[], []]}},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "X", "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 3, "dur": 1},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "x", "ts": 1, "dur": 9},
        {"ph": "i", "cat": "kernel", "name": "[memory]", "pid": 1, "tid": 1, "ts": 6, "args": {"Bytes": 512}},
        {"ph": "M", "cat": "Trace", "name": "process_name", "pid": 3, "args": {"name": "trainer"}},
        {"ph": "X", "cat": "kernel", "name": "no time", "pid": 0, "tid": 7, "dur": 1},
        {"cat": "gpu_memset", "name": "no phase", "pid": 0, "tid": 7, "ts": 1},
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaMemcpyAsync",
            "pid": 3,
            "tid": 4,
            "ts": 12,
            "args": {"correlation": 5},
        },
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 13, "args": {"correlation": 5}},
    ]
    text = json.dumps({"traceEvents": events}).replace('"Input Dims": [[2, 3]]', '"Input Dims":[[2,3 ]]')
    p = tmp_path / "odd.json"
    p.write_text(text)
    fast, std = _frames(p, True, monkeypatch), _frames(p, False, monkeypatch)
    _same(fast, std)
    texts = std["nvtx_events"]["text"].to_list()
    assert "aten::mm, sizes = [[4, 256], [], [[]], [0], []]" in texts
    assert "aten::mm, op_id = 9, sizes = [[[[[[[[[...]]]]]]]]]" in texts
    assert "Linear_0" in texts and "ProfilerStep#1" in texts


@pytest.mark.parametrize("times", ["plain", "odd"])
def test_common_events_with_odd_fields_read_alike(times, tmp_path, monkeypatch):
    """CPU ops, launches and kernels (read first, by their type) with a quoted or out-of-range
    thread or no timestamp, and times in every form JSON allows (the fast decoder keeps them as
    text), read as the standard path reads them."""
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 1}
    run = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 6, "dur": 1}
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 7, "dur": 1}
    events = [op, {**op, "tid": "2"}, {**op, "tid": 2**63}, {k: v for k, v in op.items() if k != "ts"}]
    events += [run, {k: v for k, v in run.items() if k != "ts"}, kernel, {k: v for k, v in kernel.items() if k != "ts"}]
    if times == "odd":  # each in a part of its own: one odd time sends its part the slow way
        events += [{**op, "ts": t} for t in ("5.5", -0.0, 1e3, 4455527905241.3295, None)]
        events += [{**kernel, "dur": d} for d in (None, "2", 2.5e-3)]
    p = tmp_path / "odd_common.json"
    p.write_text(json.dumps({"traceEvents": events}).replace("-0.0", "-0"))
    fast, std = _frames(p, True, monkeypatch), _frames(p, False, monkeypatch)
    _same(fast, std)
    assert isinstance(fast, dict)
    if times == "odd":
        return
    assert fast["nvtx_events"]["global_tid"].n_unique() == 2 and fast["nvtx_events"].height == 2
    assert fast["runtime"].height == 1 and fast["kernels"].height == 1
    assert dict(fast["_meta"].iter_rows())["KINETO_EVENTS_NOT_READ"] == "cpu_op (1)"


def _piece_trace(n: int) -> list:
    """n events of every table, a kernel's name (the 16th) holding the text of a cut between events."""
    events: list = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    for i in range(n):
        ts, corr = 1000.125 + 10 * i, 100 + i
        name = 'k},{"x": 1}' if i == 15 else "k"
        run, at = {"ph": "X", "pid": 1, "tid": 2, "ts": ts}, {"ph": "X", "pid": 0, "tid": 7, "ts": ts + 2}
        events += [
            {**run, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 1, "args": {"correlation": corr}},
            {**at, "cat": "kernel", "name": name, "dur": 3.5, "args": {"correlation": corr, "grid": [i, 1, 1]}},
            {**run, "cat": "cpu_op", "name": "aten::mm", "dur": 4, "args": {"Input Dims": [[i, 2], []]}},
            {"ph": "f", "id": i, "pid": 1, "tid": 2, "ts": ts, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        ]
    return events


# what each trace tests: a cut inside a string (name), an event msgspec cannot type (args a
# list), JSON only the standard decoder reads (NaN, a trailing comma) or none reads, late in the list
PIECE_DAMAGE = {
    "cuts": lambda ev: ev,
    "untyped": lambda ev: ev[:31] + [{**ev[31], "args": [1]}] + ev[32:],
    "nan": lambda ev: ev[:40] + [{**ev[40], "dur": float("nan")}] + ev[41:],
}


@pytest.mark.parametrize("damage", [*PIECE_DAMAGE, "trailing_comma", "invalid", "bare", "bare_unclosed"])
@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "indented"])
@pytest.mark.parametrize("piece", [1, 300])
def test_events_decoded_in_pieces_read_alike_by_both_decoders(damage, indent, piece, tmp_path, monkeypatch):
    """The fast decoder cuts the events list into pieces (DECODE_BYTES, made small here: every
    event its own piece, or a few); a cut that is not between two events (`},{` in a name) and
    the events of a piece it cannot type or read are read as the standard path reads them."""
    monkeypatch.setattr(kr, "DECODE_BYTES", piece)
    events = PIECE_DAMAGE.get(damage, lambda ev: ev)(_piece_trace(20))
    if damage.startswith("bare"):
        text = json.dumps(events, indent=indent)
        text = text[: text.rindex("]")] if damage == "bare_unclosed" else text
    else:
        text = json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "t", "x": [{}, {}]}, indent=indent)
    if damage == "trailing_comma":
        at = text.rindex("]", 0, text.index('"traceName"'))
        text = text[:at].rstrip() + ",\n" + text[at:]
    if damage == "invalid":
        at = text.index('"ac2g"', len(text) // 2)
        text = text[:at] + "{" + text[at:]
    p = tmp_path / "pieces.json"
    p.write_text(text)
    fast, std = _frames(p, True, monkeypatch), _frames(p, False, monkeypatch)
    _same(fast, std)
    if damage == "invalid":
        assert isinstance(fast, str) and "is not valid trace JSON" in fast
        return
    assert isinstance(fast, dict)
    assert fast["kernels"].height == 20 and fast["nvtx_events"].height == 20
    assert fast["kernels"]["grid_x"].to_list() == list(range(20))


@pytest.mark.parametrize("where", ["after", "in_an_event"])
@pytest.mark.parametrize("piece", [1, 300, kr.DECODE_BYTES])
def test_events_list_named_again(where, piece, tmp_path, monkeypatch):
    """A second `"traceEvents"` (a key after the list, where msgspec would keep the last; a name
    in an event) leaves the events the standard path reads: those of the first list."""
    monkeypatch.setattr(kr, "DECODE_BYTES", piece)
    events = _piece_trace(20)
    if where == "after":
        text = (
            json.dumps({"traceEvents": events, "traceName": "t"})[:-1]
            + ', "traceEvents": ['
            + json.dumps(events[1])
            + "]}"
        )
    else:
        events[-3] = {**events[-3], "name": "traceEvents"}
        text = json.dumps({"traceEvents": events, "traceName": "t"})
    p = tmp_path / "again.json"
    p.write_text(text)
    fast, std = _frames(p, True, monkeypatch), _frames(p, False, monkeypatch)
    _same(fast, std)
    assert isinstance(fast, dict) and fast["kernels"].height == 20 and fast["nvtx_events"].height == 20


@pytest.mark.parametrize("letter", ["x", "\u00fc"], ids=["ascii", "utf8"])
def test_header_values_past_the_first_window_and_after_the_events(letter, tmp_path, monkeypatch):
    """A header value longer than the window first decoded (HEADER_WINDOW) is read whole, a key
    written after the events is found, in an ASCII trace (read as bytes) and a UTF-8 one (str)."""
    devices = [
        {"id": i, "name": f"GPU {i} " + letter * 300, "totalGlobalMem": 150109880320 + i, "numSms": 132}
        for i in range(300)
    ]
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25}
    doc = {"deviceProperties": devices, "traceEvents": [kernel], "baseTimeNanoseconds": 1790857026000000001}
    assert len(json.dumps(devices)) > kr.HEADER_WINDOW
    p = tmp_path / "header.json"
    p.write_text(json.dumps(doc, indent=1, ensure_ascii=False), encoding="utf-8")
    fast, std = _frames(p, True, monkeypatch), _frames(p, False, monkeypatch)
    _same(fast, std)
    assert isinstance(fast, dict)
    assert fast["devices"]["totalMemory"].to_list() == [d["totalGlobalMem"] for d in devices]
    assert fast["devices"]["name"].to_list() == [d["name"] for d in devices]
    assert dict(fast["_meta"].iter_rows())["KINETO_BASE_TIME_NS"] == str(doc["baseTimeNanoseconds"])


def test_header_keys_are_not_read_from_the_events(tmp_path, monkeypatch):
    """A header key is read before the events list or at the text's end (TAIL_CHARS), where a
    trace writes what follows the list, never from an event that happens to hold one."""
    monkeypatch.setattr(kr, "TAIL_CHARS", 400)
    events = _piece_trace(20)
    events[5] = {**events[5], "args": {**events[5].get("args", {}), "distributedInfo": {"rank": 7, "world_size": 8}}}
    doc = {"traceEvents": events, "traceName": "t", "baseTimeNanoseconds": 1790857026000000001}
    p = tmp_path / "keys.json"
    p.write_text(json.dumps(doc))
    assert len(json.dumps(events[6:])) > kr.TAIL_CHARS
    fast, std = _frames(p, True, monkeypatch), _frames(p, False, monkeypatch)
    _same(fast, std)
    assert isinstance(fast, dict)
    meta = dict(fast["_meta"].iter_rows())
    assert "DIST_RANK" not in meta and meta["KINETO_BASE_TIME_NS"] == "1790857026000000001"


nested = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(dims=st.lists(nested, max_size=6))
def test_sizes_of_a_column_equal_sizes_of_each_value(dims):
    """The same text whether the dims arrive as decoded values or as the fast decoder's JSON
    (compact or spaced as Kineto writes it)."""
    decoded = [json.loads(json.dumps(d), parse_float=str) for d in dims]
    want = [None if d is None else kr._sizes(d) for d in decoded]  # null dims: no sizes at all
    assert kr._sizes_texts(decoded).to_list() == want
    for sep in (",", ", "):
        raw = msgspec.json.decode(
            "[" + ",".join(json.dumps(d, separators=(sep, ":")) for d in dims) + "]", type=list[msgspec.Raw]
        )
        assert kr._sizes_texts(raw).to_list() == want


@pytest.mark.parametrize("depth", [kr.SIZES_DEPTH, kr.SIZES_DEPTH + 1, 2 * kr.SIZES_DEPTH])
def test_sizes_of_a_deep_list_among_plain_ones(depth):
    """A list nested `depth` deep among lists in PyTorch's form (the joined text's checks pass
    but its depth's): as _sizes writes it, `[...]` past SIZES_DEPTH, the others as they are."""
    deep: list = [7]
    for _ in range(depth - 1):
        deep = [deep]
    dims = [[[4, 256], [256]], deep, None, [[-1, 3], []]]
    raw = msgspec.json.decode(json.dumps(dims), type=list[msgspec.Raw])
    got = kr._sizes_texts(raw).to_list()
    assert got == [None if d is None else kr._sizes(d) for d in dims]
    assert ("[...]" in got[1]) == (depth > kr.SIZES_DEPTH)
