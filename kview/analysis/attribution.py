"""Per-kernel attribution: direction, layer, op, shapes, category, FLOPs, for every GPU op.

Forward work is explained by what encloses its launch call on the launching thread: the user
NVTX ranges (the layer path) and PyTorch's op markers (emit_nvtx ranges, or the CPU ops of a
kview torch capture written in the same text form). Backward work runs on the autograd thread,
inside a node range `XBackward0, seq = N`; it is matched to the forward op that created the
node (the op marker carrying the same `seq = N`, the latest one that started before the node),
and takes that op's layer, op and shapes. Everything is joins over integer keys; names are
parsed once per distinct label.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np
import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.categories import name_categories
from kview.derived import derived
from kview.errors import TraceError
from kview.io.schema import PID_MASK
from kview.io.sqlite_source import read_threads, return_freed_memory
from kview.trace import Trace

PHASE_NAMES = ("warmup", "profiled_step", "forward_pass", "backward_pass", "optimizer_step")
# step ranges: phases, never part of a layer (`kview capture -- COMMAND`'s step_N, torch.profiler's ProfilerStep#N)
STEP_RANGE_RE = r"^step_\d+$|^ProfilerStep#\d+$"
COLUMNS = [
    "Idx",
    "Direction",
    "Layer",
    "Op",
    "Params",
    "Kernel",
    "Category",
    "Duration (ns)",
    "Start (ns)",
    "Stream",
    "Device",
    "Grid",
    "Block",
    "Correlation",
    "NVTX Path",
    "TC",
    "FLOPs",
    "Bytes",
    "TFLOP/s",
]

_INT = ("Idx", "Duration (ns)", "Start (ns)", "Stream", "Device", "Correlation", "FLOPs", "Bytes", "_grid", "_block")
SCHEMA = {
    **{c: pl.Int64 if c in _INT else pl.Float64 if c == "TFLOP/s" else pl.String for c in COLUMNS},
    "TC": pl.Boolean,
    "_grid": pl.Int64,
    "_block": pl.Int64,
}

# aten names that read differently in user code (F.cross_entropy -> aten::cross_entropy_loss)
OP_ALIASES = {
    "cross_entropy_loss": "cross_entropy",
    "_softmax": "softmax",
    "_log_softmax": "log_softmax",
    "native_layer_norm": "layer_norm",
    "native_dropout": "dropout",
    "_scaled_dot_product_flash_attention": "scaled_dot_product_attention",
    "_scaled_dot_product_efficient_attention": "scaled_dot_product_attention",
}
OP_CATEGORIES = {
    "embedding/index": [
        "embedding",
        "embedding_bag",
        "index",
        "index_select",
        "gather",
        "scatter",
        "index_put_",
        "take",
    ],
    "normalization": ["layer_norm", "batch_norm", "group_norm", "rms_norm", "instance_norm"],
    "softmax": ["softmax", "log_softmax"],
}


def _is_phase(label: pl.Expr) -> pl.Expr:
    return label.is_in(list(PHASE_NAMES)) | label.str.contains(STEP_RANGE_RE)


def op_labels(trace: Trace, heads: bool = True) -> pl.DataFrame:
    """Per distinct range label: what kind of range it is and its autograd `seq` (made where
    attribution needs them, not kept), and with `heads` its `head`, the text before its first
    comma, as a Categorical. Each kind but `seq` is a test of the head alone (the op's name), so the tests
    run on the few hundred distinct heads, not on millions of op labels, and no column of op
    names is built but the heads' codes: `op_fields` parses the few labels kernels end up with."""
    return _flagged(nv.labels(trace), heads)


def _flagged(labels: pl.DataFrame, heads: bool = True) -> pl.DataFrame:
    """op_labels' columns added to labels (name_code, label, marker); `head` only with `heads`."""
    lab = pl.col("label")
    comma = lab.str.find(",", literal=True)  # a byte offset: the head is cut from the bytes
    head = lab.cast(pl.Binary).bin.head(comma.fill_null(_WHOLE)).cast(pl.String).cast(pl.Categorical)
    # by the streaming engine, a morsel of labels at a time on every core: in one select of the
    # whole frame the heads cut from all labels at once were this step's peak over the names on
    # a dense trace, and a quarter million labels at a time kept it to two threads (one a column:
    # 1.15 s of wall on 16 cores for 5.6M labels). Only the new columns are made: the labels'
    # own stay as they are. `seq` is made apart (`_seqs`), in one chunk, as _Kinds reads it
    new = labels.lazy().select(head.alias("head")).collect(engine="streaming")
    kinds = _head_kinds(new["head"])
    new = new.insert_column(0, _seqs(labels["label"]))
    return (
        labels.hstack(new if heads else new.drop("head"))
        .hstack(kinds.drop("_op"))
        .with_columns((pl.col("marker") & kinds["_op"]).alias("fwd_op"))
    )


def _seqs(label: pl.Series) -> pl.Series:
    """Each label's autograd seq (`, seq = N`; null where it has none): the regex read only
    where a literal search finds its text (a quarter of dense_x25's 5.6M labels), not over every
    label (0.65 -> 0.45 CPU s). Filtered, not gathered: a gather across the labels' chunks (a
    cache file's row groups) would copy their text."""
    has = label.str.contains(", seq = ", literal=True)
    rows = has.arg_true()
    seq = pl.repeat(None, label.len(), dtype=pl.Int64, eager=True).alias("seq")
    if rows.len() == 0:
        return seq
    return seq.scatter(rows, label.filter(has).str.extract(r", seq = (\d+)", 1).cast(pl.Int64))


_WHOLE = (1 << 32) - 1  # bytes of a label without a comma taken as its head: all of them


def _head_kinds(heads: pl.Series) -> pl.DataFrame:
    """Per label, from its head (a Categorical): bwd_node, bwd_eval, optim_marker and `_op`,
    whether a marker with this head is a forward op, each as its anchored match on the whole
    label would find it (none reads past the first comma); tested once per distinct head and
    gathered by the heads' codes."""
    text = pl.col("head")
    distinct = heads.unique().drop_nulls()
    kinds = (
        distinct.cast(pl.String)
        .to_frame("head")
        .select(
            text.str.contains(r"^[^,]*Backward\d*(,|$)").alias("bwd_node"),
            text.str.starts_with("autograd::engine::evaluate_function").alias("bwd_eval"),
            text.str.contains(r"^Optimizer\.(step|zero_grad)#").alias("optim_marker"),
            (~text.str.starts_with("autograd::") & text.str.contains(r"^[\w:.<>]+(,|$)")).alias("_name"),
        )
        .with_columns(
            (~pl.col("bwd_node") & ~pl.col("bwd_eval") & ~pl.col("optim_marker") & pl.col("_name")).alias("_op")
        )
    )
    names = ("bwd_node", "bwd_eval", "optim_marker", "_op")
    # each head code's four answers as bits: one numpy gather of a byte per label, not four
    # polars gathers of a Boolean column (0.15 of 0.23 CPU s over a dense trace's 5.6M labels)
    codes = distinct.to_physical().cast(pl.Int64).to_numpy()
    bits = np.zeros(int(codes.max(initial=-1)) + 1, dtype=np.uint8)
    for bit, c in enumerate(names):
        bits[codes] |= kinds[c].to_numpy().astype(np.uint8) << bit
    # gathered and tested by polars, a bit a label out: numpy's gather and tests held a byte a
    # label per step and a copy of the codes, at the highest point of a command that lets the
    # names go (the Overview); a null head gathers null, so its answers are null
    got = (
        pl.Series("bits", bits).gather(heads.to_physical())
        if len(bits)
        else pl.repeat(None, heads.len(), dtype=pl.UInt8, eager=True)
    )
    return got.to_frame("bits").select(((pl.col("bits") & (1 << bit)) != 0).alias(c) for bit, c in enumerate(names))


def op_fields(labels: pl.DataFrame, sizes: bool = True) -> pl.DataFrame:
    """(name_code, op, sizes) of op labels: the op's name without `aten::` (aliases applied) and
    the input shapes text; (name_code, head), the label's text before its first comma that the
    op is named from, without `sizes`."""
    lab = pl.col("label")
    # Where a byte offset is a character offset (ASCII) and the regex's `.` matches every
    # character (no line break), literal finds give the regexes' text for half the CPU: the op
    # ends at the first comma; the shapes start at the first ", sizes = [" (no later start can
    # match where it does not) and end at the first "]" followed by ", input_op_ids = ", else at
    # a final "]"
    plain = ((lab.str.len_bytes() == lab.str.len_chars()) & ~lab.str.contains("\n", literal=True)).fill_null(False)
    split = labels.select("name_code", "label", plain.alias("_plain"))
    fast, slow = split.filter(pl.col("_plain")), split.filter(~pl.col("_plain"))
    comma, at = pl.col("_comma"), pl.col("_at")
    head = pl.when(comma.is_null()).then(lab).otherwise(lab.str.slice(0, comma))
    slow_head = lab.str.extract(r"^([^,]*)", 1)
    if not sizes:
        fast = fast.with_columns(lab.str.find(",", literal=True).alias("_comma"))
        return pl.concat(
            [fast.select("name_code", head.alias("head")), slow.select("name_code", slow_head.alias("head"))]
        )
    close = lab.str.slice(at + 11).str.find("], input_op_ids = ", literal=True)
    fast = fast.with_columns(
        lab.str.find(",", literal=True).alias("_comma"), lab.str.find(", sizes = [", literal=True).alias("_at")
    ).with_columns(close.alias("_close"))
    shapes = (
        pl.when(pl.col("_close").is_not_null())
        .then(lab.str.slice(at + 10, pl.col("_close") + 2))
        .when(lab.str.ends_with("]") & (lab.str.len_bytes() >= at + 12))
        .then(lab.str.slice(at + 10))
    )
    return pl.concat(
        [
            fast.select("name_code", _op_name(head), shapes.alias("sizes")),
            slow.select(
                "name_code",
                _op_name(slow_head),
                lab.str.extract(r", sizes = (\[.*?\])(?:, input_op_ids = |$)", 1).alias("sizes"),
            ),
        ]
    )


def _op_name(head: pl.Expr) -> pl.Expr:
    """The op's name from the label's text before its first comma: without `aten::`, aliases applied."""
    return head.str.strip_prefix("aten::").replace(OP_ALIASES).alias("op")


class _OpTexts:
    """The forward-op labels' text by name_code, for `op_fields` of the ops kernels end up with
    (known only once the nesting answered). Held as the labels while the trace keeps its names;
    where the command lets the names go during attribution (`Trace.ranges_only_for_attribution`,
    `names_only_for_attribution`) and the text is large, packed: the labels a call can end up with (`_op_candidates`, on
    dense_x25 1.75M of 4.4M forward-op labels, 0.21 of 0.52 GB of text), a chunk at a time, its
    bytes lz4-compressed, and only the labels asked for taken out again."""

    ROWS = 1 << 16  # labels a chunk (each chunk's copies go before the next is cut)
    # threads that compress or read chunks: a chunk's text each in flight (~8 MB on dense_x25),
    # at the names' peak while packing, so a few, not one a core (16 on the GPU machine)
    THREADS = 4
    PACK_BYTES = 1 << 26  # less text than this is kept as it is (nothing to gain, pyarrow to load)

    def __init__(self, labels: pl.DataFrame, candidates: np.ndarray | None):
        """`candidates`: the name codes to pack, sorted (None: keep the labels)."""
        self.labels: pl.DataFrame | None = labels
        # (the chunk's name_codes, its labels' offsets, their bytes compressed, the bytes' size)
        self.packed: list[tuple[np.ndarray, np.ndarray, bytes, int]] = []
        forward = pl.col("fwd_op")
        size = pl.when(forward).then(pl.col("label").str.len_bytes()).sum()
        if candidates is None or labels.select(size).item() < self.PACK_BYTES:
            return
        import pyarrow as pa  # type: ignore[import-untyped]  # deferred: only a large trace packs

        # lz4 lets the interpreter go: chunks are compressed on a pool's threads while the next
        # is cut, a chunk's text a thread and one more at most waiting (on one thread the cutting
        # waited for it: 0.18 s of wall on 16 cores)
        workers = min(read_threads(), self.THREADS)
        with ThreadPoolExecutor(workers) as pool:
            waiting: deque[tuple[np.ndarray, np.ndarray, Future[bytes], int]] = deque()
            for at in range(0, len(candidates), self.ROWS):
                part = _labels_of(labels, candidates[at : at + self.ROWS])
                # offsets and the rows' own bytes (the oldest layout): string views point into the
                # buffers of every name
                text = part["label"].to_arrow(compat_level=pl.CompatLevel.oldest())
                assert text.offset == 0 and text.type == pa.large_string()
                _, offsets, data = text.buffers()
                if len(waiting) > workers:
                    self._packed(waiting.popleft())
                # copied out: a buffer of the exported array holds all of it (the text too)
                waiting.append(
                    (
                        part["name_code"].to_numpy(),
                        np.frombuffer(offsets, dtype=np.int64).copy(),
                        pool.submit(pa.compress, data, codec="lz4", asbytes=True),
                        data.size,
                    )
                )
                del text, offsets, data
            while waiting:
                self._packed(waiting.popleft())
        self.labels = None

    def _packed(self, chunk: tuple[np.ndarray, np.ndarray, Future[bytes], int]) -> None:
        """A chunk kept once its bytes are compressed."""
        codes, offsets, compressed, size = chunk
        self.packed.append((codes, offsets, compressed.result(), size))

    def fields(self, codes: pl.Series, sizes: bool = True) -> pl.DataFrame:
        """op_fields of the forward-op labels `codes` (name_codes, no nulls); asked once. Without
        `sizes`, that column is null (the labels held: not cut out of them)."""
        if self.labels is not None:  # indexed by name_code (0..n-1): a gather, not a join
            part = self.labels[codes.to_numpy()] if codes.len() else self.labels.clear()
            if not sizes:
                return op_fields(part, sizes=False).select(
                    "name_code", _op_name(pl.col("head")), pl.lit(None, dtype=pl.String).alias("sizes")
                )
            return op_fields(part)
        want = np.sort(codes.to_numpy())
        # each chunk's labels asked for, decompressed and parsed on a thread of a pool (lz4 and
        # polars let the interpreter go): one at a time they held one core (0.25-0.45 s on dense_x25)
        made = []
        workers = min(read_threads(), self.THREADS)
        with ThreadPoolExecutor(workers) as pool:
            waiting: deque[Future[pl.DataFrame]] = deque()
            while self.packed:  # chunks in name_code order, each let go once read
                have, offsets, packed, size = self.packed.pop(0)
                lo, hi = np.searchsorted(want, have[0]), np.searchsorted(want, have[-1], side="right")
                if hi <= lo:
                    continue
                rows = np.searchsorted(have, want[lo:hi])
                assert (have[rows] == want[lo:hi]).all(), "an op code of no forward-op label"
                if len(waiting) > workers:  # a few chunks' text at a time
                    made.append(waiting.popleft().result())
                waiting.append(pool.submit(_chunk_fields, have, offsets, packed, size, rows))
                del packed
            made.extend(f.result() for f in waiting)
        return pl.concat(made) if made else op_fields(_NO_OPS)


def _chunk_fields(have: np.ndarray, offsets: np.ndarray, packed: bytes, size: int, rows: np.ndarray) -> pl.DataFrame:
    """op_fields of the labels at `rows` of one packed chunk (_OpTexts) of the labels `have`."""
    import pyarrow as pa

    data = pa.decompress(packed, size, codec="lz4")
    text = pa.Array.from_buffers(pa.large_string(), len(have), [None, pa.py_buffer(offsets), data])
    # gathered by polars: pyarrow's take loads its compute kernels (0.2 CPU s) for this alone
    label = pl.Series("label", text).gather(rows)
    return op_fields(pl.DataFrame([pl.Series("name_code", have[rows]), label]))


def _labels_of(labels: pl.DataFrame, codes: np.ndarray) -> pl.DataFrame:
    """(name_code, label) of the labels of these name codes, in their order."""
    if nv.codes_are_rows(labels):  # a gather, not a join
        if len(codes) == 0:
            return labels.select("name_code", "label").clear()
        # from the slice the codes span: a gather across the names' chunks finds each row's
        # chunk, five times the CPU of one from a slice within a chunk
        lo, hi = int(codes.min()), int(codes.max()) + 1
        return labels.select("name_code", "label").slice(lo, hi - lo)[codes - lo]
    want = pl.DataFrame({"name_code": codes}, schema={"name_code": pl.Int64})
    return want.join(labels.select("name_code", "label"), on="name_code", how="left", maintain_order="left")


class _OpNames:
    """The forward-op labels' op names by name_code, for a table that shows the op but not its
    shapes (`categorized`) where the command lets the names go during attribution: each
    forward-op label's head (op_labels', op_fields' `head`), a Categorical, four bytes a label
    and a few hundred distinct texts, instead of its whole text packed."""

    def __init__(self, labels: pl.DataFrame):
        self.heads = labels.select("name_code", pl.when("fwd_op").then(pl.col("head")).alias("head"))

    def fields(self, codes: pl.Series, sizes: bool = True) -> pl.DataFrame:
        """op_fields of the forward-op labels `codes` (name_codes, no nulls), `sizes` null."""
        if nv.codes_are_rows(self.heads):  # a gather, not a join of millions of labels
            got = pl.DataFrame([codes.alias("name_code"), self.heads["head"].gather(codes)])
        else:
            got = codes.alias("name_code").to_frame().join(self.heads, on="name_code", how="left")
        return got.select(
            "name_code", _op_name(pl.col("head").cast(pl.String)), pl.lit(None, dtype=pl.String).alias("sizes")
        )


# the trace's tables gpu_ops joins, by the logical table each is read as
GPU_OP_TABLES = {
    "kernels": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
}


@derived
def gpu_ops(trace: Trace) -> pl.DataFrame:
    """Kernels, memcpys and memsets in one frame ordered by start, with `Idx` from 1."""
    cols = ["start", "end", "device", "stream", "correlation", "global_pid"]
    # Each op's name is an integer code (`Kernel`) until the ops are sorted, then its text, joined
    # from the few distinct names: the sort gathers four bytes an op, not a view of its name in
    # each of the read's parts. The copies' codes follow every kernel name's id.
    parts, texts = [], []
    base = 0
    if trace.has(GPU_OP_TABLES["kernels"]):
        dims = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"] if trace.launch_dims else []
        k = trace.columns("kernels", cols + ["name_id", *dims])
        names = trace.string_values(k["name_id"]).select(pl.col("id").cast(pl.Int64).alias("Kernel"), "value")
        texts.append(names)
        top = pl.concat([names["Kernel"], k["name_id"].cast(pl.Int64)]).max()
        base = 0 if top is None else int(top) + 1
        parts.append(
            k.select(*cols, *dims, pl.col("name_id").cast(pl.Int64).alias("Kernel"), pl.lit("kernel").alias("kind"))
        )
    if trace.has(GPU_OP_TABLES["memcpy"]):
        labels = trace.memcpy_kind_labels
        lab = pl.DataFrame(
            {"copy_kind": list(labels), "label": list(labels.values())},
            schema={"copy_kind": pl.Int64, "label": pl.String},
        )
        m = trace.columns("memcpy", cols + ["copy_kind", "bytes"])
        kinds = (
            m.select("copy_kind")
            .unique(maintain_order=True)
            .join(lab, on="copy_kind", how="left", maintain_order="left")
            .select(
                "copy_kind",
                (base + pl.int_range(pl.len(), dtype=pl.Int64)).alias("Kernel"),
                pl.format("[CUDA memcpy {}]", pl.col("label").fill_null("?")).alias("value"),
            )
        )
        base += kinds.height
        texts.append(kinds.drop("copy_kind"))
        m = m.join(kinds.drop("value"), on="copy_kind", how="left", nulls_equal=True, maintain_order="left")
        parts.append(m.with_columns(pl.lit("memcpy").alias("kind")).drop("copy_kind"))
    if trace.has(GPU_OP_TABLES["memset"]):
        s = trace.columns("memset", cols + ["bytes"])
        texts.append(
            pl.DataFrame(
                {"Kernel": [base], "value": ["[CUDA memset]"]}, schema={"Kernel": pl.Int64, "value": pl.String}
            )
        )
        parts.append(s.with_columns(pl.lit(base, dtype=pl.Int64).alias("Kernel"), pl.lit("memset").alias("kind")))
    if not parts:
        return pl.DataFrame()
    ops = pl.concat(parts, how="diagonal_relaxed").sort(["start", "device", "stream"], maintain_order=True)
    named = ops.select("Kernel").join(pl.concat(texts), on="Kernel", how="left", maintain_order="left")["value"]
    ops = ops.with_columns(named.alias("Kernel"))
    del parts
    if trace.only_attribution:  # the ops hold what attribution reads of these: gone before the runtime read
        trace.let_go(*GPU_OP_TABLES)
    if "bytes" not in ops.columns:
        ops = ops.with_columns(pl.lit(None, dtype=pl.Int64).alias("bytes"))
    for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"):
        if c not in ops.columns:
            ops = ops.with_columns(pl.lit(None, dtype=pl.Int64).alias(c))
    return ops.with_row_index("Idx", offset=1).with_columns(pl.col("Idx").cast(pl.Int64))


def gpu_op_count(trace: Trace) -> int:
    """gpu_ops' rows, counted without making it (each table it joins counted, no column read):
    what a command asks before attribution reads the GPU ops."""
    return sum(trace.row_count(k) for k, t in GPU_OP_TABLES.items() if trace.has(t))


def _has_gpu_ops(trace: Trace) -> bool:
    """Whether gpu_ops has rows."""
    return gpu_op_count(trace) > 0


LAUNCH_COLUMNS = ["start", "end", "global_tid", "correlation"]  # the runtime calls' columns launch_calls reads


@derived
def launched_ops(trace: Trace) -> pl.DataFrame:
    """gpu_ops with the launch call of each (r_start, r_end, global_tid; null when the call
    lies outside the trace's window)."""
    ops = gpu_ops(trace)
    if ops.height == 0:
        return ops
    runtime = trace.columns("runtime", LAUNCH_COLUMNS)
    if trace.only_attribution:  # the ops hold what attribution reads of the launches
        trace.let_go("runtime")
    launch = launch_of(ops, runtime)
    return ops.with_columns(launch.select("r_start", "r_end", "global_tid"))


_CORRELATION_BITS = 40


def call_keys(ops: pl.DataFrame, calls: pl.DataFrame) -> tuple[pl.Series, pl.Series] | None:
    """`_call` of the GPU ops and of the runtime calls (each with `global_pid` and
    `correlation`): one integer per (process, correlation id), the process's place among both
    sides' processes above the id's _CORRELATION_BITS (the id alone where both sides are one
    process), so matching a launch is one Int64 hash, not a two-column one (half the time at
    2.4M calls); None where a key is null or an id does not fit."""
    frames = (ops, calls)
    if any(f[c].null_count() for f in frames for c in ("correlation", "global_pid")):
        return None
    if len({v for f in frames for v in (f["global_pid"].min(), f["global_pid"].max()) if v is not None}) == 1:
        key, of_calls = (f["correlation"].cast(pl.Int64).alias("_call") for f in frames)
        return key, of_calls
    ids = pl.concat([f["correlation"] for f in frames])
    if ids.len() and (ids.min() < 0 or ids.max() >= 1 << _CORRELATION_BITS):  # type: ignore[operator]
        return None
    pids = pl.concat([f["global_pid"] for f in frames]).unique().sort()
    key, of_calls = (
        (
            pids.search_sorted(f["global_pid"]).cast(pl.Int64) * (1 << _CORRELATION_BITS)
            + f["correlation"].cast(pl.Int64)
        ).alias("_call")
        for f in frames
    )
    return key, of_calls


def launch_calls(runtime: pl.DataFrame) -> pl.DataFrame:
    """Runtime calls (start, end, global_tid, correlation) as a GPU op's launch is matched and
    shown: r_start, r_end, global_tid, correlation and global_pid (the thread's process)."""
    return runtime.select(
        pl.col("start").alias("r_start"),
        pl.col("end").alias("r_end"),
        "global_tid",
        "correlation",
        (pl.col("global_tid") & PID_MASK).alias("global_pid"),
    )


def launch_of(ops: pl.DataFrame, runtime: pl.DataFrame) -> pl.DataFrame:
    """(r_start, r_end, global_tid) of each op's launch call, in the ops' order: the runtime
    call of the op's correlation id in its process (the first, should one repeat)."""
    calls = launch_calls(runtime)
    keys = call_keys(ops, calls)
    if keys is None:
        return _launch_joined(ops, calls)
    op_key, call_key = keys
    got = calls.select("r_start", "r_end", "global_tid")
    if call_key.len() == 0:
        return got.clear(op_key.len())
    mine, theirs = op_key.to_numpy(), call_key.to_numpy()
    found = calls_by_search(mine, theirs)
    if found is None:  # out of order or an id repeated: each key's first call, by a stable sort
        order = np.argsort(theirs, kind="stable")
        ordered = theirs[order]
        first = np.ones(len(ordered), dtype=bool)
        first[1:] = ordered[1:] != ordered[:-1]
        at, hit = _searched(mine, ordered[first])
        at = order[first][at]
    else:
        at, hit = found
    got = got[at]
    if hit.all():
        return got
    return got.select(pl.when(pl.Series(hit)).then(pl.col(c)).alias(c) for c in got.columns)


def calls_by_search(mine: np.ndarray, theirs: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(the row of `theirs` equal to each of `mine` or any row, whether it is equal), by a sorted
    search where `theirs` increase strictly, else None: the runtime calls' keys (`call_keys`) as
    an export lists one process's calls, by start, whose correlation ids grow with it. A hash
    join of dense_x25's 1.1M kernels to 2.4M calls costs 0.27-0.29 CPU s, this 0.07-0.08."""
    if not len(theirs) or not bool(np.all(theirs[1:] > theirs[:-1])):
        return None
    return _searched(mine, theirs)


def _searched(mine: np.ndarray, theirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """calls_by_search's answer where `theirs` (not empty) increase strictly."""
    at = np.searchsorted(theirs, mine)
    np.minimum(at, len(theirs) - 1, out=at)
    return at, theirs[at] == mine


def _launch_joined(ops: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """launch_of by a join on the two columns (nulls, or ids past _CORRELATION_BITS) of
    `calls` (launch_calls)."""
    # one launch per op: a correlation id is unique per process. Only the launches of GPU ops are
    # made unique (most runtime calls launch nothing)
    key = ["correlation", "global_pid"]
    r = calls.join(ops.select(key), on=key, how="semi", maintain_order="left").unique(
        key, keep="first", maintain_order=True
    )
    return ops.select(key).join(r, on=key, how="left", maintain_order="left").select("r_start", "r_end", "global_tid")


# A path shows at most this many levels: the outermost PATH_HEAD, a marker saying how many
# are left out, and the innermost PATH_TAIL (a push never popped in a loop nests 20,000 deep).
PATH_HEAD, PATH_TAIL = 3, 28
ELIDED = "…"
# a user range named like the backward pass; a thread PyTorch's autograd engine runs on
BACKWARD_RANGE = r"(?i)backward"
AUTOGRAD_THREAD = r"^pt_autograd_\d+$"


def autograd_threads(trace: Trace) -> pl.Series:
    """global_tid of the threads named as PyTorch's autograd engine names its device threads
    (`pt_autograd_0`): whatever they launch is backward work."""
    t = trace.threads
    if t.height == 0:
        return pl.Series("global_tid", [], dtype=pl.Int64)
    named = trace.with_strings(t, "name_id", "_name")
    return named.filter(pl.col("_name").str.contains(AUTOGRAD_THREAD))["global_tid"]


@derived
def user_labels(trace: Trace) -> pl.DataFrame:
    """(name_code, label, phase) of the user (non-marker) labels: module and step names,
    thousands where op labels are millions. Their text is copied out of the names' buffers, so
    that user_paths can be made once the names have gone (`_range_names`)."""
    users = nv.labels(trace).filter(~pl.col("marker"))
    return users.select(
        "name_code",
        pl.concat_str(pl.col("label"), pl.lit("")).alias("label"),
        _is_phase(pl.col("label")).alias("phase"),
    )


@derived
def user_paths(trace: Trace) -> pl.DataFrame:
    """For every user (non-marker) range: its path of user ranges outer to inner (" > "), the
    layer (the same without phase ranges, joined with ":"), and which phases it lies in.
    Computed once per range, so a million kernels only carry the id of their innermost range."""
    return _user_paths(trace, texts=True)


@derived
def user_flags(trace: Trace) -> pl.DataFrame:
    """user_paths' ranges (uid) and which phases each lies in (in_fwd, in_bwd, in_opt), without
    the path and layer texts: what a table that shows neither reads (`categorized`). Taken from
    user_paths where that is made."""
    made = trace.store.peek(user_paths)
    return made.select("uid", "in_fwd", "in_bwd", "in_opt") if made is not None else _user_paths(trace, texts=False)


def _user_paths(trace: Trace, texts: bool) -> pl.DataFrame:
    """user_paths, or without `texts` user_flags."""
    labels = user_labels(trace)
    ranges = nv.projection_ranges(trace)
    users = ranges.join(labels.select("name_code", "label", "phase"), on="name_code", how="inner")
    if users.height == 0:
        return pl.DataFrame(
            schema={
                "uid": pl.Int64,
                "path": pl.String,
                "in_fwd": pl.Boolean,
                "in_bwd": pl.Boolean,
                "in_opt": pl.Boolean,
                "layer": pl.String,
            }
        )
    selves = users.select(pl.col("id").alias("call_id"), "global_tid", "start", "end")
    parts = []
    pp = users.filter(pl.col("style") == "PushPop")
    if pp.height:
        # the levels shown of each push/pop user range's chain of user ranges, one join_asof for all
        tree = nv.nest(pp.select("id", "global_tid", "start", "end"))
        inner = nv.innermost(tree, selves)
        n = pl.col("idepth") + 1
        levels = (
            pl.when(n <= PATH_HEAD + PATH_TAIL)
            .then(pl.int_ranges(0, n, dtype=pl.Int64))
            .otherwise(
                pl.concat_list(
                    pl.int_ranges(0, PATH_HEAD, dtype=pl.Int64), pl.int_ranges(n - PATH_TAIL, n, dtype=pl.Int64)
                )
            )
        )
        rows = inner.select("call_id", "global_tid", "ipos", n.alias("n"), levels.alias("lvl")).explode("lvl")
        parts.append(
            nv.ancestor_at(tree, rows, "ipos", "lvl", {"id": "id"}).select(
                "call_id",
                "id",
                pl.when((pl.col("n") > PATH_HEAD + PATH_TAIL) & (pl.col("lvl") == PATH_HEAD - 1))
                .then(pl.col("n") - PATH_HEAD - PATH_TAIL)
                .otherwise(0)
                .alias("elided"),
            )
        )
    se = users.filter(pl.col("style") != "PushPop")
    if se.height:
        parts.append(_held_by(trace.path, se, selves).with_columns(pl.lit(0, dtype=pl.Int64).alias("elided")))
    if not texts:  # the same ranges (every one with a level found), their texts not made
        out = pl.concat(parts).select(pl.col("call_id").unique(maintain_order=True))
        return _in_phases(users, selves, out).rename({"call_id": "uid"})
    p = pl.concat(parts).join(users.select("id", "start", "end", "name_code"), on="id", how="left")
    # after the last outer level shown, one marker for the levels left out (sorted as integers,
    # labelled after)
    gap = p.filter(pl.col("elided") > 0).with_columns(pl.lit(-1, dtype=pl.Int64).alias("name_code"))
    p = (
        pl.concat(
            [
                p.with_columns(pl.lit(0).alias("_k"), pl.lit(0, dtype=pl.Int64).alias("elided")),
                gap.with_columns(pl.lit(1).alias("_k")),
            ]
        )
        .sort(["call_id", "start", "end", "_k"], descending=[False, False, True, False])
        .join(labels.select("name_code", "label", "phase"), on="name_code", how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("_k") == 1)
            .then(pl.format("{} {} levels", pl.lit(ELIDED), "elided"))
            .otherwise(pl.col("label"))
            .alias("label"),
            pl.col("phase").fill_null(False),
        )
    )
    # Layer: the non-phase labels, leaving out one that the next carries as its prefix
    # (`layers.3` > `layers.3.mlp` -> `layers.3.mlp`, `Enc_0` > `Enc_0:Attn` -> `Enc_0:Attn`)
    # the next label of the same call by a shift: each call's rows are together (sorted by call_id),
    # so no window over a hash of every call
    same_call = pl.col("call_id").shift(-1) == pl.col("call_id")
    q = p.filter(~pl.col("phase")).with_columns(pl.when(same_call).then(pl.col("label").shift(-1)).alias("next"))
    carried = (
        pl.col("next").str.starts_with(pl.col("label") + ".") | pl.col("next").str.starts_with(pl.col("label") + ":")
    ).fill_null(False)
    # each call's labels gathered into a list and the lists joined: a text join as the aggregation
    # makes each group's text on its own (0.14 against 0.02 CPU s for dense_x25's 105k calls)
    layers = (
        q.filter(~carried)
        .group_by("call_id")
        .agg(pl.col("label"))
        .select("call_id", pl.col("label").list.join(":").alias("layer"))
    )
    out = (
        p.group_by("call_id", maintain_order=True)
        .agg(pl.col("label"))
        .select("call_id", pl.col("label").list.join(" > ").alias("path"))
    )
    out = _in_phases(users, selves, out)
    out = out.join(layers, on="call_id", how="left").with_columns(pl.col("layer").fill_null(""))
    return out.rename({"call_id": "uid"})


def _held_by(path: Path, ranges: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """nv._enclosing_any(ranges, calls) (start/end ranges), its pairs counted first against the
    memory budget: ranges started in a loop and never ended hold every later call, pairs that
    grow with the square of the loop. Past the budget, one line on the trace instead."""
    try:
        return nv._enclosing_any(ranges, calls, np.zeros(calls.height, dtype=np.int64))
    except nv.TooManyPairs as e:
        raise TraceError(path, str(e)) from None


def _in_phases(users: pl.DataFrame, selves: pl.DataFrame, out: pl.DataFrame) -> pl.DataFrame:
    """`out` (call_id: a user range) with in_fwd, in_bwd and in_opt: whether any enclosing range
    of that name holds it, shown or not (backward: any user range named like it,
    `backward_pass`, `## backward ##`, `loss.backward`)."""
    for flag, named in (
        ("in_fwd", pl.col("label") == "forward_pass"),
        ("in_bwd", pl.col("label").str.contains(BACKWARD_RANGE)),
        ("in_opt", pl.col("label") == "optimizer_step"),
    ):
        hit = nv.around(users.filter(named), selves)
        out = out.join(hit.select("call_id", pl.lit(True).alias(flag)), on="call_id", how="left").with_columns(
            pl.col(flag).fill_null(False)
        )
    return out


class _Kinds:
    """The five kinds of range _contexts asks about, over the projection nesting (push/pop
    ranges): for a call's innermost range, the nearest range of each kind at or above it (the
    outermost, for forward ops), found by a walk up that range's parents (`placed`). Made once
    per attribute(), for the kernels' launches and again for the forward ops of backward nodes;
    start/end ranges keep an interval join."""

    # (key, the op_labels flag, outermost?): "uid" is the user ranges (not markers)
    KINDS: tuple[tuple[str, str, bool], ...] = (
        ("uid", "marker", False),
        ("fop", "fwd_op", True),
        ("bwd", "bwd_node", False),
        ("eval", "bwd_eval", False),
        ("opt", "optim_marker", False),
    )
    BIT = {key: bit for bit, (key, _, _) in enumerate(KINDS)}
    # calls walked up at a time: their chains are a row per level, a column per call; a block
    # whose chain stays in the cache (a few levels of 32k calls) walks in half the CPU of one of
    # 256k (0.11 against 0.20-0.25 s for dense_x25's 1.3M calls)
    CALLS = 1 << 15

    def __init__(self, trace: Trace, labels: pl.DataFrame):
        self.nest = nv.projection_nesting(trace)
        codes = self.nest.ranges["name_code"].to_numpy()  # in the ranges' order
        size = _code_count(codes, labels)
        # each code's kinds as bits: one gather of the ranges' codes for the five kinds
        bits_by_code = np.zeros(size, dtype=np.uint8)
        for bit, (key, flag, _) in enumerate(self.KINDS):
            by_code = _by_code(labels, flag, size)
            if key == "fop":
                self.fop_by_code = by_code
            bits_by_code |= by_code.view(np.uint8) << bit
        # per tree row, and a last slot of no kind that row -1 (no range) reads
        self.bits = np.append(self.nest.in_tree_order(bits_by_code[codes]), np.uint8(0))
        del bits_by_code
        # a nesting too deep to walk call by call (a push never popped in a loop): the answers
        # for every range, by pointer jumping, and each call's read from them
        self.rows: dict[str, np.ndarray] | None = None
        if self.nest.too_deep:
            asks = [((self.bits[:-1] & (1 << bit)).astype(bool), outer) for bit, (_, _, outer) in enumerate(self.KINDS)]
            self.rows = {key: f for (key, _, _), f in zip(self.KINDS, self.nest.answers(asks))}
        # each label's seq by name_code, gathered instead of joined (codes are 0..n-1 in order)
        if labels.height == size and nv.codes_are_rows(labels):
            # already in code order: the labels' column, in one chunk (the streaming engine's
            # morsels are many, and a gather across chunks finds each row's), made one here once
            # the names have gone rather than beside them
            self.seq = labels["seq"].rechunk()
        else:
            seq = pl.repeat(None, size, dtype=pl.Int64, eager=True).alias("seq")
            self.seq = seq.scatter(labels["name_code"], labels["seq"]) if labels.height else seq
        ranges = nv.projection_ranges(trace)
        self.loose = ranges.filter(pl.col("style") != "PushPop").select("id", "global_tid", "start", "end", "name_code")
        self.path = trace.path  # named in _held_by's line
        self.labels = labels

    def placed(self, inner: np.ndarray, keys: frozenset[str] | None = None) -> dict[str, np.ndarray]:
        """Per kind (of `keys`, None: every kind): for each call (its innermost push/pop range's
        tree row, -1 where none), the tree row of the range of that kind around it, -1 where none.

        Each call's chain of ranges (its innermost, that one's parent, ...) as a column of rows,
        every call's at once, a level per step; then per kind each level's rows of that kind
        written over the answer, from the top down (from the innermost up, for the outermost):
        the last written is the nearest. Only the calls' chains are read, not an answer for each
        of millions of ranges (four of them ~0.1 GB on a dense trace)."""
        asked = [(bit, key, outer) for bit, (key, _, outer) in enumerate(self.KINDS) if keys is None or key in keys]
        if self.rows is not None:
            return {key: _read_rows(self.rows[key], inner) for _, key, _ in asked}
        parent = self._parent
        out = {key: np.full(len(inner), -1, dtype=parent.dtype) for _, key, _ in asked}
        depth = self.nest.depth
        for at in range(0, len(inner), self.CALLS):
            part = inner[at : at + self.CALLS]
            some = part[part >= 0]
            if not some.size:
                continue
            levels = int(depth[some].max()) + 1
            chain = np.empty((levels, len(part)), dtype=parent.dtype)
            chain[0] = part
            for up in range(1, levels):
                chain[up] = parent[chain[up - 1]]
            bits = self.bits[chain]
            for bit, key, outermost in asked:
                hit = (bits & np.uint8(1 << bit)) != 0
                got = out[key][at : at + len(part)]
                for level in range(levels) if outermost else range(levels - 1, -1, -1):
                    np.copyto(got, chain[level], where=hit[level])
        return out

    @functools.cached_property
    def _parent(self) -> np.ndarray:
        """The nesting's parent rows with a last slot, -1's: a root's parent (-1) reads it."""
        return np.append(self.nest.parent, np.array(-1, dtype=self.nest.parent.dtype))

    @functools.cached_property
    def node_of_eval(self) -> pl.DataFrame:
        """(eval_id, eseq, estart): the backward node an `evaluate_function: XBackward0` range
        ran, its first child node range. Work after the node's own range but inside that range
        (bias-gradient sums, say) belongs to it. Made once for every _contexts of these kinds."""
        ranges = self.nest.ranges
        if self.first_nodes is not None:
            parents, first = self.first_nodes
            at, above = self.nest.rows(first), self.nest.rows(parents)
            code = pl.Series("name_code", ranges["name_code"].to_numpy()[at])
            return pl.DataFrame(
                [
                    pl.Series("eval_id", ranges["id"].to_numpy()[above]),
                    self.seq.gather(code).alias("eseq"),
                    pl.Series("estart", ranges["start"].to_numpy()[at]),
                ]
            )
        nodes = np.flatnonzero(self.bits[:-1] & np.uint8(1 << self.BIT["bwd"]))
        up = self.nest.parent[nodes]
        return (
            self.nest.take(["start", "name_code"], nodes)
            .with_columns(self.nest.take(["id"], _rows_or_null(up))["id"].alias("parent"))
            .select("start", "parent", self.seq_of(pl.col("name_code")))
            .sort("start", maintain_order=True)
            .group_by("parent", maintain_order=True)
            .agg(pl.col("seq").first().alias("eseq"), pl.col("start").first().alias("estart"))
            .rename({"parent": "eval_id"})
        )

    @functools.cached_property
    def first_nodes(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(the tree rows that parent a backward node range, ascending; the tree row of each
        one's first such child), None where the ranges' id, start or name_code have nulls. A
        parent's node ranges are on its thread, so in the tree's order they come by start: its
        first node there is its first by start (a parent of none is no range a call's eval can be)."""
        ranges = self.nest.ranges
        if any(ranges[c].null_count() for c in ("id", "start", "name_code")):
            return None
        nodes = np.flatnonzero(self.bits[:-1] & np.uint8(1 << self.BIT["bwd"]))
        up = self.nest.parent[nodes]
        nodes, up = nodes[up >= 0], up[up >= 0]
        parents, first = np.unique(up, return_index=True)
        return parents, nodes[first]

    def eval_nodes(self, at: np.ndarray) -> pl.DataFrame:
        """(eseq, estart) of node_of_eval for each call's eval range (`at`, "eval"'s `placed`,
        -1 where none; first_nodes made), nulls where none: found by its tree row among
        first_nodes' parents, not joined on the range's id."""
        parents, first = self.first_nodes or (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        if not len(parents):
            return pl.DataFrame(schema={"eseq": self.seq.dtype, "estart": self.nest.ranges.schema["start"]}).clear(
                len(at)
            )
        i = np.minimum(np.searchsorted(parents, at), len(parents) - 1)
        hit = pl.Series("hit", (at >= 0) & (parents[i] == at))
        node = self.nest.rows(first[i])
        ranges = self.nest.ranges
        found = pl.DataFrame(
            [
                self.seq.gather(pl.Series("name_code", ranges["name_code"].to_numpy()[node])).alias("eseq"),
                pl.Series("estart", ranges["start"].to_numpy()[node]),
            ]
        )
        return found.select(pl.when(hit).then(pl.col(c)).alias(c) for c in ("eseq", "estart"))

    def seq_of(self, name_code: pl.Expr) -> pl.Expr:
        """The autograd seq of each code's label (null where it has none)."""
        return pl.lit(self.seq).gather(name_code).alias("seq")

    def aligned(self, at: np.ndarray, columns: list[str]) -> pl.DataFrame:
        """`columns` of the push/pop range around each call (`at`, a kind's `placed`; nulls where
        none) and `hit`, whether there is one: a row per call in the calls' order."""
        hit = pl.Series("hit", at >= 0)
        if not columns:
            return hit.to_frame()
        ranges = self.nest.ranges
        if len(self.nest.depth) and not any(ranges[c].null_count() for c in columns):
            # gathered in numpy (a polars gather by a column with nulls costs several times as
            # much), the calls without such a range then made null
            rows = self.nest.rows(np.maximum(at, 0))
            got = pl.DataFrame([pl.Series(c, ranges[c].to_numpy()[rows]) for c in columns])
            return got.select(*(pl.when(hit).then(pl.col(c)).alias(c) for c in columns), hit)
        return self.nest.take(columns, _rows_or_null(at)).with_columns(hit)

    def around(self, calls: pl.DataFrame, at: np.ndarray, key: str) -> pl.DataFrame:
        """(call_id, id, name_code, start) of the range of kind `key` around each call that has one,
        push/pop (`at`, that kind's `placed`) or start/end (a trace with push/pop ranges only asks
        `aligned`)."""
        hit = np.flatnonzero(at >= 0)
        got = self.nest.take(["id", "name_code", "start"], at[hit]).with_columns(
            pl.Series("call_id", calls["call_id"].to_numpy()[hit]), pl.Series("end", self.nest.end[at[hit]])
        )
        flag = dict((k, f) for k, f, _ in self.KINDS)[key]
        kind = ~pl.col("marker") if flag == "marker" else pl.col(flag)
        loose = self.loose.join(self.labels.filter(kind).select("name_code"), on="name_code", how="semi")
        if loose.height == 0:
            return got.select("call_id", "id", "name_code", "start")
        # start/end ranges around the call as well: the one that starts later (earlier, for the
        # outermost) wins, as nv.around()
        outermost = key == "fop"
        se = _held_by(self.path, loose, calls).join(loose.select("id", "name_code", "start", "end"), on="id")
        both = pl.concat(
            [
                got.select("call_id", "id", "name_code", "start", "end"),
                se.select("call_id", "id", "name_code", "start", "end"),
            ]
        ).sort(["call_id", "start", "end"], descending=[False, outermost, not outermost])
        return (
            both.group_by("call_id", maintain_order=True)
            .agg(pl.all().last())
            .select("call_id", "id", "name_code", "start")
        )


def _read_rows(rows: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Per call: the answer in `rows` (one per tree row) at its innermost tree row, -1 where none."""
    return np.where(inner >= 0, rows[np.maximum(inner, 0)], -1) if len(rows) else np.full(len(inner), -1)


def _rows_or_null(rows: np.ndarray) -> pl.Series:
    """Tree rows as a Series, null where there is none (-1)."""
    s = pl.Series("i", rows, dtype=pl.Int64)
    return pl.select(pl.when(s >= 0).then(s)).to_series()


def _contexts(trace: Trace, calls: pl.DataFrame, kinds: _Kinds, full: bool = True) -> pl.DataFrame:
    """For each call (call_id, global_tid, start, end): its innermost user range (`uid`, a key of
    user_paths), outermost forward op (`fop_code`, a name_code), innermost backward node (seq,
    start), and direction flags; without `full`, (call_id, uid, fop_code) alone. Integers only:
    the strings are joined once, at the end of attribute()."""
    # Each question is the innermost (or outermost) range of one kind around the call: the
    # innermost range of all around the call, then that kind's nearest row above it.
    keys = None if full else _LAYER_AND_OP
    placed = kinds.placed(kinds.nest.innermost_rows(calls), keys)
    per_call = calls.select("call_id")
    # (kind, the range columns its answer reads, the answer's columns)
    for key, read, cols in (
        ("uid", ["id"], [pl.col("id").alias("uid")]),
        ("fop", ["name_code"], [pl.col("name_code").alias("fop_code")]),
        (
            "bwd",
            ["name_code", "start"],
            [pl.col("seq").alias("bseq"), pl.col("start").alias("bstart"), pl.lit(True).alias("_node")],
        ),
        ("eval", ["id"], [pl.col("id").alias("eval_id")]),
        ("opt", [], [pl.lit(True).alias("any_opt")]),
    ):
        if keys is not None and key not in keys:
            continue
        if kinds.loose.height == 0:  # push/pop only: the answers line up with the calls, no join
            # only the columns an answer reads are gathered (each a random read of a million rows)
            found = kinds.aligned(placed[key], read)
            if key == "bwd":
                found = found.with_columns(kinds.seq_of(pl.col("name_code")))
            per_call = per_call.with_columns(found.select(pl.when("hit").then(c) for c in cols))
            continue
        found = kinds.around(calls, placed[key], key)
        if key == "bwd":
            found = found.with_columns(kinds.seq_of(pl.col("name_code")))
        per_call = per_call.join(found.select("call_id", *cols), on="call_id", how="left")
    if not full:
        if kinds.loose.height:  # joined answers: back in the calls' order
            per_call = calls.select("call_id").join(per_call, on="call_id", how="left", maintain_order="left")
        return per_call
    per_call = per_call.with_columns(
        (pl.col("_node").is_not_null() | pl.col("eval_id").is_not_null()).alias("any_bwd"),
        pl.col("any_opt").fill_null(False),
    ).drop("_node")
    # the keys joined alone and their answers added: a join of the whole frame copies every
    # column (a million calls' dozen, twice, this step's peak on a dense trace)
    if kinds.loose.height == 0 and kinds.first_nodes is not None:  # in the calls' order: found by row
        ev = kinds.eval_nodes(placed["eval"])
    else:
        ev = per_call.select("eval_id").join(kinds.node_of_eval, on="eval_id", how="left", maintain_order="left")
    per_call = per_call.with_columns(
        pl.coalesce(pl.col("bseq"), ev["eseq"]).alias("bseq"),
        pl.coalesce(pl.col("bstart"), ev["estart"]).alias("bstart"),
    ).drop("eval_id")
    del ev
    if kinds.loose.height:  # joined answers: back in the calls' order
        per_call = calls.select("call_id").join(per_call, on="call_id", how="left", maintain_order="left")
    flags = user_flags(trace)
    return per_call.hstack(per_call.select("uid").join(flags, on="uid", how="left", maintain_order="left").drop("uid"))


_LAYER_AND_OP = frozenset({"uid", "fop"})  # the kinds _contexts answers without `full`


def _paths_open_at(trace: Trace, labels: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """For launches from threads without user ranges (the autograd engine's), the user path open
    at that moment in the same process (`nv.user_range_open_at`): backward kernels land under
    `profiled_step > backward_pass`, as the range tree and compare count them. (call_id, open_uid)."""
    ranges = nv.projection_ranges(trace)
    users = ranges.join(labels.filter(~pl.col("marker")).select("name_code"), on="name_code", how="inner")
    inner = nv.user_range_open_at(users, calls.select("call_id", "global_tid", pl.col("start").alias("t")))
    return inner.select("call_id", pl.col("id").alias("open_uid"))


def _forward_of_backward(trace: Trace, kinds: _Kinds, nodes: pl.DataFrame) -> pl.DataFrame:
    """(bseq, bstart) -> context of the forward op with that autograd sequence number: the
    latest op marker with `seq = N` that started before the backward node. That op's user range
    (`b_uid`) and outermost op (`b_fop_code`), as _contexts gives them."""
    ranges = nv.projection_ranges(trace)
    # the forward op ranges with a seq, picked by code (codes index the labels: a gather, not a
    # join of millions of ranges against millions of labels)
    codes = ranges["name_code"].to_numpy()
    fwd = kinds.fop_by_code & kinds.seq.is_not_null().to_numpy()
    # matched on (seq, start) alone, by row: the other columns are gathered for the matches only
    # (a million ops' ids, ends and threads sorted with them were 0.15 GB at this step's peak)
    at = pl.Series("_row", np.flatnonzero(fwd[codes]))
    fw = pl.DataFrame([at, ranges["start"].gather(at).alias("fstart"), kinds.seq.gather(codes[at.to_numpy()])])
    q = nodes.select("bseq", "bstart").unique().drop_nulls()
    m = q.sort("bstart").join_asof(
        fw.rename({"seq": "bseq"}).sort("fstart"),
        left_on="bstart",
        right_on="fstart",
        by="bseq",
        strategy="backward",
        check_sortedness=False,
    )
    del fw
    m = m.filter(pl.col("_row").is_not_null())
    m = m.with_columns(ranges.select(pl.col("id", "end", "global_tid").gather(m["_row"]))).drop("_row")
    m = m.filter(pl.col("id").is_not_null())
    calls = m.select(
        pl.int_range(pl.len()).cast(pl.Int64).alias("call_id"), "global_tid", pl.col("fstart").alias("start"), "end"
    )
    ctx = _contexts(trace, calls, kinds, full=False)  # a forward op's layer and op, nothing more
    return (
        m.with_columns(pl.int_range(pl.len()).cast(pl.Int64).alias("call_id"))
        .join(ctx, on="call_id", how="left")
        .select("bseq", "bstart", pl.col("uid").alias("b_uid"), pl.col("fop_code").alias("b_fop_code"))
    )


def _dims(s: str | None) -> list[list[int]] | None:
    if not s:
        return None
    try:
        out = []
        for part in re.findall(r"\[([^\[\]]*)\]", s):
            out.append([int(x) for x in part.split(",") if x.strip()])
        return out
    except ValueError:
        return None


def _fmt_dims(d: list[int]) -> str:
    return "(" + ",".join(str(x) for x in d) + ")" if len(d) != 1 else str(d[0])


def params_of(op: str | None, sizes: str | None) -> tuple[str, int | None, int | None]:
    """PyProf-style parameter text and a FLOP / element estimate for one op and its input shapes."""
    dims = _dims(sizes)
    if not op or dims is None:
        return "-", None, None
    tensors = [d for d in dims if d]
    if op in ("linear",) and len(dims) >= 2 and dims[0] and dims[1]:
        x, w = dims[0], dims[1]
        m, k = w[0], x[-1]
        n_dims = x[:-1]
        n = 1
        for v in n_dims:
            n *= v
        return f"M={m},N={_fmt_dims(n_dims)},K={k}", 2 * m * n * k, m * n
    if op in ("mm", "addmm") and len(tensors) >= 2:
        a, b = (tensors[-2], tensors[-1])
        if len(a) == 2 and len(b) == 2:
            return f"M={a[0]},N={b[1]},K={a[1]}", 2 * a[0] * b[1] * a[1], a[0] * b[1]
    if op in ("bmm", "baddbmm") and len(tensors) >= 2:
        a, b = tensors[-2], tensors[-1]
        if len(a) == 3 and len(b) == 3:
            return f"B={a[0]},M={a[1]},N={b[2]},K={a[2]}", 2 * a[0] * a[1] * b[2] * a[2], a[0] * a[1] * b[2]
    if op in ("matmul", "einsum") and len(tensors) >= 2:
        a, b = tensors[0], tensors[1]
        if len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2]:
            batch = 1
            for v in a[:-2]:
                batch *= v
            m, k, n = a[-2], a[-1], b[-1]
            return f"A={_fmt_dims(a)},B={_fmt_dims(b)}", 2 * batch * m * n * k, batch * m * n
    if op == "embedding" and len(dims) >= 2 and dims[0] and dims[1]:
        paren = "({})".format
        return (f"I={paren(','.join(map(str, dims[1])))},E={paren(','.join(map(str, dims[0])))}", None, None)
    elems = None
    if tensors:
        elems = 1
        for v in tensors[0]:
            elems *= v
    return ";".join("[" + ",".join(str(v) for v in d) + "]" for d in dims), None, elems


def _kernel_columns(ops: pl.DataFrame, shapes: bool) -> pl.DataFrame:
    """The columns of each GPU op that its kernel alone decides, in the ops' order: the name's
    category and `tc` (categories.name_categories), and with `shapes` Grid and Block."""
    got = (
        ops.select("Kernel")
        .join(name_categories(ops["Kernel"]), on="Kernel", how="left", maintain_order="left")
        .drop("Kernel")
    )
    if shapes:
        got = got.with_columns(_launch_dims(ops, "grid").alias("Grid"), _launch_dims(ops, "block").alias("Block"))
    return got


def _launch_dims(ops: pl.DataFrame, what: str) -> pl.Series:
    """`128x1x1`, or `-` where the trace has no launch dimensions (copies, AMD and old
    torch.profiler traces) rather than a made-up 0x0x0. Written once per distinct launch shape
    (a few dozen on a dense trace), each packed into one integer, and joined to the ops: text
    made for each of a million ops was 0.14 CPU s a column."""
    x, y, z = (pl.col(f"{what}_{a}") for a in "xyz")
    known = (pl.col("kind") == "kernel") & x.is_not_null() & (x > 0)
    y, z = y.fill_null(1), z.fill_null(1)
    shown = pl.when(known).then(pl.format("{}x{}x{}", x, y, z)).otherwise(pl.lit("-")).alias(what)
    # x < 2^31 and y, z < 2^16 (CUDA's limits) pack into one Int64; else each op's text is made
    if not ops.select((~known | ((x < _X) & y.is_between(0, _YZ - 1) & z.is_between(0, _YZ - 1))).all()).item():
        return ops.select(shown)[what]
    key = ops.select(pl.when(known).then(x * (_YZ * _YZ) + y * _YZ + z).otherwise(-1).alias("_dims"))
    k = pl.col("_dims")
    texts = key.unique().select(
        "_dims",
        pl.when(k >= 0)
        .then(pl.format("{}x{}x{}", k // (_YZ * _YZ), (k // _YZ) % _YZ, k % _YZ))
        .otherwise(pl.lit("-"))
        .alias(what),
    )
    return key.join(texts, on="_dims", how="left", maintain_order="left")[what]


_X, _YZ = 1 << 31, 1 << 16  # the packed launch dimensions' bounds


_NO_PATHS = pl.DataFrame(schema={"uid": pl.Int64, "path": pl.String, "layer": pl.String})
_NO_OPS = pl.DataFrame(schema={"name_code": pl.Int64, "label": pl.String})


def shown(table: pl.DataFrame) -> pl.DataFrame:
    """The attributed table without its hidden helper columns."""
    return table.select(COLUMNS)


class _Named(NamedTuple):
    """What attribution takes from the ranges' names (`_range_names`)."""

    have: bool  # the trace has labelled ranges
    release: bool  # the names go once attribution has what it needs of them
    paths: pl.DataFrame  # user_paths
    labels: pl.DataFrame  # op_labels (its flags only, where the names went)
    texts: _OpTexts | _OpNames


def _range_names(trace: Trace, shapes: bool = True) -> _Named:
    """user_paths, op_labels and the forward ops' text. A command that asks nothing else of the
    ranges (`Trace.ranges_only_for_attribution`) or of their names (`names_only_for_attribution`)
    lets the names go once these are made (0.7 GB on a dense trace): from here on only the ops
    kernels end up with have their text read."""
    have_nvtx = trace.has("NVTX_EVENTS") and nv.labelled(trace).height > 0
    # Ranges are carried as integer keys (uid: a user range of user_paths; fop_code: an op
    # marker's name_code) until the end; the strings come from small tables by joins, which
    # polars makes as views of those tables' bytes. A string `when/then` or `replace` over a
    # million rows would copy every string instead (an op's Params text is up to 9 kB).
    nesting = None
    if have_nvtx:  # what user_paths reads of the names and ranges, taken before the names go
        nv.projection_ranges(trace)
        if shapes and trace.ranges_only_for_attribution:
            # the nesting reads the ranges alone: made on a thread while the labels are flagged,
            # each mostly one core's work that lets the interpreter go (numpy's sorts, polars' text
            # scans). Only where the names go and nothing else was made of them (`kview kernels`):
            # beside the names held longer (the Overview's, the explorer worker's) it raised the
            # peak (the Overview's 1.43 -> 1.63 GB on dense_x25)
            nesting = _on_a_thread(nv.projection_nesting, trace)
        user_labels(trace)
    release = have_nvtx and (trace.ranges_only_for_attribution or trace.names_only_for_attribution)
    if release:
        # from here on only the labels' text and flags are read: the names' own column (their
        # views, 90 MB on a dense trace; the labels' text shares their bytes) goes before the
        # labels are flagged, the highest point of a command that lets the names go
        labels = nv.labels(trace).drop("name", strict=False)
        trace.store.drop(nv.labelled_ranges, nv.labels)
        # the heads are read by _OpNames alone: made for it only (not a column of 5.6M codes)
        labels = _flagged(labels, heads=not shapes)
    else:
        labels = op_labels(trace, heads=False) if have_nvtx else _NO_OPS
    candidates = None
    if release and shapes:
        if nesting is not None:
            nesting.result()
        candidates = _op_candidates(trace, labels)
    # a table without the ops' shapes keeps only each op label's op name where the names go
    texts = _OpNames(labels) if release and not shapes else _OpTexts(labels, candidates)
    del candidates
    labels = labels.drop("head", strict=False)  # read by _OpNames alone
    if release:
        labels = labels.drop("label")
    # made once the names went: its joins of a million ranges' levels do not meet them (0.2 GB
    # over the names on a dense trace)
    paths = (user_paths(trace) if shapes else user_flags(trace)) if have_nvtx else _NO_PATHS
    if nesting is not None:  # made (or its error raised) here, not on a later ask
        nesting.result()
    return _Named(have_nvtx, release, paths, labels, texts)


T = TypeVar("T")


def _on_a_thread(table: Callable[[T], object], of: T) -> Future:
    """`table(of)` started on a thread of its own; a later ask waits for it."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="kview-table")
    try:
        return pool.submit(table, of)
    finally:
        pool.shutdown(wait=False)  # the thread ends once the table is made


def _op_candidates(trace: Trace, labels: pl.DataFrame) -> np.ndarray:
    """The name codes, sorted, of the forward-op labels a call can end up with: an op_code is the
    outermost forward op around a call, a push/pop forward op with none above it or a start/end
    range."""
    nest = nv.projection_nesting(trace)
    codes = nest.ranges["name_code"].to_numpy()  # in the ranges' order, not gathered into the tree's
    fop = _by_code(labels, "fwd_op", _code_count(codes, labels))
    mask = nest.in_tree_order(fop[codes])
    levels = nest.levels
    if levels is None:  # too deep to go down level by level: the outermost answers by pointer jumping
        rows = nest.outermost(mask)
        top = rows == np.arange(len(rows), dtype=rows.dtype)
        del rows
    else:
        # per tree row, whether a forward op is at or above it, a level at a time from the roots
        # (a last slot, False, that a root's parent -1 reads); a forward op without one above
        # it is an outermost one
        covered = np.zeros(len(mask) + 1, dtype=bool)
        top = mask.copy()
        for rows in levels:
            above = covered[nest.parent[rows]]
            top[rows] &= ~above
            covered[rows] = above | mask[rows]
        del covered
    want = np.zeros(len(fop), dtype=bool)
    want[codes[nest.rows(np.flatnonzero(top))]] = True
    loose = nv.projection_ranges(trace).filter(pl.col("style") != "PushPop")["name_code"].to_numpy()
    want[loose[fop[loose]]] = True
    return np.flatnonzero(want)


def _code_count(codes: np.ndarray, labels: pl.DataFrame) -> int:
    """The length of an array indexed by the name codes of the ranges (`codes`) and of `labels`."""
    return int(max(codes.max(initial=-1), labels["name_code"].max() or 0)) + 1


def _by_code(labels: pl.DataFrame, flag: str, size: int) -> np.ndarray:
    """Per name code (0..size-1): whether its label is of op_labels' kind `flag` ("marker": a
    user range, no marker); False for a code of no label."""
    values = labels[flag].fill_null(False).to_numpy()
    if flag == "marker":
        values = ~values
    if labels.height == size and nv.codes_are_rows(labels):  # in code order already: no scatter
        return values
    by_code = np.zeros(size, dtype=bool)
    by_code[labels["name_code"].to_numpy()] = values
    return by_code


def _call_columns(
    trace: Trace, ids: pl.DataFrame, calls: pl.DataFrame, named: _Named, shapes: bool = True
) -> pl.DataFrame:
    """What attribution adds to each of `ids` (call_id) from its CPU call in `calls` (call_id,
    global_tid, start, end; a call_id without one gets nulls): Direction, layer, op_, Params,
    path_ and the integer keys behind them, in the order of `ids`; without `shapes`, Direction
    and op_ (and the keys) only."""
    have_nvtx, release, paths, labels, texts = named
    w = ids  # the columns attribution adds, joined on this narrow frame
    # every id a call (every GPU op launched in the trace's window): the calls' columns line up
    # with the ids and are added, not joined
    aligned = calls.height == ids.height
    if have_nvtx:
        kinds = _Kinds(trace, labels)
        ctx = _contexts(trace, calls, kinds)  # in the calls' order
        back = _forward_of_backward(trace, kinds, ctx.select("bseq", "bstart").filter(pl.col("bseq").is_not_null()))
        del kinds
        # the kinds' arrays (numpy's, the C allocator's) handed back before the joins that follow:
        # kept, they were this step's peak
        return_freed_memory()
        # the keys joined alone and the answers added (one row per key in `back`), in the calls' order
        ctx = ctx.hstack(
            ctx.select("bseq", "bstart")
            .join(back, on=["bseq", "bstart"], how="left", maintain_order="left")
            .select("b_uid", "b_fop_code")
        )
        # calls without a path of their own (no user range, or one user_paths does not know)
        pathless = ~pl.col("uid").is_in(paths["uid"].implode()).fill_null(False)
        orphan = calls.filter(ctx.select(pathless).to_series())
        opened = _paths_open_at(trace, labels, orphan)  # one row per call at most
        ctx = ctx.hstack(
            ctx.select("call_id").join(opened, on="call_id", how="left", maintain_order="left").drop("call_id")
        )
        del opened
        if release and trace.ranges_only_for_attribution:  # every call placed: the ranges and their nesting go too
            nv.release(trace)
        w = w.hstack(ctx.drop("call_id")) if aligned else w.join(ctx, on="call_id", how="left", maintain_order="left")
    else:
        for c in ("uid", "fop_code", "bseq", "b_uid", "b_fop_code", "open_uid"):
            w = w.with_columns(pl.lit(None, dtype=pl.Int64).alias(c))
        for c in ("in_fwd", "in_bwd", "in_opt", "any_bwd", "any_opt"):
            w = w.with_columns(pl.lit(None, dtype=pl.Boolean).alias(c))
    f = pl.col
    # without op markers the backward pass still shows: a launch from the autograd engine's
    # thread, or one made while a range named like backward was open in its process (on any
    # thread: the main thread's `backward_pass` around the autograd thread's launches)
    open_bwd = paths.select(pl.col("uid").alias("open_uid"), pl.col("in_bwd").alias("open_bwd")) if have_nvtx else None
    if open_bwd is not None and "in_bwd" in paths.columns:
        w = w.join(open_bwd, on="open_uid", how="left", maintain_order="left")
    else:
        w = w.with_columns(pl.lit(None, dtype=pl.Boolean).alias("open_bwd"))
    engine = autograd_threads(trace)
    tid_of = calls.select("call_id", pl.col("global_tid").is_in(engine.implode()).alias("on_engine"))
    w = w.hstack(tid_of.drop("call_id")) if aligned else w.join(tid_of, on="call_id", how="left", maintain_order="left")
    direction = (
        pl.when(f("in_opt").fill_null(False) | f("any_opt").fill_null(False))
        .then(pl.lit("optim"))
        .when(
            f("any_bwd").fill_null(False)
            | f("in_bwd").fill_null(False)
            | f("open_bwd").fill_null(False)
            | f("on_engine").fill_null(False)
        )
        .then(pl.lit("bprop"))
        .when(f("in_fwd").fill_null(False) | f("fop_code").is_not_null())
        .then(pl.lit("fprop"))
        .otherwise(pl.lit("-"))
    )
    w = w.with_columns(direction.alias("Direction"))
    # backward work takes its forward op's layer and op (every op marker has an op name, so a
    # found forward op is a b_fop_code)
    is_b = (f("Direction") == "bprop") & f("b_fop_code").is_not_null()
    w = w.with_columns(
        pl.when(is_b).then(f("b_uid")).otherwise(f("uid")).alias("layer_uid"),
        pl.when(is_b).then(f("b_fop_code")).otherwise(f("fop_code")).alias("op_code"),
    )
    # Params and FLOP models are computed once per distinct (op, shapes), not per kernel.
    codes = w.select("op_code").unique()
    fields = texts.fields(codes["op_code"].drop_nulls(), sizes=shapes)
    codes = codes.join(
        fields.select(pl.col("name_code").alias("op_code"), pl.col("op").alias("op_"), pl.col("sizes").alias("sizes_")),
        on="op_code",
        how="left",
    )
    if not shapes:
        return w.join(codes.drop("sizes_"), on="op_code", how="left", nulls_equal=True, maintain_order="left")
    keys = codes.select("op_", "sizes_").unique()
    parsed = [params_of(o, s) for o, s in keys.iter_rows()]
    keys = keys.with_columns(
        pl.Series("Params", [p[0] for p in parsed], dtype=pl.String),
        pl.Series("op_flops", [p[1] for p in parsed], dtype=pl.Int64),
        pl.Series("op_elems", [p[2] for p in parsed], dtype=pl.Int64),
    )
    codes = codes.join(keys, on=["op_", "sizes_"], how="left", nulls_equal=True).drop("sizes_")
    w = w.join(codes, on="op_code", how="left", nulls_equal=True, maintain_order="left")
    # shown text of a path or layer: an empty one reads `-`, made on the small table
    dash = {c: pl.when(f(c) == "").then(pl.lit("-")).otherwise(f(c)).alias(c) for c in ("path", "layer")}
    w = (
        w.join(
            paths.select(pl.col("uid").alias("layer_uid"), dash["layer"]),
            on="layer_uid",
            how="left",
            maintain_order="left",
        )
        .join(paths.select("uid", dash["path"]), on="uid", how="left", maintain_order="left")
        .join(
            paths.select(pl.col("uid").alias("open_uid"), dash["path"].alias("open_path")),
            on="open_uid",
            how="left",
            maintain_order="left",
        )
        .with_columns(pl.coalesce("path", "open_path").alias("path_"))
    )
    return w


def call_contexts(trace: Trace, calls: pl.DataFrame) -> pl.DataFrame:
    """Direction, Layer and Op of CPU calls other than kernel launches (call_id, global_tid,
    start, end): an allocation, say, read as a launch made there would be."""
    w = _call_columns(trace, calls.select("call_id"), calls, _range_names(trace))
    return w.select(
        "call_id",
        "Direction",
        pl.col("layer").fill_null("-").alias("Layer"),
        pl.col("op_").fill_null("-").alias("Op"),
    )


# kept in the disk cache: a reopen reads the table back instead of attributing again
@derived(key="attribution", version="1", persist=True)
def attribute(trace: Trace) -> pl.DataFrame:
    """The attributed kernel table (columns COLUMNS, plus hidden `_grid`/`_block` totals),
    one row per GPU op, ordered by start."""
    return _attributed(trace, shapes=True)


# what the Overview reads of the attributed table (its categories, top kernels, idle gaps and
# launches' ops)
CATEGORIZED = ["Idx", "Kernel", "Category", "Duration (ns)", "Start (ns)", "Stream", "Device", "Op"]


@derived
def categorized(trace: Trace) -> pl.DataFrame:
    """attribute()'s columns CATEGORIZED, equal to its, made without what only the whole table
    shows (the ops' shapes, Params and FLOPs, the NVTX paths and layers, the launch dimensions):
    for a command that asks no more of it (`kview overview`). Where the names go during
    attribution, each forward-op label keeps only its op name, not its packed text."""
    made = trace.store.peek(attribute)
    if made is None and trace.store.on_disk(["attribution"]):  # read back, not made
        made = attribute(trace)
    return made.select(CATEGORIZED) if made is not None else _attributed(trace, shapes=False)


def launch_ops(trace: Trace) -> pl.DataFrame:
    """(Idx, Op) of every GPU op: categorized()'s where a command made only that (`kview
    overview`), else the attributed table's."""
    made = trace.store.peek(categorized)
    if made is not None and trace.store.peek(attribute) is None:
        return made.select("Idx", "Op")
    return attribute(trace).select("Idx", "Op")


def _attributed(trace: Trace, shapes: bool) -> pl.DataFrame:
    """attribute(), or with `shapes` False categorized()."""
    # where the names go once taken (kview kernels), they are taken before the GPU ops are read:
    # the NVTX read and labelling (1.3 GB at their peak on a dense trace) do not meet the ops
    taken = _range_names(trace, shapes) if trace.ranges_only_for_attribution and _has_gpu_ops(trace) else None
    ops = launched_ops(trace)
    if ops.height == 0:  # a trace without GPU work: the same columns and types, no rows
        return pl.DataFrame(schema=SCHEMA if shapes else {c: SCHEMA[c] for c in CATEGORIZED})
    ops = ops.with_row_index("call_id").with_columns(pl.col("call_id").cast(pl.Int64))
    calls = ops.filter(pl.col("r_start").is_not_null()).select(
        "call_id", "global_tid", pl.col("r_start").alias("start"), pl.col("r_end").alias("end")
    )
    # what is read of the kernels alone is made on a thread while the calls' contexts are found
    # (their numpy walks hold one core, the other waits)
    kernel_side = _on_a_thread(functools.partial(_kernel_columns, shapes=shapes), ops)
    w = _call_columns(trace, ops.select("call_id"), calls, taken or _range_names(trace, shapes), shapes)
    del taken
    f = pl.col
    # the context columns were joined on a narrow frame in the ops' order: added, not joined
    ops = ops.hstack(w.drop("call_id")).hstack(kernel_side.result())
    named = f("name_category")
    cat = (
        pl.when(f("kind") == "memcpy")
        .then(pl.lit("memcpy"))
        .when(f("kind") == "memset")
        .then(pl.lit("memset"))
        .when(named == "communication")
        .then(named)
        .when(f("Direction") == "optim")
        .then(pl.lit("optimizer"))
        .when(named.is_not_null())
        .then(named)
    )
    for label, ops_ in OP_CATEGORIES.items():  # helper kernels named after nothing, placed by their op
        cat = cat.when(f("op_").is_in(ops_)).then(pl.lit(label))
    ops = ops.with_columns(cat.otherwise(pl.lit("other")).alias("Category"))
    if not shapes:
        return ops.select(
            "Idx",
            "Kernel",
            "Category",
            (f("end") - f("start")).alias("Duration (ns)"),
            f("start").alias("Start (ns)"),
            f("stream").alias("Stream"),
            f("device").alias("Device"),
            f("op_").fill_null("-").alias("Op"),
        )
    gemm = f("Category") == "gemm"
    dur = f("end") - f("start")
    flops = (
        pl.when(gemm & f("op_flops").is_not_null())
        .then(f("op_flops"))
        .when((f("Category") == "elementwise") & f("op_elems").is_not_null())
        .then(f("op_elems"))
    )
    bytes_ = (
        pl.when(f("kind") != "kernel")
        .then(f("bytes"))
        .when((f("Category") == "elementwise") & f("op_elems").is_not_null())
        .then(f("op_elems") * 3 * 4)
    )
    ops = ops.with_columns(flops.alias("FLOPs"), bytes_.alias("Bytes"), dur.alias("Duration (ns)"))
    return ops.select(
        "Idx",
        "Direction",
        f("layer").fill_null("-").alias("Layer"),
        f("op_").fill_null("-").alias("Op"),
        f("Params").fill_null("-"),
        "Kernel",
        "Category",
        "Duration (ns)",
        f("start").alias("Start (ns)"),
        f("stream").alias("Stream"),
        f("device").alias("Device"),
        "Grid",
        "Block",
        f("correlation").alias("Correlation"),
        f("path_").fill_null("-").alias("NVTX Path"),
        # on Tensor Cores: true or false for GEMM and attention kernels, missing for the rest
        pl.when(gemm | (f("Category") == "attention")).then(f("tc").fill_null(False)).alias("TC"),
        "FLOPs",
        "Bytes",
        pl.when(f("FLOPs").is_not_null() & (f("Duration (ns)") > 0))
        .then((f("FLOPs").cast(pl.Float64) / f("Duration (ns)").cast(pl.Float64) / 1e3).round(3))
        .alias("TFLOP/s"),
        # hidden helpers for filters and sorting (not part of the shown table)
        (f("grid_x") * f("grid_y") * f("grid_z")).alias("_grid"),
        (f("block_x") * f("block_y") * f("block_z")).alias("_block"),
    )
